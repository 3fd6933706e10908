package containers

import (
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/runtime/logs"
)

func TestValidateLogConfig(t *testing.T) {
	tests := []struct {
		lc   container.LogConfig
		want string
	}{
		{container.LogConfig{}, ""},
		{container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1k", "max-file": "3", "compress": "true", "tag": "x", "labels": "a"}}, ""},
		{container.LogConfig{Type: "local", Config: map[string]string{"max-size": "1k"}}, ""},
		{container.LogConfig{Type: "none"}, ""},
		{container.LogConfig{Config: map[string]string{"foo": "bar"}}, "unknown log opt 'foo' for json-file log driver"},
		{container.LogConfig{Type: "local", Config: map[string]string{"tag": "x"}}, "unknown log opt 'tag' for log driver local"},
		{container.LogConfig{Type: "none", Config: map[string]string{"max-size": "1k"}}, "invalid logging opts for driver none"},
		{container.LogConfig{Type: "bogus"}, `error looking up logging plugin bogus: plugin "bogus" not found`},
		{container.LogConfig{Type: "syslog"}, `error looking up logging plugin syslog: plugin "syslog" not found`},
	}
	for _, tt := range tests {
		err := validateLogConfig(tt.lc)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected %v", tt.lc, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want || !errdefs.IsInvalidArgument(err)):
			t.Errorf("%+v: error %v, want invalid argument %q", tt.lc, err, tt.want)
		}
	}
}

func TestLogOptions(t *testing.T) {
	tests := []struct {
		lc      container.LogConfig
		want    logs.Options
		wantErr string
	}{
		{container.LogConfig{}, logs.Options{MaxFiles: 1}, ""},
		{container.LogConfig{Config: map[string]string{"max-size": "1k", "max-file": "3"}}, logs.Options{MaxSize: 1000, MaxFiles: 3}, ""},
		{container.LogConfig{Config: map[string]string{"max-size": "10m", "max-file": "2", "compress": "true"}}, logs.Options{MaxSize: 10_000_000, MaxFiles: 2, Compress: true}, ""},
		{container.LogConfig{Config: map[string]string{"max-file": "3"}}, logs.Options{MaxFiles: 3}, ""},
		{container.LogConfig{Config: map[string]string{"max-size": "bogus"}}, logs.Options{}, "invalid size: 'bogus'"},
		{container.LogConfig{Config: map[string]string{"max-size": "-1"}}, logs.Options{}, "invalid size: '-1'"},
		{container.LogConfig{Config: map[string]string{"max-size": "0"}}, logs.Options{}, "max-size must be a positive number"},
		{container.LogConfig{Config: map[string]string{"max-size": "1k", "max-file": "0"}}, logs.Options{}, "max-file cannot be less than 1"},
		{container.LogConfig{Config: map[string]string{"max-size": "1k", "max-file": "x"}}, logs.Options{}, `strconv.Atoi: parsing "x": invalid syntax`},
		{container.LogConfig{Config: map[string]string{"max-size": "1k", "compress": "maybe"}}, logs.Options{}, `strconv.ParseBool: parsing "maybe": invalid syntax`},
		{container.LogConfig{Config: map[string]string{"compress": "true"}}, logs.Options{}, "compress cannot be true when max-file is less than 2 or max-size is not set"},
		{container.LogConfig{Type: "local"}, logs.Options{MaxSize: 20 << 20, MaxFiles: 5, Compress: true}, ""},
		{container.LogConfig{Type: "local", Config: map[string]string{"max-size": "1k", "max-file": "1"}}, logs.Options{MaxSize: 1024, MaxFiles: 1}, ""},
		{container.LogConfig{Type: "none"}, logs.Options{Discard: true}, ""},
	}
	for _, tt := range tests {
		got, err := logOptions(tt.lc)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("%+v: error %v, want %q", tt.lc, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%+v: %+v, %v; want %+v", tt.lc, got, err, tt.want)
		}
	}
}
