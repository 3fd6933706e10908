package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
)

// joined has the shape of go-containerregistry's ping error.
type joined []error

func (j joined) Error() string { return j[0].Error() + "; " + j[1].Error() }

func TestPingError(t *testing.T) {
	tls, plain := errors.New("over https"), errors.New("over http")
	both := joined{tls, plain}
	for _, tc := range []struct {
		name     string
		err      error
		insecure bool
		want     error
	}{
		{"insecure takes the last", both, true, plain},
		{"secure takes https's", both, false, tls},
		{"wrapped", fmt.Errorf("ping: %w", both), true, plain},
		{"other", tls, true, tls},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pingError(tc.err, tc.insecure); got != tc.want {
				t.Errorf("pingError = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUnreachableRegistry: a loopback registry that is not listening is
// reported as dockerd reports it, by its plain-http endpoint alone.
func TestUnreachableRegistry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	want := `Get "http://` + host + `/v2/": dial tcp ` + host + `: connect: connection refused`
	s := newService(t, "", nil)
	err = s.Pull(context.Background(), host+"/x", "", nil, func(jsonstream.Message) {})
	if err == nil || err.Error() != want {
		t.Errorf("pull: %v, want %q", err, want)
	}
	_, _, err = s.Login(context.Background(), registry.AuthConfig{ServerAddress: host, Username: "a", Password: "b"})
	if err == nil || err.Error() != want {
		t.Errorf("login: %v, want %q", err, want)
	}
}
