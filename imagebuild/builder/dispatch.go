package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/sys/signal"

	"github.com/husk-vm/husk/imagebuild"
)

// emptyTarDiffID is the diffID of a tar with no entries. dockerd commits
// a step whose change set is empty as an empty layer (no diffID, history
// empty_layer), and so does the builder.
const emptyTarDiffID = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"

// shellOf is the shell that prefixes shell-form commands and history
// lines: SHELL's, else /bin/sh -c.
func shellOf(st *stage) []string {
	if len(st.cfg.Config.Shell) > 0 {
		return append([]string(nil), st.cfg.Config.Shell...)
	}
	return []string{"/bin/sh", "-c"}
}

// nopComment is the history line of a step that runs nothing, in the two
// forms dockerd uses: most instructions pass "#(nop) " and the comment as
// two arguments (hence two spaces), WORKDIR, COPY and ADD as one.
func nopComment(st *stage, comment string, oneArg bool) string {
	if oneArg {
		return strings.Join(append(shellOf(st), "#(nop) "+comment), " ")
	}
	return strings.Join(append(shellOf(st), "#(nop) ", comment), " ")
}

// meta commits a step that only changes the config.
func (bd *build) metaStep(ctx context.Context, st *stage, comment string) error {
	return bd.runStep(ctx, st, nopComment(st, comment, false), true, func(context.Context, *intermediate) (*imagebuild.LayerInfo, error) {
		return nil, nil
	})
}

func (bd *build) dispatch(ctx context.Context, st *stage, cmd instructions.Command) error {
	if ex, ok := cmd.(instructions.SupportsSingleWordExpansion); ok {
		e := bd.expandEnv(st)
		if err := ex.Expand(func(w string) (string, error) { return bd.expand(w, e) }); err != nil {
			return err
		}
	}
	if ex, ok := cmd.(instructions.SupportsSingleWordExpansionRaw); ok && bd.opts.BuildKit {
		// COPY <<EOF's documents, expanded unless the delimiter was
		// quoted, with quotes left as they are, as BuildKit does.
		lex := shell.NewLex('\\')
		lex.SkipProcessQuotes = true
		e := bd.expandEnv(st)
		if err := ex.ExpandRaw(func(w string) (string, error) {
			out, _, err := lex.ProcessWord(w, e)
			return out, err
		}); err != nil {
			return err
		}
	}
	c := &st.cfg.Config
	switch cmd := cmd.(type) {
	case *instructions.EnvCommand:
		parts := []string{"ENV"}
		for _, kv := range cmd.Env {
			parts = append(parts, kv.String())
			c.Env = setEnv(c.Env, kv.Key, kv.Value)
		}
		return bd.metaStep(ctx, st, strings.Join(parts, " "))
	case *instructions.LabelCommand:
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		parts := []string{"LABEL"}
		for _, kv := range cmd.Labels {
			c.Labels[kv.Key] = kv.Value
			parts = append(parts, kv.String())
		}
		return bd.metaStep(ctx, st, strings.Join(parts, " "))
	case *instructions.MaintainerCommand:
		st.cfg.Author = cmd.Maintainer
		return bd.metaStep(ctx, st, "MAINTAINER "+cmd.Maintainer)
	case *instructions.UserCommand:
		c.User = cmd.User
		return bd.metaStep(ctx, st, "USER "+cmd.User)
	case *instructions.ExposeCommand:
		return bd.expose(ctx, st, cmd)
	case *instructions.VolumeCommand:
		if c.Volumes == nil {
			c.Volumes = map[string]struct{}{}
		}
		for _, v := range cmd.Volumes {
			if v == "" {
				return errors.New("VOLUME specified can not be an empty string")
			}
			c.Volumes[v] = struct{}{}
		}
		return bd.metaStep(ctx, st, fmt.Sprintf("VOLUME %v", cmd.Volumes))
	case *instructions.StopSignalCommand:
		if !validSignal(cmd.Signal) {
			return errdefs.ErrInvalidArgument.WithMessage("Invalid signal: " + cmd.Signal)
		}
		c.StopSignal = cmd.Signal
		return bd.metaStep(ctx, st, "STOPSIGNAL "+cmd.Signal)
	case *instructions.HealthCheckCommand:
		return bd.healthcheck(ctx, st, cmd)
	case *instructions.ShellCommand:
		c.Shell = append([]string(nil), cmd.Shell...)
		return bd.metaStep(ctx, st, fmt.Sprintf("SHELL %v", c.Shell))
	case *instructions.OnbuildCommand:
		c.OnBuild = append(c.OnBuild, cmd.Expression)
		return bd.metaStep(ctx, st, "ONBUILD "+cmd.Expression)
	case *instructions.CmdCommand:
		c.Cmd = resolveCmdLine(st, cmd.ShellDependantCmdLine)
		// Escaped arguments are a Windows notion: dockerd clears the flag
		// on Linux, whatever the base image had.
		c.ArgsEscaped = false
		if err := bd.metaStep(ctx, st, fmt.Sprintf("CMD %q", c.Cmd)); err != nil {
			return err
		}
		if len(cmd.CmdLine) != 0 {
			st.cmdSet = true
		}
		return nil
	case *instructions.EntrypointCommand:
		c.Entrypoint = resolveCmdLine(st, cmd.ShellDependantCmdLine)
		c.ArgsEscaped = false
		if !st.cmdSet {
			c.Cmd = nil
		}
		return bd.metaStep(ctx, st, fmt.Sprintf("ENTRYPOINT %q", c.Entrypoint))
	case *instructions.ArgCommand:
		return bd.arg(ctx, st, cmd)
	case *instructions.WorkdirCommand:
		return bd.workdir(ctx, st, cmd)
	case *instructions.RunCommand:
		return bd.runCmd(ctx, st, cmd)
	// For a BuildKit client --link is taken as a plain copy: it changes
	// how BuildKit may reuse the layer, not the files the image holds.
	case *instructions.CopyCommand:
		if (cmd.Link && !bd.opts.BuildKit) || cmd.Parents || len(cmd.ExcludePatterns) > 0 {
			return bd.needsBuildKit("the --link, --parents and --exclude options require BuildKit", "COPY --parents and --exclude")
		}
		return bd.copyCmd(ctx, st, copyRequest{name: "COPY", sd: cmd.SourcesAndDest, from: cmd.From, chown: cmd.Chown, chmod: cmd.Chmod})
	case *instructions.AddCommand:
		if (!bd.opts.BuildKit && (cmd.Link || cmd.Checksum != "")) || len(cmd.ExcludePatterns) > 0 {
			return bd.needsBuildKit("the --link, --exclude and --checksum options require BuildKit", "ADD --exclude")
		}
		if cmd.Checksum != "" && (len(cmd.SourcePaths) != 1 || !isURL(cmd.SourcePaths[0])) {
			// BuildKit's words; husk's ADD takes no git sources.
			if len(cmd.SourcePaths) != 1 {
				return errdefs.ErrInvalidArgument.WithMessage("checksum can't be specified for multiple sources")
			}
			return errdefs.ErrInvalidArgument.WithMessage("checksum requires HTTP(S) or Git sources")
		}
		return bd.copyCmd(ctx, st, copyRequest{name: "ADD", sd: cmd.SourcesAndDest, chown: cmd.Chown, chmod: cmd.Chmod, add: true, checksum: cmd.Checksum})
	}
	return errdefs.ErrNotImplemented.WithMessage(fmt.Sprintf("%s is not supported by the classic builder", strings.ToUpper(cmd.Name())))
}

