package containers

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseDetachKeys(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "\x10\x11", false},
		{"ctrl-p,ctrl-q", "\x10\x11", false},
		{"a,ctrl-@,ctrl-[,ctrl-_", "a\x00\x1b\x1f", false},
		{"ctrl-", "", true},
		{"ctrl-1", "", true},
		{"ab", "", true},
	}
	for _, tt := range tests {
		got, err := ParseDetachKeys(tt.in)
		if (err != nil) != tt.wantErr || string(got) != tt.want {
			t.Errorf("ParseDetachKeys(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := ParseDetachKeys("x,yy"); err == nil || err.Error() != "Invalid detach keys (x,yy) provided" {
		t.Errorf("error wording: %v", err)
	}
}

func TestEscapeProxy(t *testing.T) {
	keys := []byte("\x10\x11")
	tests := []struct {
		name, in, want string
		detached       bool
	}{
		{"plain input", "hello", "hello", false},
		{"sequence ends it", "ls\r\x10\x11after", "ls\r", true},
		{"sequence alone", "\x10\x11", "", true},
		{"broken sequence passes through", "a\x10b\x10\x10\x11", "a\x10b\x10", true},
		{"prefix at the end of input is input", "a\x10", "a\x10", false},
	}
	for _, tt := range tests {
		for _, oneByte := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tt.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := io.ReadAll(newEscapeProxy(r, keys))
			if string(got) != tt.want || errors.Is(err, errDetached) != tt.detached || (!tt.detached && err != nil) {
				t.Errorf("%s (one byte reads %v): got %q, %v; want %q, detached %v", tt.name, oneByte, got, err, tt.want, tt.detached)
			}
		}
	}
}
