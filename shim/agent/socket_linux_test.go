//go:build linux

package agent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// TestSocketMount: a MountSocket mount is a listening socket at the target
// inside the root; a container process's connection to it is handed to an
// OpSocketConnect stream, which carries its bytes both ways and its end.
func TestSocketMount(t *testing.T) {
	inMountNamespace(t, func() {
		root, state := t.TempDir(), t.TempDir()
		m := &mounter{sharesDir: state}
		if err := m.apply(root, []proto.MountSpec{{Type: proto.MountSocket, Tag: "sock0", Target: "/var/run/docker.sock"}}); err != nil {
			t.Error(err)
			return
		}
		defer m.release()
		target := filepath.Join(root, "var/run/docker.sock")
		if st, err := os.Stat(target); err != nil || st.Mode()&os.ModeSocket == 0 {
			t.Errorf("target %s: %v, %v; want a socket", target, st, err)
			return
		}
		a := &Agent{mounts: m}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		// An unknown tag is refused at once.
		hostEnd, agentEnd := net.Pipe()
		err := a.socketConnect(ctx, &stream{Conn: agentEnd, r: bufio.NewReader(agentEnd)}, "sock9")
		var ae *agentError
		if !errors.As(err, &ae) || ae.kind != proto.KindNotFound {
			t.Errorf("unknown socket tag: %v, want not found", err)
		}
		hostEnd.Close()

		// A host that leaves while waiting ends the wait.
		hostEnd, agentEnd = net.Pipe()
		hostEnd.Close()
		if err := a.socketConnect(ctx, &stream{Conn: agentEnd, r: bufio.NewReader(agentEnd)}, "sock0"); err == nil {
			t.Error("a closed host stream: no error")
		}

		hostEnd, agentEnd = net.Pipe()
		served := make(chan error, 1)
		go func() { served <- a.socketConnect(ctx, &stream{Conn: agentEnd, r: bufio.NewReader(agentEnd)}, "sock0") }()
		ctr, err := net.Dial("unix", target)
		if err != nil {
			t.Error(err)
			return
		}
		defer ctr.Close()
		host := bufio.NewReader(hostEnd)
		if line, err := host.ReadString('\n'); err != nil || line != "{}\n" {
			t.Errorf("answer %q, %v; want an empty Response", line, err)
			return
		}
		go func() { _, _ = hostEnd.Write([]byte("GET /_ping\n")) }()
		req := make([]byte, len("GET /_ping\n"))
		if _, err := io.ReadFull(ctr, req); err != nil || string(req) != "GET /_ping\n" {
			t.Errorf("the container read %q, %v", req, err)
		}
		if _, err := ctr.Write([]byte("OK")); err != nil {
			t.Error(err)
		}
		ctr.(*net.UnixConn).CloseWrite()
		if got, err := io.ReadAll(host); err != nil || string(got) != "OK" {
			t.Errorf("the host read %q, %v; want OK then the end", got, err)
		}
		hostEnd.Close()
		if rest, err := io.ReadAll(ctr); err != nil || len(rest) != 0 {
			t.Errorf("after the host's end the container read %q, %v", rest, err)
		}
		if err := <-served; err != nil {
			t.Errorf("socketConnect: %v", err)
		}
	})
}
