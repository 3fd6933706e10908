package reference

import (
	"testing"

	"github.com/containerd/errdefs"
)

func TestNormalisation(t *testing.T) {
	tests := []struct {
		in, full, familiar, path, remote string
	}{
		{"alpine", "docker.io/library/alpine:latest", "alpine:latest", "library/alpine", "index.docker.io/library/alpine:latest"},
		{"user/app:1", "docker.io/user/app:1", "user/app:1", "user/app", "index.docker.io/user/app:1"},
		{"localhost:5000/x:1", "localhost:5000/x:1", "localhost:5000/x:1", "x", "localhost:5000/x:1"},
		{"127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b:latest", "127.0.0.1:5000/a/b:latest", "a/b", "127.0.0.1:5000/a/b:latest"},
	}
	for _, tt := range tests {
		n, err := ParseWithDefaultTag(tt.in)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		r, err := Remote(n, false)
		if err != nil {
			t.Fatalf("%s: %v", tt.in, err)
		}
		if n.String() != tt.full || Familiar(n) != tt.familiar || Path(n) != tt.path || r.Name() != tt.remote {
			t.Errorf("%s: got %s / %s / %s / %s", tt.in, n, Familiar(n), Path(n), r.Name())
		}
	}
}

func TestInvalid(t *testing.T) {
	for in, msg := range map[string]string{
		"bad::ref": "invalid reference format",
		"Alpine":   "invalid reference format: repository name (library/Alpine) must be lowercase",
	} {
		_, err := Parse(in)
		if !errdefs.IsInvalidArgument(err) || err.Error() != msg {
			t.Errorf("Parse(%q) = %v, want %q", in, err, msg)
		}
	}
}
