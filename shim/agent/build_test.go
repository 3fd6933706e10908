//go:build linux

package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/husk-vm/husk/shim/agent"
	"github.com/husk-vm/husk/shim/host"
	"github.com/husk-vm/husk/shim/proto"
)

// layerRoot is a LayerRootfs that records applied layers and cuts
// scripted ones.
type layerRoot struct {
	agent.DirRootfs
	applied [][]byte
	cut     []byte
	cutErr  error
}

func (l *layerRoot) ApplyLayer(ctx context.Context, r io.Reader) error {
	// Read as the guest does: to the tar's end marker, no further.
	var buf bytes.Buffer
	tr := tar.NewReader(io.TeeReader(r, &buf))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if hdr.Name == "bad" {
			return errors.New("bad entry")
		}
		io.Copy(io.Discard, tr)
	}
	l.applied = append(l.applied, buf.Bytes())
	return nil
}

func (l *layerRoot) CutLayer(ctx context.Context, w io.Writer) error {
	if l.cutErr != nil {
		w.Write(l.cut[:len(l.cut)/2])
		return l.cutErr
	}
	_, err := w.Write(l.cut)
	return err
}

func oneFileTar(t *testing.T, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	tw.Write([]byte(body))
	tw.Close()
	return buf.Bytes()
}

func TestLayerOpsOverTheWire(t *testing.T) {
	lr := &layerRoot{DirRootfs: agent.DirRootfs(t.TempDir())}
	a, err := agent.New(agent.Options{InitExe: testInitExe, Rootfs: lr, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	f := &fixture{agent: a}
	c, _ := f.connect(t)

	if err := c.ApplyLayer(ctx(t), bytes.NewReader(oneFileTar(t, "a", "x"))); err == nil || !strings.Contains(err.Error(), "not set up") {
		t.Errorf("apply before setup: %v", err)
	}
	if err := c.Setup(ctx(t), proto.SetupSpec{Hostname: "b"}); err != nil {
		t.Fatal(err)
	}

	layer := oneFileTar(t, "a", strings.Repeat("x", 100000))
	if err := c.ApplyLayer(ctx(t), bytes.NewReader(layer)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	if len(lr.applied) != 1 || !bytes.Equal(lr.applied[0], layer) {
		t.Errorf("the agent got %d layers, not the one sent", len(lr.applied))
	}
	err = c.ApplyLayer(ctx(t), bytes.NewReader(oneFileTar(t, "bad", "x")))
	var ae *host.AgentError
	if !errors.As(err, &ae) || ae.Message != "bad entry" {
		t.Errorf("failed apply = %v, want the agent's error", err)
	}

	lr.cut = oneFileTar(t, "changed", strings.Repeat("y", 70000))
	var got bytes.Buffer
	if err := c.CutLayer(ctx(t), &got); err != nil {
		t.Fatalf("cut: %v", err)
	}
	if !bytes.Equal(got.Bytes(), lr.cut) {
		t.Errorf("cut layer: %d bytes, want exactly the %d the agent wrote", got.Len(), len(lr.cut))
	}
	// The session still works after the trailing Response.
	if _, err := c.Ping(ctx(t)); err != nil {
		t.Errorf("ping after cut: %v", err)
	}

	lr.cutErr = errors.New("disk on fire")
	if err := c.CutLayer(ctx(t), io.Discard); err == nil {
		t.Error("a cut the agent failed was reported complete")
	}
}
