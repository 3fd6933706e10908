package commit

import (
	"reflect"
	"testing"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"
)

func TestConfig(t *testing.T) {
	ctr := &container.Config{
		Env:        []string{"PATH=/bin", "KEEP=1"},
		Cmd:        []string{"sleep", "1000"},
		WorkingDir: "/work",
		User:       "app",
		Labels:     map[string]string{"a": "1"},
	}
	for _, tt := range []struct {
		name    string
		opts    Options
		want    func(c *v1.Config)
		wantErr string
	}{
		{name: "no changes keeps the container's config", want: func(c *v1.Config) {}},
		{
			name: "CMD, ENV with expansion, LABEL, WORKDIR, USER, EXPOSE",
			opts: Options{Changes: []string{`CMD ["cat","/f"]`, "ENV ADDED=$KEEP-x", "LABEL b=2", "WORKDIR sub", "USER root", "EXPOSE 80/udp"}},
			want: func(c *v1.Config) {
				c.Cmd = []string{"cat", "/f"}
				c.Env = []string{"PATH=/bin", "KEEP=1", "ADDED=1-x"}
				c.Labels = map[string]string{"a": "1", "b": "2"}
				c.WorkingDir = "/work/sub"
				c.User = "root"
				c.ExposedPorts = map[string]struct{}{"80/udp": {}}
			},
		},
		{
			name: "shell-form CMD",
			opts: Options{Changes: []string{"CMD echo hi"}},
			want: func(c *v1.Config) { c.Cmd = []string{"/bin/sh", "-c", "echo hi"} },
		},
		{
			// The ENTRYPOINT clears the command; the merge does not bring
			// the container's back, as in dockerd.
			name: "ENTRYPOINT drops the command",
			opts: Options{Changes: []string{`ENTRYPOINT ["/bin/echo"]`}},
			want: func(c *v1.Config) { c.Entrypoint = []string{"/bin/echo"}; c.Cmd = nil },
		},
		{
			name: "a body config is merged over the container's",
			opts: Options{Config: &container.Config{Env: []string{"KEEP=2"}, Cmd: []string{"true"}}},
			want: func(c *v1.Config) { c.Env = []string{"KEEP=2", "PATH=/bin"}; c.Cmd = []string{"true"} },
		},
		{name: "FROM is refused", opts: Options{Changes: []string{"FROM x"}}, wantErr: "from is not a valid change command"},
		{name: "RUN is refused", opts: Options{Changes: []string{"run true"}}, wantErr: "run is not a valid change command"},
		{name: "bad signal", opts: Options{Changes: []string{"STOPSIGNAL NOPE"}}, wantErr: "Invalid signal: NOPE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opts.config(ctr)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr || !errdefs.IsInvalidArgument(err) {
					t.Fatalf("err = %v, want invalid argument %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := toV1(ctr)
			if err != nil {
				t.Fatal(err)
			}
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config = %+v\nwant     %+v", got, want)
			}
		})
	}
}
