//go:build linux

package agent_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/husk-vm/husk/shim/proto"
)

// TestHostileArchivesStayInRoot uploads archives built to escape the
// container's root (docker cp's PUT) through every route a tar offers:
// climbing names, absolute climbing names, symlinks and chains of them
// pointing out, a directory replaced by a symlink, hard links to files
// outside. Each upload may be refused or confined; either way nothing may
// appear outside the root, at any depth up to the host's "/".
func TestHostileArchivesStayInRoot(t *testing.T) {
	f := newFixture(t)
	c, _ := f.connect(t)
	setup(t, c)

	// Names unique to this run, so a leftover cannot make the test pass
	// or fail.
	tag := fmt.Sprintf("husk-escape-%d", os.Getpid())
	up := "../../../../../../../../../../"
	cases := []struct {
		name    string
		entries [][2]string
		// landed, for an upload that is confined rather than refused, is
		// where its file must be, under the root.
		landed string
	}{
		{"climbing name", [][2]string{{up + tag + "-1", "x"}}, ""},
		{"absolute climbing name", [][2]string{{"/" + up + tag + "-2", "x"}}, "home/app/" + tag + "-2"},
		{"symlink out, then through it", [][2]string{{"l3", "->" + up}, {"l3/" + tag + "-3", "x"}}, ""},
		{"symlink to /, then climbing through it", [][2]string{{"l4", "->/"}, {"l4/" + up + tag + "-4", "x"}}, ""},
		{"chain of symlinks out", [][2]string{{"c5a", "->c5b"}, {"c5b", "->" + up}, {"c5a/" + tag + "-5", "x"}}, ""},
		{"directory replaced by a symlink out", [][2]string{{"d6/", ""}, {"d6", "->" + up}, {"d6/" + tag + "-6", "x"}}, ""},
		{"absolute symlink climbing", [][2]string{{"l7", "->/" + up}, {"l7/" + tag + "-7", "x"}}, ""},
		{"hard link to a file outside", [][2]string{{tag + "-8", "=>" + up + "etc/hostname"}}, ""},
		{"symlink out named like the destination", [][2]string{{".", "->" + up}, {tag + "-9", "x"}}, "home/app/" + tag + "-9"},
	}
	// Everything that lies outside the root, from its parent up to "/".
	var outside []string
	for d := filepath.Dir(f.root); ; d = filepath.Dir(d) {
		outside = append(outside, d)
		if d == "/" {
			break
		}
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			err := c.ArchivePut(ctx(t), proto.ArchiveSpec{Path: "/home/app"}, bytes.NewReader(tarOf(t, tt.entries...)))
			t.Logf("put: %v", err)
			switch {
			case err == nil && tt.landed == "":
				t.Error("put succeeded, want it refused")
			case err == nil:
				if b, err := os.ReadFile(filepath.Join(f.root, tt.landed)); err != nil || string(b) != "x" {
					t.Errorf("confined file %s = %q, %v", tt.landed, b, err)
				}
			case agentErrorKind(err) != proto.KindInvalid:
				t.Errorf("put = %v, want an invalid-argument error", err)
			}
			for _, dir := range outside {
				matches, _ := filepath.Glob(filepath.Join(dir, tag+"*"))
				for _, m := range matches {
					t.Errorf("%s landed outside the container root", m)
					_ = os.RemoveAll(m)
				}
			}
		})
	}
	// The host file a hard link aimed at is untouched and not linked in.
	if fi, err := os.Lstat(filepath.Join(f.root, "home/app", tag+"-8")); err == nil && fi.Mode().IsRegular() {
		if host, err := os.Stat("/etc/hostname"); err == nil && os.SameFile(fi, host) {
			t.Error("a hard link to the host's /etc/hostname was made inside the root")
		}
	}
}
