// Package builder is husk's Dockerfile builder: what dockerd's classic
// builder does behind `POST /build`, with every RUN executed in a microVM.
//
// The Dockerfile is parsed with buildkit's parser and instructions
// packages (the ones dockerd's classic builder uses too); everything after
// parsing is ours, because dockerd's builder is written against dockerd's
// container and layer stores. The classic builder's observable behaviour is
// kept: one image per step (so that every step can be served from the
// cache), the same history lines ("/bin/sh -c #(nop)  ENV ..."), the same
// output stream ("Step 2/7 : ...", " ---> Running in ...", " ---> Using
// cache") and the same error wording, checked against dockerd 20.10.
//
// Where the work happens:
//   - COPY and ADD layers are made on the host from the build context (a tar
//     spooled to a temporary file and indexed, never extracted) or from the
//     flattened filesystem of another stage or image; the stage's
//     filesystem shape (fsindex.go) tells which destination directories
//     exist.
//   - RUN executes in a build VM (Sandbox), one per stage, booted on the
//     stage's first RUN and kept until the stage ends: after each RUN the
//     VM cuts the changes into a layer and starts a fresh overlay upper, and
//     layers made on the host (COPY, or steps served from the cache) are
//     applied to it before the next RUN, so its root always is the stage's
//     current image.
//   - The per-step cache (cache.go) keys a step on its parent image, its
//     history line (build args and source digests included) and the
//     resulting config.
//   - What dockerd fetches itself is fetched by the daemon here too: a
//     remote context (remote.go) and ADD's URLs (download.go). The build
//     VMs are on the build's network (--network, --add-host), as dockerd's
//     build containers are.
//   - dockerd's intermediate containers exist here only as their IDs in the
//     output and their events (Events), so that docker events shows a build
//     as it does under dockerd.
package builder

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/imagebuild/reference"
)