// setEnv sets key in env, in place if present, as dockerd's ENV does.
func setEnv(envs []string, key, value string) []string {
	kv := key + "=" + value
	for i, e := range envs {
		if k, _, _ := strings.Cut(e, "="); k == key {
			out := append([]string(nil), envs...)
			out[i] = kv
			return out
		}
	}
	return append(append([]string(nil), envs...), kv)
}

// resolveCmdLine prefixes the shell to a shell-form command.
func resolveCmdLine(st *stage, cl instructions.ShellDependantCmdLine) []string {
	if cl.PrependShell && cl.CmdLine != nil {
		return append(shellOf(st), cl.CmdLine...)
	}
	return append([]string(nil), cl.CmdLine...)
}

func (bd *build) expose(ctx context.Context, st *stage, cmd *instructions.ExposeCommand) error {
	e := bd.expandEnv(st)
	var ports []string
	for _, p := range cmd.Ports {
		words, err := bd.shlex.ProcessWords(p, e)
		if err != nil {
			return err
		}
		ports = append(ports, words...)
	}
	c := &st.cfg.Config
	if c.ExposedPorts == nil {
		c.ExposedPorts = map[string]struct{}{}
	}
	for _, p := range ports {
		specs, err := parsePortSpec(p)
		if err != nil {
			return err
		}
		for _, s := range specs {
			c.ExposedPorts[s] = struct{}{}
		}
	}
	return bd.metaStep(ctx, st, "EXPOSE "+strings.Join(ports, " "))
}

