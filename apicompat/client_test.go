package apicompat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// unixServer serves the API on a unix socket in a temporary directory, as
// huskd does, and returns the socket's path.
func unixServer(t *testing.T) (string, *fakeContainers, *fakeImages) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctrs, images := newFakeContainers(), &fakeImages{}
	srv := &http.Server{Handler: New(Config{Images: images, Containers: ctrs, System: fakeSystem{}})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return sock, ctrs, images
}

func newClient(t *testing.T, sock string, opts ...client.Opt) *client.Client {
	t.Helper()
	c, err := client.New(append([]client.Opt{client.WithHost("unix://" + sock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testContext bounds a test that would otherwise hang on a server bug; no
// assertion depends on the time it takes.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestRealClient(t *testing.T) {
	sock, ctrs, _ := unixServer(t)
	ctx := testContext(t)
	c := newClient(t, sock, client.WithAPIVersionNegotiation())

	ping, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		t.Fatal(err)
	}
	if ping.APIVersion != "1.50" || ping.OSType != "linux" || !ping.Experimental || ping.BuilderVersion != "1" {
		t.Errorf("ping = %+v", ping)
	}
	if v := c.ClientVersion(); v != "1.50" {
		t.Errorf("negotiated version %q, want 1.50", v)
	}

	created, err := c.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:   "echo",
		Config: &container.Config{Image: "alpine", OpenStdin: true, StdinOnce: true, AttachStdin: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.ID) != 64 || len(created.Warnings) != 0 {
		t.Errorf("create = %+v", created)
	}

	// As docker run does: wait (next-exit) and attach before start.
	wait := c.ContainerWait(ctx, created.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	att, err := c.ContainerAttach(ctx, "echo", client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	if mt, ok := att.MediaType(); !ok || mt != "application/vnd.docker.multiplexed-stream" {
		t.Errorf("attach media type %q %t", mt, ok)
	}
	if _, err := c.ContainerStart(ctx, "echo", client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(att.Conn, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if err := att.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		t.Fatalf("demux: %v", err)
	}
	if stdout.String() != "hello stdout\nstdin: ping\n" || stderr.String() != "hello stderr\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
	select {
	case res := <-wait.Result:
		if res.StatusCode != 3 || res.Error != nil {
			t.Errorf("wait = %+v", res)
		}
	case err := <-wait.Error:
		t.Fatalf("wait: %v", err)
	}
	ctrs.mu.Lock()
	gotStdin := ctrs.procs[created.ID].stdin
	ctrs.mu.Unlock()
	if gotStdin != "ping\n" {
		t.Errorf("backend stdin %q", gotStdin)
	}

	ctrs.mu.Lock()
	ctrs.logs = []LogEntry{{Stream: "stdout", Time: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), Data: []byte("logged\n")}}
	ctrs.mu.Unlock()
	logs, err := c.ContainerLogs(ctx, "echo", client.ContainerLogsOptions{ShowStdout: true, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if _, err := stdcopy.StdCopy(&stdout, io.Discard, logs); err != nil {
		t.Fatal(err)
	}
	logs.Close()
	if stdout.String() != "2025-01-02T03:04:05.000000006Z logged\n" {
		t.Errorf("logs %q", stdout.String())
	}

	_, err = c.ContainerInspect(ctx, "x", client.ContainerInspectOptions{})
	if !cerrdefs.IsNotFound(err) || !strings.Contains(err.Error(), "No such container: x") {
		t.Errorf("inspect missing: %v", err)
	}
	_, err = c.ContainerCreate(ctx, client.ContainerCreateOptions{Name: "bad name", Config: &container.Config{Image: "localhost:5000/a/b:1"}})
	if !cerrdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "Invalid container name (bad name)") {
		t.Errorf("create bad name: %v", err)
	}

	list, err := c.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil || len(list.Items) != 1 || list.Items[0].ID != "c1" {
		t.Errorf("list = %+v, %v", list, err)
	}
	if _, err := c.ContainerRemove(ctx, "echo", client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Errorf("remove: %v", err)
	}
}

func TestRealClientImagePull(t *testing.T) {
	sock, _, images := unixServer(t)
	ctx := testContext(t)
	c := newClient(t, sock, client.WithAPIVersion("1.50"))

	resp, err := c.ImagePull(ctx, "localhost:5000/a/b:1", client.ImagePullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, msg.Status)
	}
	resp.Close()
	want := []string{"Pulling from library/alpine", "Downloading", "Status: Downloaded newer image for localhost:5000/a/b:1"}
	if strings.Join(statuses, "|") != strings.Join(want, "|") {
		t.Errorf("statuses %q, want %q", statuses, want)
	}
	if images.pulled[0] != "localhost:5000/a/b:1" {
		t.Errorf("pulled %q", images.pulled)
	}

	_, err = c.ImagePull(ctx, "denied", client.ImagePullOptions{})
	if !cerrdefs.IsNotFound(err) || !strings.Contains(err.Error(), "pull access denied") {
		t.Errorf("denied pull: %v", err)
	}

	resp, err = c.ImagePull(ctx, "broken", client.ImagePullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = resp.Wait(ctx)
	resp.Close()
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Errorf("in-stream error: %v", err)
	}
}

// rawRequest sends a request on a fresh unix connection and returns the
// connection with a reader positioned after the response head.
func rawRequest(t *testing.T, sock, req string) (*net.UnixConn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn.(*net.UnixConn), br, resp
}

func TestOldVersionRejected(t *testing.T) {
	sock, _, _ := unixServer(t)
	_, br, resp := rawRequest(t, sock, "GET /v1.23/version HTTP/1.1\r\nHost: d\r\n\r\n")
	body := make([]byte, resp.ContentLength)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || !strings.HasPrefix(string(body), "client version 1.23 is too old.") {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
}

func TestAttachRaw(t *testing.T) {
	tests := []struct {
		name        string
		tty         bool
		upgrade     bool
		status      int
		contentType string
		wantOut     string // what the client reads after the head
	}{
		{name: "upgrade multiplexed", upgrade: true, status: 101, contentType: "application/vnd.docker.multiplexed-stream"},
		{name: "upgrade tty", tty: true, upgrade: true, status: 101, contentType: "application/vnd.docker.raw-stream",
			wantOut: "hello stdout\nhello stderr\nstdin: data with\nnewlines\n"},
		{name: "no upgrade", status: 200, contentType: "application/vnd.docker.raw-stream"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sock, ctrs, _ := unixServer(t)
			ctx := testContext(t)
			if _, err := ctrs.Create(ctx, CreateRequest{Name: "c", Config: &container.Config{Tty: tc.tty, OpenStdin: true}}); err != nil {
				t.Fatal(err)
			}
			head := "POST /v1.50/containers/c/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\nHost: d\r\n"
			if tc.upgrade {
				head += "Connection: Upgrade\r\nUpgrade: tcp\r\n"
			}
			// Stdin sent right behind the request head lands in the
			// server's read buffer before the hijack: it must not be lost.
			conn, br, resp := rawRequest(t, sock, head+"\r\ndata with\n")
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType {
				t.Fatalf("answer %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if tc.upgrade && (resp.Header.Get("Connection") != "Upgrade" || resp.Header.Get("Upgrade") != "tcp") {
				t.Errorf("upgrade headers %v", resp.Header)
			}
			if err := ctrs.Start(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			if _, err := io.WriteString(conn, "newlines\n"); err != nil {
				t.Fatal(err)
			}
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			// Output continues after the half-close, and the server closes
			// once the process has ended.
			out, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("read after half-close: %v", err)
			}
			if tc.tty {
				if string(out) != tc.wantOut {
					t.Errorf("raw output %q, want %q", out, tc.wantOut)
				}
				return
			}
			var stdout, stderr bytes.Buffer
			if _, err := stdcopy.StdCopy(&stdout, &stderr, bytes.NewReader(out)); err != nil {
				t.Fatal(err)
			}
			if stdout.String() != "hello stdout\nstdin: data with\nnewlines\n" || stderr.String() != "hello stderr\n" {
				t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
			}
		})
	}
}

func TestAttachWithoutStdinDoesNotWaitForClient(t *testing.T) {
	sock, ctrs, _ := unixServer(t)
	ctx := testContext(t)
	if _, err := ctrs.Create(ctx, CreateRequest{Name: "c", Config: &container.Config{}}); err != nil {
		t.Fatal(err)
	}
	_, br, resp := rawRequest(t, sock, "POST /containers/c/attach?stream=1&stdout=1 HTTP/1.1\r\nHost: d\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	if resp.StatusCode != 101 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := ctrs.Start(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	// The client never half-closes; the server half-closes after the
	// output, so the read below ends with EOF.
	var stdout bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, io.Discard, br); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if stdout.String() != "hello stdout\n" {
		t.Errorf("stdout %q", stdout.String())
	}
}

func TestAttachEndsWhenClientHangsUp(t *testing.T) {
	sock, ctrs, _ := unixServer(t)
	ctx := testContext(t)
	if _, err := ctrs.Create(ctx, CreateRequest{Name: "quiet", Config: &container.Config{Cmd: []string{"silent"}}}); err != nil {
		t.Fatal(err)
	}
	if err := ctrs.Start(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	for _, halfClose := range []bool{true, false} {
		conn, _, resp := rawRequest(t, sock, "POST /containers/quiet/attach?stream=1&stdin=1&stdout=1 HTTP/1.1\r\nHost: d\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
		if resp.StatusCode != 101 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if halfClose {
			// Ending stdin is not hanging up: the attach must go on.
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ctrs.silentStdinEnded:
			case err := <-ctrs.silentEnded:
				t.Fatalf("attach ended on half-close: %v", err)
			}
			select {
			case err := <-ctrs.silentEnded:
				t.Fatalf("attach ended on half-close: %v", err)
			default:
			}
		}
		conn.Close()
		select {
		case err := <-ctrs.silentEnded:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("attach ended with %v, want context.Canceled", err)
			}
		case <-ctx.Done():
			t.Fatal("attach did not end after the client hung up")
		}
	}
}
