package network

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
)

// adoptingLinks are fakeLinks that can adopt: a spare must exist on no
// bridge; adopting one in fail fails, leaving the endpoint's TAP.
type adoptingLinks struct {
	*fakeLinks
	fail map[string]bool
}

func (f *adoptingLinks) adoptTap(spare, name, bridge string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if br, ok := f.links[spare]; !ok || br != "" {
		return fmt.Errorf("no spare tap %s", spare)
	}
	if f.fail[spare] {
		return fmt.Errorf("adopt %s: injected failure", spare)
	}
	delete(f.links, spare)
	f.links[name] = bridge
	return nil
}

// TestAdoptTaps: a container's TAPs are replaced by a VM's spares on the
// same bridges; unknown TAPs and a count mismatch change nothing; a
// failure leaves each endpoint a TAP on its bridge and later spares
// untouched.
func TestAdoptTaps(t *testing.T) {
	ctx := context.Background()
	links := newFakeLinks()
	m := testManager(t, t.TempDir(), links)
	adopting := &adoptingLinks{fakeLinks: links, fail: map[string]bool{}}
	m.links = adopting
	if err := m.Start(ctx, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, network.CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	nets, err := m.Configure("bridge", map[string]*network.EndpointSettings{"a": {}})
	if err != nil {
		t.Fatal(err)
	}
	att, err := m.Attach(ctx, Request{ContainerID: ctrA, Name: "first", Hostname: "aaaaaaaaaaaa", Networks: nets})
	if err != nil {
		t.Fatal(err)
	}
	var taps []string
	for _, n := range att.Nets {
		taps = append(taps, n.Tap)
	}
	bridges := map[string]string{}
	for _, tap := range taps {
		bridges[tap] = links.links[tap]
	}
	spares := []string{"hskp0000001", "hskp0000002"}
	for _, s := range spares {
		links.links[s] = ""
	}

	if err := m.AdoptTaps(ctx, taps, spares[:1]); !errdefs.IsInvalidArgument(err) {
		t.Errorf("adopt 1 spare for 2 TAPs: %v, want invalid argument", err)
	}
	if err := m.AdoptTaps(ctx, []string{"hknotattached0", taps[1]}, spares); !errdefs.IsNotFound(err) {
		t.Errorf("adopt for a TAP nobody has: %v, want not found", err)
	}
	if _, ok := links.links[spares[0]]; !ok {
		t.Fatal("a refused adoption consumed a spare")
	}

	adopting.fail[spares[1]] = true
	if err := m.AdoptTaps(ctx, taps, spares); err == nil {
		t.Fatal("adoption with a failing second spare succeeded")
	}
	if _, ok := links.links[spares[0]]; ok {
		t.Error("the first spare was not adopted before the failure")
	}
	if _, ok := links.links[spares[1]]; !ok {
		t.Error("the failing spare is gone")
	}
	for _, tap := range taps {
		if links.links[tap] != bridges[tap] {
			t.Errorf("after a failed adoption %s is on %q, want %q", tap, links.links[tap], bridges[tap])
		}
	}

	adopting.fail = nil
	links.links["hskp0000003"] = ""
	if err := m.AdoptTaps(ctx, taps[1:], []string{"hskp0000003"}); err != nil {
		t.Fatal(err)
	}
	for _, tap := range taps {
		if links.links[tap] != bridges[tap] {
			t.Errorf("%s is on %q, want %q", tap, links.links[tap], bridges[tap])
		}
	}
	if slices.Contains(links.names(), "hskp0000003") {
		t.Error("the adopted spare still exists under its own name")
	}
	// Detach removes the adopted TAPs by the endpoints' names.
	if err := m.Detach(ctx, ctrA); err != nil {
		t.Fatal(err)
	}
	for _, tap := range taps {
		if _, ok := links.links[tap]; ok {
			t.Errorf("%s outlived Detach", tap)
		}
	}
}
