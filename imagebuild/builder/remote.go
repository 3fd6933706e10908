package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
)

// contextProgressStep is how many bytes of a remote context are read
// between two "Downloading context" messages, dockerd's figure.
const contextProgressStep = 512 << 10

// remoteMIME picks out the content types dockerd takes a remote context
// in: a tar, compressed or not, or a Dockerfile as plain text.
var remoteMIME = regexp.MustCompile(`(?:application/(?:(?:x\-)?tar|octet\-stream|((?:x\-)?(?:gzip|bzip2?|xz)))|(?:text/plain))`)

// gitURL is what dockerd takes for a git repository rather than a file:
// an http(s) URL whose path ends in .git (a fragment may follow).
var gitURL = regexp.MustCompile(`\.git(?:#.+)?$`)

// remoteContext fetches the context POST /build's remote parameter names,
// as dockerd's classic builder does: a git repository is cloned by the
// host's git, an http(s) URL is downloaded and taken for a tar (plain or
// compressed) or, served as plain text, for the Dockerfile alone. It
// returns a tar stream; closing it removes what the fetch left on disk.
func (bd *build) remoteContext(ctx context.Context, remote string) (io.ReadCloser, error) {
	isURL := strings.HasPrefix(remote, "http://") || strings.HasPrefix(remote, "https://")
	switch {
	case remote == "client-session":
		return nil, errdefs.ErrInvalidArgument.WithMessage("experimental session with v1 builder is no longer supported, use builder version v2 (BuildKit) instead")
	case isURL && gitURL.MatchString(remote),
		strings.HasPrefix(remote, "git://"), strings.HasPrefix(remote, "git@"), strings.HasPrefix(remote, "github.com/"):
		return bd.gitContext(ctx, remote)
	case isURL:
		return bd.urlContext(ctx, remote)
	}
	return nil, fmt.Errorf("remoteURL (%s) could not be recognized as URL", remote)
}

// urlContext downloads a remote context.
func (bd *build) urlContext(ctx context.Context, remote string) (io.ReadCloser, error) {
	resp, err := getURL(ctx, remote)
	if err != nil {
		return nil, fmt.Errorf("error downloading remote context %s: %w", remote, err)
	}
	// dockerd's message has these the other way round from ADD's: the
	// URL as the status, the action as the id.
	body := &progressReader{r: resp.Body, step: contextProgressStep, status: remote, id: "Downloading context", send: bd.progress}
	preamble := make([]byte, 100)
	n, err := io.ReadFull(body, preamble)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		resp.Body.Close()
		return nil, fmt.Errorf("error downloading remote context %s: %w", remote, err)
	}
	preamble = preamble[:n]
	if n == 0 {
		resp.Body.Close()
		return nil, fmt.Errorf("error detecting content type for remote %s: empty response", remote)
	}
	declared := resp.Header.Get("Content-Type")
	contentType := declared
	// Servers call files without an extension (a Dockerfile) octet-stream.
	if contentType == "" || contentType == "application/octet-stream" {
		contentType, _, _ = mime.ParseMediaType(http.DetectContentType(preamble))
	}
	contentType = remoteMIME.FindString(contentType)
	if contentType == "" {
		resp.Body.Close()
		return nil, fmt.Errorf("error detecting content type for remote %s: unsupported Content-Type %q", remote, declared)
	}
	all := io.MultiReader(bytes.NewReader(preamble), body)
	if contentType != "text/plain" {
		// Not a tar at all is left to the indexer to refuse, as dockerd's
		// extraction does.
		r, ok := archiveReader(all)
		if !ok {
			r = all
		}
		return &finishing{Reader: r, close: resp.Body.Close}, nil
	}
	defer resp.Body.Close()
	dockerfile, err := io.ReadAll(all)
	if err != nil {
		return nil, fmt.Errorf("error downloading remote context %s: %w", remote, err)
	}
	// dockerd reports a Dockerfile read to its end; a tar is read only to
	// its end-of-archive blocks, and gets no last message.
	body.report()
	name, _ := cleanRel(bd.dockerfileName())
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(dockerfile); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

