package builder

import (
	"fmt"
	"path"
	"strings"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// commitInstructions are the Dockerfile instructions `docker commit
// --change` accepts, as dockerd lists them.
var commitInstructions = map[string]bool{
	"cmd": true, "entrypoint": true, "healthcheck": true, "env": true, "expose": true, "label": true,
	"onbuild": true, "stopsignal": true, "user": true, "volume": true, "workdir": true,
}

// ApplyChanges applies `docker commit --change` lines (Dockerfile
// instructions that only touch the config) to cfg, in order, as dockerd's
// BuildFromConfig does: words are expanded with cfg's environment as it
// stands at each line, and an ENTRYPOINT clears the command unless a CMD
// came before it. Errors are invalid-argument errors worded as dockerd's.
func ApplyChanges(cfg *v1.Config, changes []string) error {
	if len(changes) == 0 {
		return nil
	}
	ast, err := parser.Parse(strings.NewReader(strings.Join(changes, "\n")))
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	var cmds []instructions.Command
	for _, n := range ast.AST.Children {
		// dockerd's parser gave instructions in lower case, as it names them.
		name := strings.ToLower(n.Value)
		if !commitInstructions[name] {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s is not a valid change command", name))
		}
		cmd, err := instructions.ParseCommand(n)
		if err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		cmds = append(cmds, cmd)
	}
	lex := shell.NewLex(ast.EscapeToken)
	cmdSet := false
	for _, cmd := range cmds {
		if ex, ok := cmd.(instructions.SupportsSingleWordExpansion); ok {
			e := envOf(cfg.Env)
			err := ex.Expand(func(w string) (string, error) {
				s, _, err := lex.ProcessWord(w, e)
				return s, err
			})
			if err != nil {
				return errdefs.ErrInvalidArgument.WithMessage(err.Error())
			}
		}
		if err := applyChange(cfg, cmd, lex, &cmdSet); err != nil {
			return err
		}
	}
	return nil
}

func applyChange(c *v1.Config, cmd instructions.Command, lex *shell.Lex, cmdSet *bool) error {
	shellForm := func(cl instructions.ShellDependantCmdLine) []string {
		if cl.PrependShell && cl.CmdLine != nil {
			sh := c.Shell
			if len(sh) == 0 {
				sh = []string{"/bin/sh", "-c"}
			}
			return append(append([]string(nil), sh...), cl.CmdLine...)
		}
		return append([]string(nil), cl.CmdLine...)
	}
	switch cmd := cmd.(type) {
	case *instructions.EnvCommand:
		for _, kv := range cmd.Env {
			c.Env = setEnv(c.Env, kv.Key, kv.Value)
		}
	case *instructions.LabelCommand:
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		for _, kv := range cmd.Labels {
			c.Labels[kv.Key] = kv.Value
		}
	case *instructions.UserCommand:
		c.User = cmd.User
	case *instructions.ExposeCommand:
		if c.ExposedPorts == nil {
			c.ExposedPorts = map[string]struct{}{}
		}
		for _, p := range cmd.Ports {
			words, err := lex.ProcessWords(p, envOf(c.Env))
			if err != nil {
				return errdefs.ErrInvalidArgument.WithMessage(err.Error())
			}
			for _, w := range words {
				specs, err := parsePortSpec(w)
				if err != nil {
					return err
				}
				for _, s := range specs {
					c.ExposedPorts[s] = struct{}{}
				}
			}
		}
	case *instructions.VolumeCommand:
		if c.Volumes == nil {
			c.Volumes = map[string]struct{}{}
		}
		for _, v := range cmd.Volumes {
			if v == "" {
				return errdefs.ErrInvalidArgument.WithMessage("VOLUME specified can not be an empty string")
			}
			c.Volumes[v] = struct{}{}
		}
	case *instructions.StopSignalCommand:
		if !validSignal(cmd.Signal) {
			return errdefs.ErrInvalidArgument.WithMessage("Invalid signal: " + cmd.Signal)
		}
		c.StopSignal = cmd.Signal
	case *instructions.HealthCheckCommand:
		h := cmd.Health
		c.Healthcheck = &v1.HealthConfig{Test: h.Test, Interval: h.Interval, Timeout: h.Timeout, StartPeriod: h.StartPeriod, Retries: h.Retries}
	case *instructions.OnbuildCommand:
		c.OnBuild = append(c.OnBuild, cmd.Expression)
	case *instructions.CmdCommand:
		c.Cmd = shellForm(cmd.ShellDependantCmdLine)
		if len(cmd.CmdLine) != 0 {
			*cmdSet = true
		}
	case *instructions.EntrypointCommand:
		c.Entrypoint = shellForm(cmd.ShellDependantCmdLine)
		if !*cmdSet {
			c.Cmd = nil
		}
	case *instructions.WorkdirCommand:
		dir := cmd.Path
		if !path.IsAbs(dir) {
			dir = path.Join("/", c.WorkingDir, dir)
		}
		c.WorkingDir = path.Clean(dir)
	default:
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s is not a valid change command", cmd.Name()))
	}
	return nil
}