// parsePortSpec turns "80", "80/udp" or "8000-8002/tcp" into "port/proto"
// keys. An "ip:host:" prefix, which EXPOSE ignores, is dropped.
func parsePortSpec(spec string) ([]string, error) {
	p := spec
	if i := strings.LastIndexByte(p, ':'); i >= 0 {
		p = p[i+1:]
	}
	port, proto, _ := strings.Cut(p, "/")
	if proto == "" {
		proto = "tcp"
	}
	proto = strings.ToLower(proto)
	if proto != "tcp" && proto != "udp" && proto != "sctp" {
		return nil, errdefs.ErrInvalidArgument.WithMessage("invalid proto: " + proto)
	}
	lo, hi, isRange := strings.Cut(port, "-")
	start, err := strconv.ParseUint(lo, 10, 16)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage("invalid containerPort: " + port)
	}
	end := start
	if isRange {
		if end, err = strconv.ParseUint(hi, 10, 16); err != nil || end < start {
			return nil, errdefs.ErrInvalidArgument.WithMessage("invalid containerPort: " + port)
		}
	}
	var out []string
	for n := start; n <= end; n++ {
		out = append(out, fmt.Sprintf("%d/%s", n, proto))
	}
	return out, nil
}

// validSignal: STOPSIGNAL as dockerd's builder checks it, with the
// same signal table (moby/sys/signal): names with or without SIG,
// RTMIN+n and RTMAX-n, or a number.
func validSignal(s string) bool {
	_, err := signal.ParseSignal(s)
	return err == nil
}

func (bd *build) healthcheck(ctx context.Context, st *stage, cmd *instructions.HealthCheckCommand) error {
	c := &st.cfg.Config
	if c.Healthcheck != nil {
		if old := c.Healthcheck.Test; len(old) > 0 && old[0] != "NONE" {
			bd.printf("Note: overriding previous HEALTHCHECK: %v\n", old)
		}
	}
	h := cmd.Health
	c.Healthcheck = &v1.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
	// dockerd 20.10 formats its HealthConfig struct with %q.
	comment := fmt.Sprintf("HEALTHCHECK &{%q %q %q %q %q}", h.Test, h.Interval.String(), h.Timeout.String(), h.StartPeriod.String(), rune(h.Retries))
	return bd.metaStep(ctx, st, comment)
}

// arg declares build args in the stage. A value given with --build-arg
// wins over the default; an ARG without a default takes the value of the
// same ARG before FROM.
func (bd *build) arg(ctx context.Context, st *stage, cmd *instructions.ArgCommand) error {
	parts := []string{"ARG"}
	for _, kv := range cmd.Args {
		s := kv.Key
		if kv.Value != nil {
			s += "=" + *kv.Value
		}
		parts = append(parts, s)
		value := kv.Value
		if value == nil {
			if m, ok := bd.meta[kv.Key]; ok {
				value = m
			}
		}
		if given, ok := bd.opts.BuildArgs[kv.Key]; ok && given != nil {
			value = given
		}
		bd.consumed[kv.Key] = true
		st.args = append(st.args, argDecl{key: kv.Key, value: value})
	}
	return bd.metaStep(ctx, st, strings.Join(parts, " "))
}

// workdir sets the working directory and, as dockerd does, creates it in
// a layer of its own when it does not exist yet.
func (bd *build) workdir(ctx context.Context, st *stage, cmd *instructions.WorkdirCommand) error {
	dir := cmd.Path
	if !path.IsAbs(dir) {
		dir = path.Join("/", st.cfg.Config.WorkingDir, dir)
	}
	dir = path.Clean(dir)
	st.cfg.Config.WorkingDir = dir
	return bd.runStep(ctx, st, nopComment(st, "WORKDIR "+dir, true), true, func(ctx context.Context, _ *intermediate) (*imagebuild.LayerInfo, error) {
		fs, err := bd.fsIndex(ctx, st)
		if err != nil {
			return nil, err
		}
		rel, _ := cleanRel(dir)
		if fs.isDir(rel) {
			return nil, nil
		}
		return bd.makeLayer(ctx, fs, func(lw *layerWriter) error {
			return lw.mkdirAll(rel, 0, 0)
		})
	})
}