// gitContext clones a repository with the host's git as dockerd does: a
// fragment names the ref (master by default) and, after a colon, the
// directory that is the context. git reads no system or user
// configuration and may not fetch submodules from the host's filesystem.
func (bd *build) gitContext(ctx context.Context, remote string) (io.ReadCloser, error) {
	if !strings.HasPrefix(remote, "git@") && !strings.Contains(remote, "://") {
		remote = "https://" + remote
	}
	repo, fragment, _ := strings.Cut(remote, "#")
	ref, subdir, _ := strings.Cut(fragment, ":")
	if ref == "" {
		ref = "master"
	}
	if strings.HasPrefix(ref, "-") {
		return nil, fmt.Errorf("invalid refspec: %s", ref)
	}
	root, err := os.MkdirTemp(bd.b.tmp, "build-git-")
	if err != nil {
		return nil, fmt.Errorf("clone %s: %w", repo, err)
	}
	git := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "protocol.file.allow=never"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GIT_PROTOCOL_FROM_USER=0", "GIT_CONFIG_NOSYSTEM=1", "HOME=/dev/null", "GIT_TERMINAL_PROMPT=0")
		return cmd.CombinedOutput()
	}
	fail := func(err error) (io.ReadCloser, error) {
		os.RemoveAll(root)
		return nil, err
	}
	if out, err := git("init"); err != nil {
		return fail(fmt.Errorf("failed to init repo at %s: %s: %w", root, out, err))
	}
	if out, err := git("remote", "add", "origin", repo); err != nil {
		return fail(fmt.Errorf("failed add origin repo at %s: %s: %w", repo, out, err))
	}
	fetch := []string{"fetch"}
	if shallowClone(ctx, repo) {
		fetch = append(fetch, "--depth", "1")
	}
	if out, err := git(append(fetch, "origin", "--", ref)...); err != nil {
		return fail(fmt.Errorf("error fetching: %s: %w", out, err))
	}
	if out, err := git("checkout", ref); err != nil {
		if _, err2 := git("checkout", "FETCH_HEAD"); err2 != nil {
			return fail(fmt.Errorf("error checking out %s: %s: %w", ref, out, err))
		}
	}
	if out, err := git("submodule", "update", "--init", "--recursive", "--depth=1"); err != nil {
		return fail(fmt.Errorf("error initializing submodules: %s: %w", out, err))
	}
	dir := root
	if subdir != "" {
		// The subdirectory is resolved inside the clone: a symlink in the
		// repository cannot point the context at the host.
		rootFS, err := os.OpenRoot(root)
		if err != nil {
			return fail(err)
		}
		rel, _ := cleanRel(subdir)
		if rel == "" {
			rel = "."
		}
		fi, err := rootFS.Stat(rel)
		rootFS.Close()
		if err != nil {
			return fail(fmt.Errorf("error setting git context, %q not within git root: %w", subdir, err))
		}
		if !fi.IsDir() {
			return fail(fmt.Errorf("error setting git context, not a directory: %s", filepath.Join(root, subdir)))
		}
		dir = filepath.Join(root, rel)
	}
	pr := dirTar(dir)
	return &finishing{Reader: pr, close: func() error {
		pr.CloseWithError(errors.New("context not read"))
		return os.RemoveAll(root)
	}}, nil
}

// shallowClone tells whether a repository can be fetched with --depth:
// any but a "dumb" http server can.
func shallowClone(ctx context.Context, repo string) bool {
	u, err := url.Parse(repo)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return true
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, repo+"/info/refs?service=git-upload-pack", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Type") == "application/x-git-upload-pack-advertisement"
}

// dirTar streams the files under dir as a tar: a context that is a
// directory on the host.
func dirTar(dir string) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.AddFS(os.DirFS(dir))
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// finishing is a context stream with work to do when it is closed.
type finishing struct {
	io.Reader
	close func() error
}

func (f *finishing) Close() error { return f.close() }
