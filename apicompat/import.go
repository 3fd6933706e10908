package apicompat

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/jsonstream"
)

// ImportOptions are `docker import`'s parameters. Source is "-" (the
// request body) or the URL the tar was fetched from; Repo is the familiar
// repository name ("" leaves the image untagged) and Tag its tag.
type ImportOptions struct {
	Source, Repo, Tag, Message string
	Changes                    []string
	// Platform is as the client sent it ("" means linux/amd64).
	Platform string
}

// Importer makes an image of one filesystem tar (docker import).
type Importer interface {
	// ValidateImport refuses what can be refused before the tar is read.
	ValidateImport(opts ImportOptions) error
	// Import reads the uncompressed tar to its end and returns the new
	// image's ID.
	Import(ctx context.Context, tar io.Reader, opts ImportOptions) (string, error)
}

// importImage is POST /images/create with fromSrc: the body, or a URL
// dockerd fetches, as a (possibly compressed) tar becomes a one-layer
// image. Refusals before anything is streamed are HTTP errors, as
// dockerd's; the stream carries the fetch's progress and ends with the
// image ID as a status.
func (s *server) importImage(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	imp, ok := s.cfg.Images.(Importer)
	if !ok {
		return errdefs.ErrNotImplemented.WithMessage("this daemon cannot import images")
	}
	opts := ImportOptions{Source: r.Form.Get("fromSrc"), Tag: r.Form.Get("tag"),
		Message: r.Form.Get("message"), Changes: r.Form["changes"]}
	if repo := r.Form.Get("repo"); repo != "" {
		named, err := reference.ParseNormalizedNamed(repo)
		if err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		if _, ok := named.(reference.Canonical); ok {
			return errdefs.ErrInvalidArgument.WithMessage("cannot import digest reference")
		}
		opts.Repo = reference.FamiliarString(named)
	}
	opts.Platform = r.Form.Get("platform")
	if err := imp.ValidateImport(opts); err != nil {
		return err
	}
	out := &jsonProgress{w: w}
	var body io.Reader = r.Body
	if opts.Source != "-" {
		resp, err := fetchImportSource(ctx, opts.Source)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		opts.Source = resp.Request.URL.String()
		w.Header().Set("Content-Type", "application/json")
		out.write(jsonstream.Message{Status: "Downloading from " + opts.Source})
		body = &importProgress{r: resp.Body, total: resp.ContentLength, out: out}
	}
	tar, err := decompressStream(body, "import")
	if err != nil {
		return out.finish(err, false)
	}
	id, err := imp.Import(ctx, tar, opts)
	if err == nil {
		w.Header().Set("Content-Type", "application/json")
		out.write(jsonstream.Message{Status: id})
	}
	return out.finish(err, false)
}

// fetchImportSource GETs src as dockerd does for an import: http:// is
// assumed without a scheme, a 404 is a not-found error and any other
// failure status an internal one, quoting the answer.
func fetchImportSource(ctx context.Context, src string) (*http.Response, error) {
	if !strings.Contains(src, "://") {
		src = "http://" + src
	}
	u, err := url.Parse(src)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		text := fmt.Sprintf("failed to GET %s with status %s: %s", u, resp.Status, msg)
		if resp.StatusCode == http.StatusNotFound {
			return nil, errdefs.ErrNotFound.WithMessage(text)
		}
		return nil, fmt.Errorf("%s", text)
	}
	return resp, nil
}

// importProgress reports a download's progress as dockerd's "Importing"
// lines, at most one per 512 KiB.
type importProgress struct {
	r            io.Reader
	total, done  int64
	lastReported int64
	out          *jsonProgress
}

func (p *importProgress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if p.done-p.lastReported >= 512<<10 || (err == io.EOF && p.done != p.lastReported) {
		p.lastReported = p.done
		p.out.write(jsonstream.Message{Status: "Importing",
			Progress: &jsonstream.Progress{Current: p.done, Total: p.total}})
	}
	return n, err
}