// onBuild runs the triggers the base image recorded, as dockerd does
// right after FROM.
func (bd *build) onBuild(ctx context.Context, st *stage) error {
	triggers := st.cfg.Config.OnBuild
	if len(triggers) == 0 {
		return nil
	}
	st.cfg.Config.OnBuild = nil
	s := ""
	if len(triggers) > 1 {
		s = "s"
	}
	bd.printf("# Executing %d build trigger%s\n", len(triggers), s)
	for _, t := range triggers {
		ast, err := parser.Parse(strings.NewReader(t))
		if err != nil {
			return parseError(err)
		}
		if len(ast.AST.Children) != 1 {
			return errors.New("onbuild trigger should be a single expression")
		}
		cmd, err := instructions.ParseCommand(ast.AST.Children[0])
		if err != nil {
			return parseError(err)
		}
		if err := bd.dispatch(ctx, st, cmd); err != nil {
			return err
		}
	}
	return nil
}

// heredocScript is the shell script of a RUN with heredocs, as BuildKit
// makes it: a RUN that is one heredoc runs the document's text; any
// other has its documents put back after the line for the shell to read.
// A document that starts with #! BuildKit runs as a file it mounts; husk
// cannot mount one into the step, and refuses it.
func heredocScript(cl instructions.ShellDependantCmdLine) (string, error) {
	if len(cl.CmdLine) != 1 || !cl.PrependShell {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("parsing produced an invalid run command: %v", cl.CmdLine))
	}
	if parser.MustParseHeredoc(cl.CmdLine[0]) != nil {
		data := cl.Files[0].Data
		if cl.Files[0].Chomp {
			data = parser.ChompHeredocContent(data)
		}
		if strings.HasPrefix(data, "#!") {
			return "", errdefs.ErrNotImplemented.WithMessage("a RUN heredoc that starts with #! is not supported by husk's builder")
		}
		return data, nil
	}
	var b strings.Builder
	b.WriteString(cl.CmdLine[0])
	for _, f := range cl.Files {
		b.WriteByte('\n')
		b.WriteString(f.Data)
		b.WriteString(f.Name)
	}
	return b.String(), nil
}

// needsBuildKit refuses a Dockerfile feature only BuildKit has: in
// dockerd's words (classic) to a classic client, and as what husk's
// builder lacks to a BuildKit client, which has BuildKit already.
func (bd *build) needsBuildKit(classic, feature string) error {
	if bd.opts.BuildKit {
		return errdefs.ErrNotImplemented.WithMessage(feature + " is not supported by husk's builder")
	}
	return errdefs.ErrInvalidArgument.WithMessage(classic)
}