// Images is the image store as the builder uses it (*imagebuild.Service).
type Images interface {
	Resolve(ctx context.Context, ref string) (*imagebuild.Image, error)
	Pull(ctx context.Context, ref, platform string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error
	LayerInfos(ctx context.Context, ref string) ([]imagebuild.LayerInfo, error)
	OpenLayer(l imagebuild.LayerInfo) (io.ReadCloser, error)
	PutLayer(ctx context.Context, r io.Reader) (imagebuild.LayerInfo, error)
	ReleaseLayers(layers ...imagebuild.LayerInfo)
	CreateImage(ctx context.Context, cfg v1.ConfigFile, layers []imagebuild.LayerInfo, parent string) (string, error)
	Tag(ctx context.Context, source, repo, tag string) error
}

// Sandboxes boots the VMs RUN steps execute in.
type Sandboxes interface {
	// NewSandbox boots a VM whose root is the filesystem of the image
	// baseImageID ("" for an empty one), connected as net says.
	NewSandbox(ctx context.Context, baseImageID string, net SandboxNetwork) (Sandbox, error)
}

// SandboxNetwork is how RUN steps reach the network: docker build's
// --network and --add-host.
type SandboxNetwork struct {
	// Mode is "" or "default" (the default bridge), "none", or a
	// network's name or ID.
	Mode string
	// ExtraHosts are "name:ip" entries for /etc/hosts.
	ExtraHosts []string
}

// Events publishes the events of a build's intermediate containers: one
// per step that dockerd runs in a container of its own (" ---> Running
// in ID"). They are not containers here, only their events are.
type Events interface {
	// IntermediateName is a name for an intermediate container, dockerd's
	// random kind.
	IntermediateName() string
	// ContainerEvent publishes a container event of intermediate id.
	ContainerEvent(action events.Action, id string, attrs map[string]string)
	// NetworkEvent publishes the connect or disconnect of intermediate
	// containerID to network, a SandboxNetwork.Mode.
	NetworkEvent(action events.Action, network, containerID string)
}

// Sandbox is one build VM. Its methods are called one at a time.
type Sandbox interface {
	// ApplyLayer adds an OCI layer tar on top of the VM's root.
	ApplyLayer(ctx context.Context, layer io.Reader) error
	// Run runs a process to its end and returns its exit code. A
	// process that cannot start through its own fault (no such user or
	// program) is an invalid-argument error, worded for the user.
	Run(ctx context.Context, p Process, stdout, stderr io.Writer) (int, error)
	// CutLayer writes what changed in the root since the last cut or
	// applied layer as an OCI layer tar, and starts a fresh change set.
	CutLayer(ctx context.Context, w io.Writer) error
	// PutFiles writes a tar's files into the root, as changes (a step's
	// mount sources, which its process removes again when it goes).
	PutFiles(ctx context.Context, r io.Reader) error
	// Close powers the VM off and removes its disks.
	Close(ctx context.Context) error
}

// Process is a RUN step's process.
type Process struct {
	Args []string
	Env  []string
	Cwd  string
	User string
	// Tmpfs are the step's own empty mounts (RUN --mount=type=tmpfs or
	// type=cache), and Binds its own binds of files Sandbox.PutFiles put
	// under Staged (type=bind and secret): they leave nothing in its
	// layer.
	Tmpfs  []TmpfsMount
	Binds  []BindMount
	Staged string
}

// BindMount binds Source, staged in the VM's root, at Target for one RUN
// step.
type BindMount struct {
	Source, Target string
	Dir, ReadOnly  bool
}

// TmpfsMount is an empty filesystem mounted for one RUN step.
type TmpfsMount struct {
	Target   string // absolute
	Mode     uint32
	UID, GID int
	Size     int64 // bytes; 0 for the default
}

// Options configure a Builder.
type Options struct {
	Images    Images
	Sandboxes Sandboxes
	// Events, when set, is told of the intermediate containers dockerd
	// would make for the steps, so that docker events shows a build as it
	// does under dockerd.
	Events Events
	// StateDir holds the step cache and temporary files of builds.
	StateDir string
	Logger   *slog.Logger
}

// Builder runs Dockerfile builds. Its methods are safe for concurrent use.
type Builder struct {
	opts  Options
	log   *slog.Logger
	cache *stepCache
	tmp   string
}

// New opens the builder's state under opts.StateDir.
func New(opts Options) (*Builder, error) {
	if opts.StateDir == "" {
		return nil, errors.New("builder: Options.StateDir is empty")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache, err := openStepCache(opts.StateDir)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(opts.StateDir, "tmp")
	// Spools are unlinked as soon as they are made, so anything here is a
	// leftover of a crash.
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("create build temp dir: %w", err)
	}
	return &Builder{opts: opts, log: log, cache: cache, tmp: tmp}, nil
}

// BuildOptions is one build request.
type BuildOptions struct {
	// Context is the build context as an uncompressed tar.
	Context io.Reader
	// ContextDir, when set, is instead a directory on the host that is
	// the context (one a BuildKit client's session filled). The ignore
	// file that applies has already left files out of it, and it may not
	// be the context's own .dockerignore (BuildKit prefers
	// <Dockerfile>.dockerignore), so the builder reads none.
	ContextDir string
	// Dockerfile is its path inside the context; default "Dockerfile".
	Dockerfile string
	BuildArgs  map[string]*string
	Tags       []string
	Target     string
	NoCache    bool
	// Pull pulls every FROM image even when it is present.
	Pull bool
	// Quiet suppresses "Successfully built/tagged".
	Quiet bool
	// Remove reports intermediate containers as removed after successful
	// steps (dockerd's rm, true by default); ForceRemove also after a
	// failed one.
	Remove, ForceRemove bool
	Labels              map[string]string
	Platform            string
	// Remote, when set, names where the context comes from instead of
	// Context: a git repository or an http(s) URL (POST /build's remote).
	Remote string
	// Network is where RUN steps are connected.
	Network SandboxNetwork
	// Auth holds registry credentials by registry host, as in
	// X-Registry-Config.
	Auth map[string]registry.AuthConfig
	// Credentials, when set, is asked for a registry host's credentials
	// that Auth does not hold (a BuildKit client answers per host).
	Credentials func(ctx context.Context, host string) (*registry.AuthConfig, error)
	// BuildKit says the client speaks BuildKit: a BuildKit-only feature
	// is refused as one husk's builder lacks, not as one that needs
	// BuildKit.
	BuildKit bool
	// Secret, when set, gives a RUN --mount=type=secret its secret; nil
	// data and no error say the client has no such secret.
	Secret func(ctx context.Context, id string) ([]byte, error)
	// DockerfileContent, when set, is the Dockerfile itself, which a
	// BuildKit client sends apart from the context; Dockerfile then only
	// names it in messages.
	DockerfileContent []byte
}

// Output receives the build's progress in the shapes of dockerd's stream.
type Output struct {
	// Stream gets text for {"stream": ...} messages.
	Stream func(string)
	// Aux gets the image ID at the end of each stage ({"aux":{"ID":...}}).
	Aux func(id string)
	// Progress gets pull progress for FROM images.
	Progress func(jsonstream.Message)
	// Step, when set, is told as each step starts, as BuildKit numbers
	// steps: by stage (named by its name, "stage-N" when unnamed, "" when
	// it is the only one), the step's number and the stage's total, and
	// the instruction. The classic stream's own lines ("Step n/m", " --->
	// ID", "Running in", "Removing intermediate container", "Successfully
	// built/tagged") are then left out of Stream, which carries only what
	// the steps print.
	Step func(stage string, n, total int, instruction string)
	// Cached, when set with Step, is told that the current step was
	// taken from the build cache.
	Cached func()
}

// ExitError is a RUN step whose command exited non-zero. The API reports
// Code in errorDetail and the docker CLI exits with it.
type ExitError struct {
	Command string
	Code    int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("The command '%s' returned a non-zero code: %d", e.Command, e.Code)
}

// defaultPath is the PATH dockerd gives a stage whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// neededStages marks the stages the last one depends on, through FROM,
// COPY --from or RUN --mount from=, as BuildKit builds only those: a
// test or lint stage the target does not use is skipped.
func (bd *build) neededStages(stages []instructions.Stage) []bool {
	need := make([]bool, len(stages))
	need[len(stages)-1] = true
	meta := envOf(bd.metaEnv())
	for i := len(stages) - 1; i >= 0; i-- {
		if !need[i] {
			continue
		}
		mark := func(name string, byIndex bool) {
			for j := i - 1; j >= 0; j-- {
				if stages[j].Name != "" && strings.EqualFold(stages[j].Name, name) {
					need[j] = true
					return
				}
			}
			if n, err := strconv.Atoi(name); byIndex && err == nil && n >= 0 && n < i {
				need[n] = true
			}
		}
		// FROM expands the global ARGs; --from is taken as written, as
		// BuildKit takes it.
		if base, err := bd.expand(stages[i].BaseName, meta); err == nil {
			mark(base, false)
		}
		for _, cmd := range stages[i].Commands {
			switch c := cmd.(type) {
			case *instructions.CopyCommand:
				if c.From != "" {
					mark(c.From, true)
				}
			case *instructions.RunCommand:
				for _, m := range instructions.GetMounts(c) {
					if m.From != "" {
						mark(m.From, true)
					}
				}
			}
		}
	}
	return need
}

// platformArgs are the ARGs BuildKit defines for every build, for the
// build's and the target's platform: FROM may use them, and a stage that
// declares one without a value gets it. Both platforms are linux/amd64,
// the only one husk's build VMs run.
func platformArgs(platform string) map[string]string {
	if platform == "" || platform == "linux" {
		platform = "linux/amd64"
	}
	targetOS, arch, _ := strings.Cut(platform, "/")
	arch, variant, _ := strings.Cut(arch, "/")
	return map[string]string{
		"BUILDPLATFORM": "linux/amd64", "BUILDOS": "linux", "BUILDARCH": "amd64", "BUILDVARIANT": "",
		"TARGETPLATFORM": platform, "TARGETOS": targetOS, "TARGETARCH": arch, "TARGETVARIANT": variant,
	}
}

// builtinArgs may be passed without an ARG and reach RUN steps, as in
// dockerd; they never appear in history unless declared.
var builtinArgs = map[string]bool{
	"HTTP_PROXY": true, "http_proxy": true, "HTTPS_PROXY": true, "https_proxy": true,
	"FTP_PROXY": true, "ftp_proxy": true, "NO_PROXY": true, "no_proxy": true,
	"ALL_PROXY": true, "all_proxy": true,
}

// build is the state of one Build call.
type build struct {
	b      *Builder
	opts   BuildOptions
	out    Output
	ctxDir *tarIndex
	// ignore says whether .dockerignore leaves a context path out.
	ignore func(path string) (bool, error)
	shlex  *shell.Lex

	step, total int
	meta        map[string]*string // ARGs before the first FROM
	consumed    map[string]bool    // build args some ARG declared
	stages      []*stage
	images      map[string]*tarIndex // flattened sources for COPY --from, by image ID
	puts        []imagebuild.LayerInfo
}

// Build runs a build and returns the final image's ID. Errors before any
// output was produced carry an errdefs class; a failed RUN is an
// *ExitError.
func (b *Builder) Build(ctx context.Context, opts BuildOptions, out Output) (string, error) {
	if out.Stream == nil {
		out.Stream = func(string) {}
	}
	if out.Aux == nil {
		out.Aux = func(string) {}
	}
	for _, t := range opts.Tags {
		n, err := reference.Parse(t)
		if err != nil {
			return "", err
		}
		if reference.IsDigested(n) {
			return "", errdefs.ErrInvalidArgument.WithMessage("build tag cannot contain a digest")
		}
	}
	bd := &build{b: b, opts: opts, out: out, meta: map[string]*string{}, consumed: map[string]bool{}, images: map[string]*tarIndex{}}
	defer bd.cleanup()
	return bd.run(ctx)
}

func (bd *build) cleanup() {
	if bd.ctxDir != nil {
		bd.ctxDir.Close()
	}
	for _, t := range bd.images {
		t.Close()
	}
	for _, st := range bd.stages {
		st.closeVM(bd)
	}
	// Layers stored by this build now belong to images (or to nothing).
	bd.b.opts.Images.ReleaseLayers(bd.puts...)
}

func (bd *build) printf(format string, args ...any) {
	bd.out.Stream(fmt.Sprintf(format, args...))
}

// scaffold prints one of the classic stream's own lines, which an output
// that is told of steps (Output.Step) does without.
func (bd *build) scaffold(format string, args ...any) {
	if bd.out.Step == nil {
		bd.printf(format, args...)
	}
}

func (bd *build) run(ctx context.Context) (string, error) {
	source := bd.opts.Context
	if bd.opts.ContextDir != "" {
		pr := dirTar(bd.opts.ContextDir)
		defer pr.CloseWithError(errors.New("context not read"))
		source = pr
	}
	if bd.opts.Remote != "" {
		rc, err := bd.remoteContext(ctx, bd.opts.Remote)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		source = rc
	}
	var err error
	if bd.ctxDir, err = newTarIndex(ctx, bd.b.tmp, source); err != nil {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("Error processing tar file: %v", err))
	}
	if bd.opts.ContextDir == "" {
		if err := bd.loadIgnore(); err != nil {
			return "", err
		}
	}
	df, dfName, err := bd.dockerfile()
	if err != nil {
		return "", err
	}
	if len(df) == 0 {
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("the Dockerfile (%s) cannot be empty", dfName))
	}
	ast, err := parser.Parse(strings.NewReader(string(df)))
	if err != nil {
		// dockerd names the file for syntax errors, not for the
		// instruction errors below.
		return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("failed to parse %s: %v", dfName, err))
	}
	stages, metaArgs, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return "", parseError(err)
	}
	if len(stages) == 0 {
		return "", errdefs.ErrInvalidArgument.WithMessage("dockerfile contains no stages to build")
	}
	if bd.opts.Target != "" {
		i, ok := instructions.HasStage(stages, bd.opts.Target)
		if !ok {
			return "", errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("failed to reach build target %s in Dockerfile", bd.opts.Target))
		}
		stages = stages[:i+1]
	}
	if !bd.opts.BuildKit {
		// dockerd's classic builder adds --label as LABEL steps; BuildKit
		// sets them on the image it exports (labelImage).
		keys := make([]string, 0, len(bd.opts.Labels))
		for k := range bd.opts.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			stages[len(stages)-1].AddCommand(instructions.NewLabelCommand(k, bd.opts.Labels[k], true))
		}
	}
	bd.shlex = shell.NewLex(ast.EscapeToken)
	bd.total = len(metaArgs) + len(stages)
	for _, s := range stages {
		bd.total += len(s.Commands)
	}

	auto := map[string]string{}
	if bd.opts.BuildKit {
		auto = platformArgs(bd.opts.Platform)
		for k, v := range auto {
			bd.meta[k] = &v
		}
	}
	for _, m := range metaArgs {
		if !bd.opts.BuildKit {
			// BuildKit shows no step for a global ARG.
			bd.printStep(nil, m.String())
		}
		for _, kv := range m.Args {
			if kv.Value != nil {
				v, err := bd.expand(*kv.Value, envOf(bd.metaEnv()))
				if err != nil {
					return "", err
				}
				kv.Value = &v
			} else if v, ok := auto[kv.Key]; ok {
				kv.Value = &v
			}
			if given, ok := bd.opts.BuildArgs[kv.Key]; ok && given != nil {
				kv.Value = given
			}
			bd.meta[kv.Key] = kv.Value
			bd.consumed[kv.Key] = true
		}
	}

	need := make([]bool, len(stages))
	for i := range need {
		need[i] = true
	}
	if bd.opts.BuildKit {
		need = bd.neededStages(stages)
		bd.total = 0
		for i, s := range stages {
			if need[i] {
				bd.total += 1 + len(s.Commands)
			}
		}
	}

	var last *stage
	for i := range stages {
		s := &stages[i]
		if s.Name != "" {
			for _, prev := range bd.stages {
				if prev.name == s.Name {
					return "", fmt.Errorf("%s stage name already used", s.Name)
				}
			}
		}
		st := &stage{name: s.Name, index: i}
		bd.stages = append(bd.stages, st)
		if !need[i] {
			// Kept, imageless, so that stages are still found by index.
			continue
		}
		if len(stages) > 1 {
			st.label = s.Name
			if st.label == "" {
				st.label = fmt.Sprintf("stage-%d", i)
			}
		}
		st.total = 1 + len(s.Commands)
		bd.printStep(st, s.SourceCode)
		if err := bd.from(ctx, st, s.BaseName); err != nil {
			return "", err
		}
		// The base's triggers run as part of FROM, as in dockerd: the
		// step's " ---> ID" follows them.
		if err := bd.onBuild(ctx, st); err != nil {
			return "", err
		}
		bd.scaffold(" ---> %s\n", shortID(st.imageID))
		for _, cmd := range s.Commands {
			if err := ctx.Err(); err != nil {
				bd.printf("Build cancelled\n")
				return "", errors.New("Build cancelled")
			}
			bd.printStep(st, fmt.Sprint(cmd))
			if err := bd.dispatch(ctx, st, cmd); err != nil {
				return "", err
			}
			bd.scaffold(" ---> %s\n", shortID(st.imageID))
		}
		st.closeVM(bd)
		if st.imageID != "" {
			bd.out.Aux(st.imageID)
		}
		last = st
	}

	var unused []string
	for k := range bd.opts.BuildArgs {
		if !bd.consumed[k] && !builtinArgs[k] {
			unused = append(unused, k)
		}
	}
	if len(unused) > 0 && !bd.opts.BuildKit {
		// BuildKit does not warn of them: buildx passes its own
		// (BUILDKIT_INLINE_CACHE and the like) as build args.
		sort.Strings(unused)
		bd.printf("[Warning] One or more build-args [%s] were not consumed\n", strings.Join(unused, " "))
	}
	if last == nil || last.imageID == "" {
		return "", errors.New("No image was generated. Is your Dockerfile empty?")
	}
	if bd.opts.BuildKit && len(bd.opts.Labels) > 0 {
		if err := last.labelImage(ctx, bd, bd.opts.Labels); err != nil {
			return "", err
		}
		bd.out.Aux(last.imageID)
	}
	if !bd.opts.Quiet {
		bd.scaffold("Successfully built %s\n", shortID(last.imageID))
	}
	for _, t := range bd.opts.Tags {
		if err := bd.b.opts.Images.Tag(ctx, last.imageID, t, ""); err != nil {
			return "", err
		}
		if !bd.opts.Quiet {
			n, _ := reference.ParseWithDefaultTag(t)
			bd.scaffold("Successfully tagged %s\n", reference.Familiar(n))
		}
	}
	return last.imageID, nil
}

