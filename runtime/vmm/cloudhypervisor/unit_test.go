package cloudhypervisor

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/runtime/vmm"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out, want string
		ok        bool
	}{
		{"cloud-hypervisor v53.0\n", "cloud-hypervisor v53.0", true},
		{"cloud-hypervisor v53.0-12-gabcdef-dirty\n", "cloud-hypervisor v53.0-12-gabcdef-dirty", true},
		{"cloud-hypervisor 53.0\n", "cloud-hypervisor v53.0", true},
		{"qemu v7\n", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := parseVersion(tt.out)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseVersion(%q) = %q, %v; want %q ok=%t", tt.out, got, err, tt.want, tt.ok)
		}
	}
}

func TestAPIError(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		is     func(error) bool
		text   string
	}{
		{"json chain", 500, `["Error from API","The VM could not be paused","Invalid state transition"]`,
			errdefs.IsFailedPrecondition, "cloud-hypervisor vm.pause: 500 Internal Server Error: Error from API: The VM could not be paused: Invalid state transition"},
		{"plain text", 500, "Error from API: disk busy\n", errdefs.IsInternal,
			"cloud-hypervisor vm.pause: 500 Internal Server Error: Error from API: disk busy"},
		{"not created", 404, `["Error from API","The VM is not created"]`, errdefs.IsNotFound, "404 Not Found: Error from API: The VM is not created"},
		{"wrong state", 405, "", errdefs.IsFailedPrecondition, "405 Method Not Allowed: no details"},
		{"bad json", 400, `["Failed to deserialize JSON"]`, errdefs.IsInvalidArgument, "400 Bad Request: Failed to deserialize JSON"},
		{"cpu removal pending", 429, `["Too Many Requests"]`, errdefs.IsUnavailable, "429 Too Many Requests"},
		{"json string", 500, `"boom"`, errdefs.IsInternal, "Internal Server Error: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error = &APIError{Endpoint: "vm.pause", Status: tt.status, Messages: parseErrorBody([]byte(tt.body))}
			err = errors.Join(err) // still classified through wrapping
			if !tt.is(err) {
				t.Errorf("%v: wrong errdefs class", err)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not contain %q", err, tt.text)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := vmm.Config{ID: "x", Dir: dir, Kernel: "k", Initramfs: "i"}
	tests := []struct {
		name string
		mod  func(*vmm.Config)
		ok   bool
	}{
		{"good", func(*vmm.Config) {}, true},
		{"kvm", func(c *vmm.Config) { c.Accel = "kvm" }, true},
		{"tcg", func(c *vmm.Config) { c.Accel = "tcg" }, false},
		{"no dir", func(c *vmm.Config) { c.Dir = "" }, false},
		{"no kernel", func(c *vmm.Config) { c.Kernel = "" }, false},
		{"no initramfs", func(c *vmm.Config) { c.Initramfs = "" }, false},
		{"long serial", func(c *vmm.Config) { c.Disks = []vmm.Disk{{Path: "d", Serial: strings.Repeat("s", 21)}} }, false},
		{"net without tap", func(c *vmm.Config) { c.Nets = []vmm.Net{{MAC: "52:54:00:00:00:01"}} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.mod(&cfg)
			err := validate(cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("validate err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("err %v is not InvalidArgument", err)
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	if _, err := New(Options{RestoreMode: "lazy"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("bad restore mode: err = %v", err)
	}
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.opts.Binary != "cloud-hypervisor" || d.opts.RestoreMode != RestoreModeCopy || d.Name() != "cloud-hypervisor" {
		t.Errorf("defaults: %+v", d.opts)
	}
}
