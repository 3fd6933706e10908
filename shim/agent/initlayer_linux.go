//go:build linux

package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// initDirs returns the directories of the init layer, of its part under
// the image, and of the lost+found whiteout (proto.InitLayerDir,
// proto.InitLayerUnderDir, proto.HideLostFoundDir): the initramfs's when
// GuestRootfs names them, else ones built under Dir.
func (g *GuestRootfs) initDirs() (layer, under, hideLostFound string) {
	if g.InitLayer != "" {
		return g.InitLayer, g.InitLayer + proto.InitLayerUnderSuffix, g.HideLostFound
	}
	d := g.dir()
	return filepath.Join(d, "init"), filepath.Join(d, "init-under"), filepath.Join(d, "hide-lost-found")
}

// buildInitDirs makes the init layer and the whiteout under Dir, for a
// GuestRootfs whose initramfs does not carry them.
func (g *GuestRootfs) buildInitDirs() error {
	if g.InitLayer != "" {
		return nil
	}
	layer, under, hide := g.initDirs()
	if err := writeInitLayer(layer, under); err != nil {
		return err
	}
	return writeHideLostFound(hide)
}

// lowerDirs returns the overlay's read-only layers, top first: the init
// layer, the lost+found whiteout when the base's lost+found is empty, the
// base mounted under Dir, and the init layer's part under it.
func (g *GuestRootfs) lowerDirs() []string {
	layer, under, hide := g.initDirs()
	base := filepath.Join(g.dir(), "base")
	dirs := []string{layer}
	if entries, err := os.ReadDir(filepath.Join(base, "lost+found")); err == nil && len(entries) == 0 {
		dirs = append(dirs, hide)
	}
	return append(dirs, base, under)
}

// writeInitLayer builds proto.InitLayer at dir, and its entries that go
// under the image at under, replacing what is there.
func writeInitLayer(dir, under string) error {
	for _, d := range []string{dir, under} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("clear init layer: %w", err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("init layer: %w", err)
		}
	}
	for _, e := range proto.InitLayer() {
		p := filepath.Join(dir, e.Path)
		if e.Under {
			p = filepath.Join(under, e.Path)
		}
		var err error
		switch e.Kind {
		case proto.InitLayerDirectory:
			err = os.Mkdir(p, 0o755)
		case proto.InitLayerFile:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o755); err == nil {
				err = f.Close()
			}
		case proto.InitLayerSymlink:
			err = os.Symlink(e.Target, p)
		default:
			err = fmt.Errorf("%s: unknown kind %d", e.Path, e.Kind)
		}
		if err != nil {
			return fmt.Errorf("init layer: %w", err)
		}
	}
	return nil
}

// writeHideLostFound makes dir hold only a whiteout of lost+found.
func writeHideLostFound(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear lost+found whiteout: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lost+found whiteout: %w", err)
	}
	// A 0:0 character device is overlayfs's whiteout.
	if err := unix.Mknod(filepath.Join(dir, "lost+found"), unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("lost+found whiteout: %w", err)
	}
	return nil
}
