//go:build linux

package agent

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

func TestApplySysctls(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "net", "ipv4", "ip_forward")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applySysctls(dir, map[string]string{"net.ipv4.ip_forward": "1"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "1" {
		t.Errorf("ip_forward = %q, want 1", b)
	}
	err := applySysctls(dir, map[string]string{"net.ipv4.nope": "1"})
	if ae, ok := err.(*agentError); !ok || ae.kind != proto.KindInvalid {
		t.Errorf("a sysctl the kernel lacks: %v, want an invalid-request error", err)
	}
}

func TestRlimitNamesMap(t *testing.T) {
	for _, n := range proto.RlimitNames() {
		if _, ok := rlimitResource(n); !ok {
			t.Errorf("--ulimit %s has no setrlimit resource", n)
		}
	}
	if _, ok := rlimitResource("bogus"); ok {
		t.Error("bogus maps to a resource")
	}
}

func TestShmData(t *testing.T) {
	for size, want := range map[int64]string{0: "mode=1777,size=67108864", 128 << 20: "mode=1777,size=134217728"} {
		if got := shmData(size); got != want {
			t.Errorf("shmData(%d) = %q, want %q", size, got, want)
		}
	}
}

func TestCapabilityTable(t *testing.T) {
	names := proto.CapabilityNames()
	// Spot checks against linux/capability.h.
	for i, want := range map[int]string{0: "CAP_CHOWN", 12: "CAP_NET_ADMIN", 21: "CAP_SYS_ADMIN", 31: "CAP_SETFCAP", 40: "CAP_CHECKPOINT_RESTORE"} {
		if names[i] != want {
			t.Errorf("capability %d = %s, want %s", i, names[i], want)
		}
	}
	if err := boundCapabilities(&proto.Capabilities{Bounding: []string{"CAP_BOGUS"}}, 40); err == nil {
		t.Error("an unknown capability was accepted")
	}
}
