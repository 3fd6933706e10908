package apicompat

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/moby/moby/api/types/container"
	"golang.org/x/net/websocket"
)

// dialAttachWS opens GET /containers/{name}/attach/ws over the daemon's
// unix socket.
func dialAttachWS(t *testing.T, sock, path string) (*websocket.Conn, error) {
	t.Helper()
	cfg, err := websocket.NewConfig("ws://d"+path, "http://d")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := websocket.NewClient(cfg, raw)
	if err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// TestAttachWS: the WebSocket attach carries raw output in binary frames
// (text ones before API 1.28), attaches every stream before API 1.42,
// refuses an unknown container before the upgrade, and ends the attach
// when the client goes.
func TestAttachWS(t *testing.T) {
	sock, ctrs, _ := unixServer(t)
	ctx := testContext(t)
	for _, name := range []string{"talker", "quiet"} {
		cmd := []string{"x"}
		if name == "quiet" {
			cmd = []string{"silent"}
		}
		if _, err := ctrs.Create(ctx, CreateRequest{Name: name, Config: &container.Config{Cmd: cmd}}); err != nil {
			t.Fatal(err)
		}
		if err := ctrs.Start(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// frameCodec receives a frame with its type, which websocket.Message
	// does not report.
	frameCodec := websocket.Codec{Unmarshal: func(data []byte, payload byte, v any) error {
		*v.(*wsFrame) = wsFrame{data: data, payload: payload}
		return nil
	}}
	for _, tc := range []struct {
		version, query string
		payload        byte
	}{
		{"/v1.50", "stream=1&stdout=1", websocket.BinaryFrame},
		// Before 1.42 every stream is attached, asked for or not.
		{"/v1.41", "stream=1", websocket.BinaryFrame},
		{"/v1.27", "stream=1&stdout=1", websocket.TextFrame},
	} {
		conn, err := dialAttachWS(t, sock, tc.version+"/containers/talker/attach/ws?"+tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var f wsFrame
		if err := frameCodec.Receive(conn, &f); err != nil {
			t.Fatal(err)
		}
		if string(f.data) != "hello stdout\n" || f.payload != tc.payload {
			t.Errorf("%s: first frame %q of type %d, want the raw output in type %d", tc.version, f.data, f.payload, tc.payload)
		}
		conn.Close()
	}
	if _, err := dialAttachWS(t, sock, "/v1.50/containers/nope/attach/ws?stream=1&stdout=1"); err == nil {
		t.Error("a WebSocket attach to an unknown container was upgraded")
	}
	conn, err := dialAttachWS(t, sock, "/v1.50/containers/quiet/attach/ws?stream=1&stdin=1&stdout=1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	select {
	case <-ctrs.silentStdinEnded:
	case <-ctx.Done():
		t.Fatal("the client's input never ended")
	}
	select {
	case err := <-ctrs.silentEnded:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("attach ended with %v, want context.Canceled", err)
		}
	case <-ctx.Done():
		t.Fatal("attach did not end after the client went")
	}
}

// wsFrame is one received frame and its type.
type wsFrame struct {
	data    []byte
	payload byte
}
