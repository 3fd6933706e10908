package e2e

import (
	"net"
	"strings"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestAttachWebSocket: GET /containers/{name}/attach/ws, the attach for
// clients that cannot hijack a connection: what the client sends is the
// container's input, and its output comes back raw in binary frames.
func TestAttachWebSocket(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	name := containerName(t, "")
	mustDocker(t, "run", "-d", "-i", "--name", name, img, "cat")
	sock, ok := strings.CutPrefix(suite.DockerHost, "unix://")
	if !ok {
		t.Fatalf("the suite's daemon is not on a unix socket: %s", suite.DockerHost)
	}
	cfg, err := websocket.NewConfig("ws://docker/v1.41/containers/"+name+"/attach/ws?stream=1&stdin=1&stdout=1&stderr=1", "http://docker")
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
		t.Fatalf("WebSocket attach: %v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("over the socket\n")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len("over the socket\n") {
		var frame []byte
		if err := websocket.Message.Receive(conn, &frame); err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, frame...)
	}
	if string(got) != "over the socket\n" {
		t.Errorf("cat echoed %q through the WebSocket", got)
	}
	conn.Close()
	mustDocker(t, "rm", "-f", name)
}