// runCmd is RUN: the command runs in the stage's build VM, and its changes
// become the step's layer.
func (bd *build) runCmd(ctx context.Context, st *stage, cmd *instructions.RunCommand) error {
	mounts := &stepMounts{}
	for _, flag := range cmd.FlagsUsed {
		if flag != "mount" || !bd.opts.BuildKit {
			return bd.needsBuildKit(fmt.Sprintf("the --%s option requires BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled", flag), "RUN --"+flag)
		}
		var err error
		if mounts, err = bd.runMounts(ctx, st, instructions.GetMounts(cmd)); err != nil {
			return err
		}
	}
	defer mounts.Close()
	cmdLine := cmd.ShellDependantCmdLine
	if len(cmd.Files) > 0 {
		if !bd.opts.BuildKit {
			return bd.needsBuildKit("heredocs require BuildKit. Refer to https://docs.docker.com/go/buildkit/ to learn how to build images with BuildKit enabled", "heredocs")
		}
		script, err := heredocScript(cmdLine)
		if err != nil {
			return err
		}
		cmdLine.CmdLine = []string{script}
	}
	args := resolveCmdLine(st, cmdLine)
	if len(args) == 0 {
		return errdefs.ErrInvalidArgument.WithMessage("RUN requires at least one argument")
	}
	argEnv, declared := bd.argValues(st)
	saveCmd := args
	if len(declared) > 0 {
		saveCmd = append([]string{fmt.Sprintf("|%d", len(declared))}, declared...)
		saveCmd = append(saveCmd, args...)
	}
	createdBy := strings.Join(saveCmd, " ")
	c := st.cfg.Config
	proc := Process{
		Args:   args,
		Env:    append(append(append([]string(nil), c.Env...), argEnv...), mounts.env...),
		Cwd:    c.WorkingDir,
		User:   c.User,
		Tmpfs:  mounts.tmpfs,
		Binds:  mounts.binds,
		Staged: mounts.staged,
	}
	// The mounts are part of what the step is (secrets aside, as in
	// BuildKit): the same command with other mounts is another step to
	// the cache, though its history line is the same.
	return bd.runStepKeyed(ctx, st, createdBy, mounts.key, true, func(ctx context.Context, ic *intermediate) (*imagebuild.LayerInfo, error) {
		vm, err := bd.sandbox(ctx, st)
		if err != nil {
			return nil, err
		}
		if err := mounts.stage(ctx, vm); err != nil {
			return nil, err
		}
		var vols *volumeChanges
		if len(c.Volumes) > 0 && !bd.opts.BuildKit {
			var mountPoints []byte
			if vols, mountPoints, err = bd.volumesOf(ctx, st); err != nil {
				return nil, err
			}
			if mountPoints != nil {
				if err := vm.PutFiles(ctx, bytes.NewReader(mountPoints)); err != nil {
					return nil, fmt.Errorf("make the volumes' mount points: %w", err)
				}
			}
		}
		// What dockerd's events show of the step's container running.
		ic.event(events.ActionAttach, nil)
		ic.network(events.ActionConnect)
		ic.event(events.ActionStart, nil)
		code, err := vm.Run(ctx, proc, streamWriter{bd.out.Stream, false}, streamWriter{bd.out.Stream, bd.out.Step == nil})
		if err == nil {
			ic.event(events.ActionDie, map[string]string{"exitCode": strconv.Itoa(code)})
			ic.network(events.ActionDisconnect)
		}
		if errdefs.IsInvalidArgument(err) {
			return nil, err // the step's own fault, worded as dockerd words it
		}
		if err != nil {
			return nil, fmt.Errorf("run %q in the build VM: %w", strings.Join(args, " "), err)
		}
		if code != 0 {
			return nil, &ExitError{Command: strings.Join(args, " "), Code: code}
		}
		pr, pw := io.Pipe()
		cut := make(chan struct{})
		go func() {
			defer close(cut)
			pw.CloseWithError(vm.CutLayer(ctx, pw))
		}()
		var layerTar io.Reader = pr
		if vols != nil {
			layerTar = vols.filter(pr)
		}
		layer, err := bd.putLayer(ctx, layerTar)
		pr.CloseWithError(errors.New("layer not taken"))
		// The VM is used again only once its cut is over, whatever part
		// of its stream putLayer took.
		<-cut
		if err != nil {
			return nil, fmt.Errorf("take the layer of RUN from the build VM: %w", err)
		}
		empty := layer.DiffID.String() == emptyTarDiffID
		switch {
		case vols != nil && vols.dropped.Load():
			bd.b.log.Debug("left a RUN step's changes under its volumes out of its layer", "first", vols.first.Load(), "volumes", vols.volumes)
			// The VM's root holds what the layer left out: the next RUN
			// gets a VM of the stage's layers alone, and sees the
			// volumes as they were, as dockerd's next container does.
			if err := vm.Close(context.WithoutCancel(ctx)); err != nil {
				bd.b.log.Warn("close a build VM", "err", err)
			}
			st.vm, st.vmLayers = nil, st.baseLayers
		case empty:
			// The VM's root is the stage's image as it is.
			st.vmLayers = len(st.layers)
		default:
			// The VM's root now is the stage's image plus this layer.
			st.vmLayers = len(st.layers) + 1
		}
		if empty {
			return nil, nil
		}
		return layer, nil
	})
}

// sandbox returns st's build VM, booting it on first use, with every
// layer of the stage applied.
func (bd *build) sandbox(ctx context.Context, st *stage) (Sandbox, error) {
	if st.vm == nil {
		if bd.b.opts.Sandboxes == nil {
			return nil, errdefs.ErrNotImplemented.WithMessage("RUN is not available: the daemon has no build VMs")
		}
		vm, err := bd.b.opts.Sandboxes.NewSandbox(ctx, st.vmBase, bd.opts.Network)
		if errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) {
			// The build's own settings (a network that does not exist):
			// in dockerd's words, as it fails to create the container.
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("boot build VM: %w", err)
		}
		st.vm = vm
	}
	for ; st.vmLayers < len(st.layers); st.vmLayers++ {
		rc, err := bd.b.opts.Images.OpenLayer(st.layers[st.vmLayers])
		if err != nil {
			return nil, err
		}
		err = st.vm.ApplyLayer(ctx, rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("apply layer %d to the build VM: %w", st.vmLayers, err)
		}
	}
	return st.vm, nil
}

// streamWriter turns a RUN's output into stream messages; the classic
// stream shows stderr in red, as dockerd's stderr formatter does.
type streamWriter struct {
	fn  func(string)
	red bool
}

func (w streamWriter) Write(p []byte) (int, error) {
	if w.red {
		w.fn("\x1b[91m" + string(p) + "\x1b[0m")
	} else {
		w.fn(string(p))
	}
	return len(p), nil
}
