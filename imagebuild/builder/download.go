package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/jsonstream"
	digest "github.com/opencontainers/go-digest"
)

// unnamedFile is the name an ADD download gets when neither its URL nor
// its Content-Disposition gives one, as in dockerd.
const unnamedFile = "__unnamed__"

// progressStep is how many bytes a download reads between two progress
// messages.
const progressStep = 1 << 20

// download fetches an ADD source URL as dockerd's classic builder does:
// from the daemon, through the proxy its environment names, into a tree
// of one file, mode 0600, carrying the response's Last-Modified time (the
// epoch without one). An archive downloaded is not extracted. dest is the
// ADD's destination: one ending in "/" needs a name for the file.
func (bd *build) download(ctx context.Context, src, dest, checksum string) (copySource, error) {
	u, err := url.Parse(src)
	if err != nil {
		return copySource{}, err
	}
	resp, err := getURL(ctx, src)
	if err != nil {
		return copySource{}, err
	}
	defer resp.Body.Close()
	name := downloadName(u.Path, resp.Header.Get("Content-Disposition"))
	if name == "" {
		if strings.HasSuffix(dest, "/") {
			return copySource{}, fmt.Errorf("cannot determine filename for source %s", src)
		}
		name = unnamedFile
	}

	f, err := os.CreateTemp(bd.b.tmp, "download-*")
	if err != nil {
		return copySource{}, fmt.Errorf("spool download: %w", err)
	}
	os.Remove(f.Name())
	defer f.Close()
	digester := digest.Canonical.Digester()
	size, err := io.Copy(io.MultiWriter(f, digester.Hash()), &progressReader{r: resp.Body, total: resp.ContentLength, step: progressStep, status: "Downloading", send: bd.progress})
	if err != nil {
		return copySource{}, fmt.Errorf("download %s: %w", src, err)
	}
	if got := digester.Digest(); checksum != "" && got.String() != checksum {
		return copySource{}, fmt.Errorf("digest mismatch for %s: %s (expected: %s)", src, got, checksum)
	}
	bd.progress(jsonstream.Message{Status: "Downloading", Progress: &jsonstream.Progress{Current: size, Total: max(resp.ContentLength, size)}})
	bd.printf("\n")
	mtime := time.Unix(0, 0)
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		mtime = t
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return copySource{}, err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: size, ModTime: mtime})
		if err == nil {
			_, err = io.Copy(tw, f)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	tree, err := newTarIndex(ctx, bd.b.tmp, pr)
	pr.CloseWithError(errors.New("download not read"))
	if err != nil {
		return copySource{}, err
	}
	return copySource{tree: tree, path: name, base: name, hidden: func(string) bool { return false }, url: true}, nil
}

// getURL GETs url from the daemon, as dockerd's GetWithStatusError does
// for ADD and remote contexts: a 4xx or 5xx answer is the error "failed
// to GET url with status S: body", classed by its status, and a name that
// does not resolve is not found.
func getURL(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && !dnsErr.IsTimeout {
			return nil, errdefs.ErrNotFound.WithMessage(err.Error())
		}
		return nil, err
	}
	if resp.StatusCode < http.StatusBadRequest {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := fmt.Sprintf("failed to GET %s with status %s: %s", url, resp.Status, bytes.TrimSpace(body))
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, errdefs.ErrNotFound.WithMessage(msg)
	case http.StatusBadRequest:
		return nil, errdefs.ErrInvalidArgument.WithMessage(msg)
	case http.StatusUnauthorized:
		return nil, errdefs.ErrUnauthenticated.WithMessage(msg)
	case http.StatusForbidden:
		return nil, errdefs.ErrPermissionDenied.WithMessage(msg)
	}
	return nil, errors.New(msg)
}

// downloadName is the name a download gets: the last element of the URL's
// path, or else the filename its Content-Disposition gives.
func downloadName(urlPath, disposition string) string {
	if urlPath != "" && !strings.HasSuffix(urlPath, "/") {
		if name := path.Base(urlPath); name != "" && name != "/" && name != "." {
			return name
		}
	}
	if _, params, err := mime.ParseMediaType(disposition); err == nil {
		if f := params["filename"]; f != "" && !strings.HasSuffix(f, "/") {
			if name := path.Base(f); name != "/" && name != "." && name != ".." {
				return name
			}
		}
	}
	return ""
}

// progressReader reports a download's progress as dockerd's progress
// messages (status, and id when set), one per step bytes.
type progressReader struct {
	r              io.Reader
	total, n, step int64
	lastReported   int64
	status, id     string
	send           func(jsonstream.Message)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.n-p.lastReported >= p.step {
		p.lastReported = p.n
		p.report()
	}
	return n, err
}

// report sends where the download is. An unknown length (-1) is shown as
// a byte count alone.
func (p *progressReader) report() {
	p.send(jsonstream.Message{Status: p.status, ID: p.id, Progress: &jsonstream.Progress{Current: p.n, Total: max(p.total, 0)}})
}

// progress sends a progress message, when the build's client takes them.
func (bd *build) progress(m jsonstream.Message) {
	if bd.out.Progress != nil {
		bd.out.Progress(m)
	}
}