// printStep reports a step starting: to Output.Step by st's own count,
// else as the classic stream's "Step n/m" over the whole build.
func (bd *build) printStep(st *stage, s string) {
	bd.step++
	if bd.out.Step != nil && st != nil {
		st.step++
		bd.out.Step(st.label, st.step, st.total, s)
		return
	}
	bd.printf("Step %d/%d : %s", bd.step, bd.total, s)
	bd.printf("\n")
}

// parseError words Dockerfile syntax errors as dockerd 20.10 does.
func parseError(err error) error {
	var unknown *instructions.UnknownInstructionError
	if errors.As(err, &unknown) {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("dockerfile parse error line %d: unknown instruction: %s", unknown.Line, strings.ToUpper(unknown.Instruction)))
	}
	// buildkit's parser says "on line"; dockerd 20.10's builder does not.
	return errdefs.ErrInvalidArgument.WithMessage(strings.Replace(err.Error(), "dockerfile parse error on line ", "dockerfile parse error line ", 1))
}

// loadIgnore reads .dockerignore. A classic build does what dockerd's
// does with a tar context: the client (the docker CLI, docker-py,
// dockerode) has already left ignored files out, and the daemon leaves
// out only .dockerignore itself and the Dockerfile, where the patterns
// name them; a tar made by hand keeps every other file. BuildKit's
// frontend applies the whole file.
func (bd *build) loadIgnore() error {
	b, ok := bd.ctxDir.readFile(".dockerignore")
	if !ok {
		return nil
	}
	patterns, err := ignorefile.ReadAll(strings.NewReader(string(b)))
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("failed to parse dockerignore: %v", err))
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("failed to parse dockerignore: %v", err))
	}
	if bd.opts.BuildKit {
		bd.ignore = pm.MatchesOrParentMatches
		return nil
	}
	removed := map[string]bool{}
	for _, name := range []string{".dockerignore", bd.dockerfileName()} {
		if name, ok := cleanRel(name); ok {
			if m, _ := pm.MatchesOrParentMatches(name); m {
				removed[name] = true
			}
		}
	}
	bd.ignore = func(p string) (bool, error) { return removed[p], nil }
	return nil
}

