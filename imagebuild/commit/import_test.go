package commit_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/imagebuild/commit"
)

func layerTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func blobCount(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(path, "sha256") {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestImport(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	images, err := imagebuild.New(imagebuild.Options{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	layer := layerTar(t, map[string]string{"etc/hello": "hi\n"})
	// A tar need not end where its end-of-archive blocks do: the layer is
	// the stream as sent, so that its digest is the diffID dockerd gives.
	layer = append(layer, make([]byte, 1024)...)

	id, ref, err := commit.Import(ctx, images, bytes.NewReader(layer), commit.ImportOptions{
		Repo: "imported/x", Tag: "v1", Source: "-",
		Changes: []string{`CMD ["cat","/etc/hello"]`, "ENV A=1"},
	})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if ref != "imported/x:v1" {
		t.Errorf("ref = %q", ref)
	}
	img, err := images.Resolve(ctx, "imported/x:v1")
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != id {
		t.Errorf("imported/x:v1 is %s, import said %s", img.ID, id)
	}
	c := img.Config
	wantDiff := fmt.Sprintf("sha256:%x", sha256.Sum256(layer))
	if len(c.RootFS.DiffIDs) != 1 || c.RootFS.DiffIDs[0].String() != wantDiff {
		t.Errorf("diffIDs = %v, want [%s]", c.RootFS.DiffIDs, wantDiff)
	}
	if c.OS != "linux" || c.Architecture != "amd64" {
		t.Errorf("platform = %s/%s", c.OS, c.Architecture)
	}
	if strings.Join(c.Config.Cmd, " ") != "cat /etc/hello" || strings.Join(c.Config.Env, " ") != "A=1" {
		t.Errorf("config = %+v", c.Config)
	}
	if len(c.History) != 1 || c.History[0].Comment != "Imported from -" || c.History[0].EmptyLayer {
		t.Errorf("history = %+v", c.History)
	}
	insp, err := images.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if insp.Comment != "Imported from -" {
		t.Errorf("inspect comment = %q", insp.Comment)
	}

	// Refusals keep nothing: not a tar, and a change dockerd refuses.
	before := blobCount(t, root)
	for _, tt := range []struct {
		name    string
		body    io.Reader
		opts    commit.ImportOptions
		want    string
		invalid bool // an invalid-argument error (400), else internal (500) as dockerd's
	}{
		{"not a tar", strings.NewReader(strings.Repeat("this is not a tar archive\n", 40)),
			commit.ImportOptions{Repo: "imported/bad", Source: "-"}, "Error processing tar file: archive/tar: invalid tar header", false},
		{"bad change", bytes.NewReader(layer),
			commit.ImportOptions{Repo: "imported/bad", Source: "-", Changes: []string{"RUN true"}}, "run is not a valid change command", true},
		{"bad platform", bytes.NewReader(layer),
			commit.ImportOptions{Repo: "imported/bad", Source: "-", Platform: "/"}, `invalid platform "/"`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := commit.Import(ctx, images, tt.body, tt.opts)
			if err == nil || err.Error() != tt.want || errdefs.IsInvalidArgument(err) != tt.invalid {
				t.Fatalf("import = %v, want %q (invalid argument: %v)", err, tt.want, tt.invalid)
			}
			if _, err := images.Resolve(ctx, "imported/bad"); !errdefs.IsNotFound(err) {
				t.Errorf("imported/bad after a refused import: %v", err)
			}
		})
	}
	if after := blobCount(t, root); after != before {
		t.Errorf("refused imports left %d blobs behind", after-before)
	}
}
