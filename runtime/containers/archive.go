package containers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"

	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// ArchivePutOptions are PUT /containers/{id}/archive's flags.
type ArchivePutOptions struct {
	NoOverwriteDirNonDir bool
	// CopyUIDGID makes the container's configured user own what is
	// extracted; with none configured the archive's owners are kept, as
	// dockerd keeps them (docker cp -a).
	CopyUIDGID bool
}

// ArchiveStat describes a path in a container (HEAD archive).
func (m *Manager) ArchiveStat(ctx context.Context, ref, path string) (container.PathStat, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return container.PathStat{}, err
	}
	client, release, err := c.guestAgent(ctx)
	if err != nil {
		return container.PathStat{}, err
	}
	defer release()
	st, err := client.ArchiveStat(ctx, path)
	if err != nil {
		return container.PathStat{}, archiveError(err, ref, path)
	}
	return pathStat(st), nil
}

// ArchiveGet returns a path's stat and its tar stream (GET archive).
func (m *Manager) ArchiveGet(ctx context.Context, ref, path string) (container.PathStat, io.ReadCloser, error) {
	c, err := m.lookup(ref)
	if err != nil {
		return container.PathStat{}, nil, err
	}
	client, release, err := c.guestAgent(ctx)
	if err != nil {
		return container.PathStat{}, nil, err
	}
	st, rc, err := client.ArchiveGet(ctx, path)
	if err != nil {
		release()
		return container.PathStat{}, nil, archiveError(err, ref, path)
	}
	c.emit(events.ActionArchivePath, nil)
	return pathStat(st), releasingReader{rc, release}, nil
}

// ArchivePut extracts a tar stream into a directory of the container (PUT
// archive).
func (m *Manager) ArchivePut(ctx context.Context, ref, path string, opts ArchivePutOptions, r io.Reader) error {
	c, err := m.lookup(ref)
	if err != nil {
		return err
	}
	spec := proto.ArchiveSpec{Path: path, NoOverwriteDirNonDir: opts.NoOverwriteDirNonDir}
	c.mu.Lock()
	if opts.CopyUIDGID {
		spec.ChownTo = c.rec.Config.User
	}
	err = extractAllowed(c.rec.HostConfig.ReadonlyRootfs, mountPoints(c.rec.Mounts), path)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	client, release, err := c.guestAgent(ctx)
	if err != nil {
		return err
	}
	defer release()
	if err := client.ArchivePut(ctx, spec, r); err != nil {
		return archiveError(err, ref, path)
	}
	c.emit(events.ActionExtractToDir, nil)
	return nil
}

// extractAllowed refuses, as dockerd does before it extracts anything, a
// copy into a read-only mount point, or outside every mount point into a
// read-only root. --tmpfs mounts are not mount points there, so not here.
// dir is taken as written: dockerd resolves symbolic links in it first,
// so a link to a writable volume on a read-only root is refused here and
// copied into there.
func extractAllowed(readonlyRoot bool, mounts []container.MountPoint, dir string) error {
	dir = path.Clean("/" + dir)
	var in *container.MountPoint
	for i, mp := range mounts {
		rel, err := filepath.Rel(mp.Destination, dir)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		// The innermost one is where the files would land.
		if in == nil || len(mp.Destination) > len(in.Destination) {
			in = &mounts[i]
		}
	}
	switch {
	case in != nil && !in.RW:
		return errdefs.ErrInvalidArgument.WithMessage("mounted volume is marked read-only")
	case in == nil && readonlyRoot:
		return errdefs.ErrInvalidArgument.WithMessage("container rootfs is marked read-only")
	}
	return nil
}

func pathStat(st proto.PathStat) container.PathStat {
	return container.PathStat{Name: st.Name, Size: st.Size, Mode: fs.FileMode(st.Mode), Mtime: st.Mtime, LinkTarget: st.LinkTarget}
}

// archiveError words the agent's failures as dockerd does.
func archiveError(err error, ref, path string) error {
	var ae *host.AgentError
	if !errors.As(err, &ae) {
		return err
	}
	switch ae.Kind {
	case proto.KindNotFound:
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("Could not find the file %s in container %s", path, ref))
	case proto.KindInvalid, proto.KindUser:
		if ae.Message == "extraction point is not a directory" {
			// dockerd 20.10 answers this one with a 500.
			return errors.New(ae.Message)
		}
		return errdefs.ErrInvalidArgument.WithMessage(ae.Message)
	}
	return fmt.Errorf("copy files: %w", err)
}

func errBusy(id string) error {
	return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is busy: files are being copied while it is stopped", id))
}

// errVMStopped refuses what needs the agent of a container whose pause
// had to stop its VM's vCPUs (an agent that cannot freeze), in dockerd's
// words for a paused container.
func errVMStopped(id string) error {
	return errdefs.ErrConflict.WithMessage(fmt.Sprintf("Container %s is paused, unpause the container first", id))
}

// guestAgent returns a session with the container's agent: the running
// VM's, or, for a container that is not running, a VM booted with its disks
// just for this, which release shuts down. A paused container's agent
// answers (only its processes are frozen, and dockerd copies to and from
// a paused container too), unless pause had to stop the VM's vCPUs.
func (c *ctr) guestAgent(ctx context.Context) (*host.Client, func(), error) {
	c.mu.Lock()
	if c.run != nil && c.rec.State.Running {
		defer c.mu.Unlock()
		if c.run.vmPaused {
			return nil, nil, errVMStopped(c.rec.ID)
		}
		return c.run.client, func() {}, nil
	}
	c.mu.Unlock()

	c.maint.Lock()
	c.mu.Lock()
	if c.run != nil || c.removed {
		// Started or removed while we waited: try again from the top.
		c.mu.Unlock()
		c.maint.Unlock()
		if c.removed {
			return nil, nil, errdefs.ErrNotFound.WithMessage("No such container: " + c.rec.ID)
		}
		return c.guestAgent(ctx)
	}
	c.busy = true
	machine, client, sh, _, err := c.bootVM(ctx, false, nil, nil)
	if err != nil {
		c.busy = false
		c.mu.Unlock()
		c.maint.Unlock()
		return nil, nil, fmt.Errorf("boot the stopped container to copy files: %w", err)
	}
	c.mu.Unlock()
	release := func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The agent answers once the upper disk is synced and unmounted.
		if err := client.Shutdown(shutCtx); err != nil {
			c.m.log.Warn("maintenance VM shutdown", "id", c.rec.ID[:12], "err", err)
		}
		discardVM(machine, client)
		sh.stop(c.m.log)
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
		c.maint.Unlock()
	}
	return client, release, nil
}

// releasingReader runs release once the reader is closed.
type releasingReader struct {
	io.ReadCloser
	release func()
}

func (r releasingReader) Close() error {
	err := r.ReadCloser.Close()
	r.release()
	return err
}