// ignored reports whether a context path is excluded by .dockerignore.
func (bd *build) ignored(p string) bool {
	if bd.ignore == nil || p == "" {
		return false
	}
	m, _ := bd.ignore(p)
	return m
}

// dockerfileName is the Dockerfile's path in the context, as the client
// gave it.
func (bd *build) dockerfileName() string {
	if bd.opts.Dockerfile == "" {
		return "Dockerfile"
	}
	return bd.opts.Dockerfile
}

func (bd *build) dockerfile() (_ []byte, name string, _ error) {
	name = bd.dockerfileName()
	if bd.opts.DockerfileContent != nil {
		return bd.opts.DockerfileContent, name, nil
	}
	rel, _ := cleanRel(name)
	if b, ok := bd.ctxDir.readFile(rel); ok {
		return b, name, nil
	}
	if bd.opts.Dockerfile == "" {
		if b, ok := bd.ctxDir.readFile("dockerfile"); ok {
			return b, "dockerfile", nil
		}
	}
	return nil, name, errdefs.ErrInvalidArgument.WithMessage("Cannot locate specified Dockerfile: " + name)
}

// env is an environment for word expansion.
type env map[string]string

func envOf(kvs []string) env {
	e := env{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		e[k] = v
	}
	return e
}

func (e env) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e env) Keys() []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (bd *build) expand(word string, e env) (string, error) {
	s, _, err := bd.shlex.ProcessWord(word, e)
	return s, err
}

func (bd *build) metaEnv() []string {
	var out []string
	for k, v := range bd.meta {
		if v != nil {
			out = append(out, k+"="+*v)
		}
	}
	return out
}

// shortID is dockerd's TruncateID.
func shortID(id string) string {
	if i := strings.IndexByte(id, ':'); i >= 0 {
		id = id[i+1:]
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stage is one FROM and its commands.
type stage struct {
	name  string
	index int
	// label, step and total number the stage's steps for Output.Step.
	label       string
	step, total int

	imageID string // current image; "" for scratch before its first step
	cfg     v1.ConfigFile
	layers  []imagebuild.LayerInfo
	cmdSet  bool
	args    []argDecl // ARGs declared in this stage, in order
	fs      *fsIndex

	// The build VM, booted on the first RUN from vmBase (the FROM image,
	// "" for scratch, whose own layers are the first baseLayers), whose
	// root holds the first vmLayers of layers.
	vm         Sandbox
	vmBase     string
	vmLayers   int
	baseLayers int
}

type argDecl struct {
	key   string
	value *string
}

func (st *stage) closeVM(bd *build) {
	if st.vm == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.vm.Close(ctx); err != nil {
		bd.b.log.Warn("close build VM", "stage", st.index, "err", err)
	}
	st.vm = nil
}

// argValues are the stage's build args that have a value, minus those an
// ENV of the same name overrides, as "k=v" sorted by key, with whether
// each was declared (else it is a builtin proxy arg).
func (bd *build) argValues(st *stage) (all []string, declared []string) {
	envKeys := map[string]bool{}
	for _, kv := range st.cfg.Config.Env {
		k, _, _ := strings.Cut(kv, "=")
		envKeys[k] = true
	}
	seen := map[string]bool{}
	for i := len(st.args) - 1; i >= 0; i-- {
		a := st.args[i]
		if seen[a.key] || envKeys[a.key] || a.value == nil {
			seen[a.key] = true
			continue
		}
		seen[a.key] = true
		kv := a.key + "=" + *a.value
		all = append(all, kv)
		declared = append(declared, kv)
	}
	for k, v := range bd.opts.BuildArgs {
		if builtinArgs[k] && !seen[k] && !envKeys[k] && v != nil {
			all = append(all, k+"="+*v)
		}
	}
	sort.Strings(all)
	sort.Strings(declared)
	return all, declared
}

// expandEnv is the environment commands of st are expanded with: the
// config's Env and the build args it does not override.
func (bd *build) expandEnv(st *stage) env {
	args, _ := bd.argValues(st)
	return envOf(append(append([]string(nil), args...), st.cfg.Config.Env...))
}

// from starts st from base: scratch, an earlier stage, or an image
// (pulled when missing, or always with Pull).
func (bd *build) from(ctx context.Context, st *stage, base string) error {
	name, err := bd.expand(base, envOf(bd.metaEnv()))
	if err != nil {
		return err
	}
	st.cfg = v1.ConfigFile{Architecture: "amd64", OS: "linux"}
	switch {
	case name == "scratch":
	case bd.stageByName(name) != nil:
		prev := bd.stageByName(name)
		if err := st.load(ctx, bd, prev.imageID); err != nil {
			return err
		}
	default:
		id, err := bd.ensureImage(ctx, name, bd.opts.Pull)
		if err != nil {
			return err
		}
		if err := st.load(ctx, bd, id); err != nil {
			return err
		}
	}
	st.vmBase, st.vmLayers, st.baseLayers = st.imageID, len(st.layers), len(st.layers)
	st.cfg.Config.OnBuild = append([]string(nil), st.cfg.Config.OnBuild...)
	hasPath := false
	for _, kv := range st.cfg.Config.Env {
		if strings.HasPrefix(kv, "PATH=") {
			hasPath = true
		}
	}
	if !hasPath {
		st.cfg.Config.Env = append(st.cfg.Config.Env, "PATH="+defaultPath)
	}
	return nil
}

func (bd *build) stageByName(name string) *stage {
	for _, st := range bd.stages {
		if st.name != "" && strings.EqualFold(st.name, name) && st.imageID != "" {
			return st
		}
	}
	return nil
}

// ensureImage returns the ID of the local image ref, pulling it when it is
// missing (or always, with pull).
func (bd *build) ensureImage(ctx context.Context, ref string, pull bool) (string, error) {
	images := bd.b.opts.Images
	if !pull {
		img, err := images.Resolve(ctx, ref)
		if err == nil {
			return img.ID, nil
		}
		if !errdefs.IsNotFound(err) {
			return "", err
		}
	}
	var auth *registry.AuthConfig
	if n, err := reference.ParseWithDefaultTag(ref); err == nil {
		domain := reference.Domain(n)
		for _, key := range []string{domain, "https://" + domain, "http://" + domain} {
			if a, ok := bd.opts.Auth[key]; ok {
				auth = &a
				break
			}
		}
		if a, ok := bd.opts.Auth["https://index.docker.io/v1/"]; ok && auth == nil && domain == "docker.io" {
			auth = &a
		}
		if auth == nil && bd.opts.Credentials != nil {
			host := domain
			if host == "docker.io" {
				host = "registry-1.docker.io"
			}
			if auth, err = bd.opts.Credentials(ctx, host); err != nil {
				return "", fmt.Errorf("credentials for %s: %w", host, err)
			}
		}
	}
	progress := bd.out.Progress
	if progress == nil {
		progress = func(jsonstream.Message) {}
	}
	// FROM x means x:latest, where a pull of a bare name means every tag.
	if n, err := reference.ParseWithDefaultTag(ref); err == nil {
		ref = reference.Familiar(n)
	}
	if err := images.Pull(ctx, ref, bd.opts.Platform, auth, progress); err != nil {
		return "", err
	}
	img, err := images.Resolve(ctx, ref)
	if err != nil {
		return "", err
	}
	return img.ID, nil
}

// load makes id the stage's current image.
func (st *stage) load(ctx context.Context, bd *build, id string) error {
	img, err := bd.b.opts.Images.Resolve(ctx, id)
	if err != nil {
		return err
	}
	layers, err := bd.b.opts.Images.LayerInfos(ctx, img.ID)
	if err != nil {
		return err
	}
	st.imageID, st.cfg, st.layers = img.ID, img.Config, layers
	return nil
}

// commit records a step's image: the current config plus one history
// entry, and layer if the step made one.
func (st *stage) commit(ctx context.Context, bd *build, createdBy string, layer *imagebuild.LayerInfo) error {
	now := time.Now().UTC()
	cfg := st.cfg
	cfg.Created = v1.Time{Time: now}
	cfg.History = append(append([]v1.History(nil), st.cfg.History...), v1.History{
		Created: v1.Time{Time: now}, CreatedBy: createdBy, EmptyLayer: layer == nil,
	})
	layers := append([]imagebuild.LayerInfo(nil), st.layers...)
	if layer != nil {
		layers = append(layers, *layer)
	}
	id, err := bd.b.opts.Images.CreateImage(ctx, cfg, layers, st.imageID)
	if err != nil {
		return fmt.Errorf("commit step: %w", err)
	}
	return st.load(ctx, bd, id)
}

// labelImage makes st's image again with labels added to its config and
// nothing to its history, as BuildKit applies --label when it exports. The
// config keeps its creation time, so the same labels on the same image
// make the same image.
func (st *stage) labelImage(ctx context.Context, bd *build, labels map[string]string) error {
	cfg := st.cfg
	cfg.Config.Labels = maps.Clone(cfg.Config.Labels)
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	maps.Copy(cfg.Config.Labels, labels)
	id, err := bd.b.opts.Images.CreateImage(ctx, cfg, st.layers, st.imageID)
	if err != nil {
		return fmt.Errorf("label the image: %w", err)
	}
	return st.load(ctx, bd, id)
}

// runStep runs one step through the cache: a hit loads the cached image
// and prints " ---> Using cache"; a miss runs make (which returns the
// step's layer, or nil) and commits. container says whether dockerd would
// have made an intermediate container for the step, which it reports and
// hands to make (nil when there is none).
func (bd *build) runStep(ctx context.Context, st *stage, createdBy string, container bool, make func(ctx context.Context, ic *intermediate) (*imagebuild.LayerInfo, error)) error {
	return bd.runStepKeyed(ctx, st, createdBy, "", container, make)
}

// runStepKeyed is runStep for a step that is more than its history line
// says (a RUN's mounts): keyExtra tells such steps apart in the cache.
func (bd *build) runStepKeyed(ctx context.Context, st *stage, createdBy, keyExtra string, container bool, make func(ctx context.Context, ic *intermediate) (*imagebuild.LayerInfo, error)) error {
	cfgJSON, err := json.Marshal(st.cfg.Config)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	stepKey := createdBy
	if keyExtra != "" {
		stepKey += "\x00" + keyExtra
	}
	key := cacheKey(st.imageID, stepKey, cfgJSON)
	if !bd.opts.NoCache {
		if id, ok := bd.b.cache.get(key); ok {
			if err := st.load(ctx, bd, id); err == nil {
				bd.scaffold(" ---> Using cache\n")
				if bd.out.Cached != nil {
					bd.out.Cached()
				}
				return nil
			}
			if err := bd.b.cache.drop(key); err != nil {
				bd.b.log.Warn("drop stale build cache entry", "err", err)
			}
		}
	}
	var ic *intermediate
	if container {
		ic = bd.newIntermediate(st)
		bd.scaffold(" ---> Running in %s\n", shortID(ic.id))
		ic.event(events.ActionCreate, nil)
	}
	layer, err := make(ctx, ic)
	if err != nil {
		if container && bd.opts.ForceRemove {
			bd.scaffold("Removing intermediate container %s\n", shortID(ic.id))
			ic.event(events.ActionDestroy, nil)
		}
		return err
	}
	if err := st.commit(ctx, bd, createdBy, layer); err != nil {
		return err
	}
	if container && bd.opts.Remove {
		bd.scaffold("Removing intermediate container %s\n", shortID(ic.id))
		ic.event(events.ActionDestroy, nil)
	}
	if err := bd.b.cache.put(key, st.imageID); err != nil {
		bd.b.log.Warn("record build cache entry", "err", err)
	}
	return nil
}

// intermediate is a step's intermediate container under dockerd, of
// which husk has the ID and the events.
type intermediate struct {
	id    string
	attrs map[string]string
	bd    *build
}

// newIntermediate is the intermediate container of st's next step: its
// attributes are those of a container of st's image and configuration.
func (bd *build) newIntermediate(st *stage) *intermediate {
	ic := &intermediate{id: randomID(), bd: bd}
	if ev := bd.b.opts.Events; ev != nil {
		ic.attrs = map[string]string{"image": st.imageID, "name": ev.IntermediateName()}
		for k, v := range st.cfg.Config.Labels {
			if k != "image" && k != "name" {
				ic.attrs[k] = v
			}
		}
	}
	return ic
}

// event publishes a container event of ic, with extra attributes.
func (ic *intermediate) event(action events.Action, extra map[string]string) {
	if ic == nil || ic.bd.b.opts.Events == nil {
		return
	}
	ev := ic.bd.b.opts.Events
	attrs := maps.Clone(ic.attrs)
	maps.Copy(attrs, extra)
	ev.ContainerEvent(action, ic.id, attrs)
}

// network publishes ic's connect or disconnect to the build's network.
func (ic *intermediate) network(action events.Action) {
	if ic != nil && ic.bd.b.opts.Events != nil {
		ic.bd.b.opts.Events.NetworkEvent(action, ic.bd.opts.Network.Mode, ic.id)
	}
}

// putLayer stores a layer tar and keeps it held until the build ends.
func (bd *build) putLayer(ctx context.Context, r io.Reader) (*imagebuild.LayerInfo, error) {
	info, err := bd.b.opts.Images.PutLayer(ctx, r)
	if err != nil {
		return nil, err
	}
	bd.puts = append(bd.puts, info)
	return &info, nil
}

// fsIndex returns st's filesystem shape, brought up to date.
func (bd *build) fsIndex(ctx context.Context, st *stage) (*fsIndex, error) {
	if st.fs == nil {
		st.fs = newFSIndex()
	}
	images := bd.b.opts.Images
	err := st.fs.sync(ctx, func(i int) (io.ReadCloser, error) { return images.OpenLayer(st.layers[i]) }, len(st.layers))
	return st.fs, err
}

// readImageFile reads a regular file from st's layers, top layer first,
// honouring whiteouts; for resolving --chown names through /etc/passwd.
func (bd *build) readImageFile(ctx context.Context, st *stage, p string) ([]byte, bool, error) {
	dir, base := parentOf(p), p[strings.LastIndexByte(p, '/')+1:]
	for i := len(st.layers) - 1; i >= 0; i-- {
		rc, err := bd.b.opts.Images.OpenLayer(st.layers[i])
		if err != nil {
			return nil, false, err
		}
		data, found, hidden, err := scanLayerFor(ctx, rc, p, dir, base)
		rc.Close()
		if err != nil {
			return nil, false, err
		}
		if found {
			return data, true, nil
		}
		if hidden {
			return nil, false, nil
		}
	}
	return nil, false, nil
}

func scanLayerFor(ctx context.Context, r io.Reader, p, dir, base string) (data []byte, found, hidden bool, err error) {
	tr := tar.NewReader(ctxReader{ctx, r})
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, false, hidden, nil
		}
		if err != nil {
			return nil, false, false, err
		}
		name, _ := cleanRel(hdr.Name)
		switch name {
		case p:
			if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA {
				return nil, false, true, nil
			}
			b, err := io.ReadAll(tr)
			return b, err == nil, false, err
		case joinRel(dir, whiteoutPrefix+base), joinRel(dir, opaqueMarker):
			hidden = true
		}
	}
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
