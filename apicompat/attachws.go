package apicompat

import (
	"context"
	"io"
	"net/http"

	"golang.org/x/net/websocket"
)

// attachContainerWS is GET /containers/{name}/attach/ws: an attach over a
// WebSocket, for clients that cannot hijack a connection (browsers). As
// in dockerd, the streams are not multiplexed: every frame is raw output
// (binary frames from API 1.28, text before), and frames from the client
// are the container's input.
func (s *server) attachContainerWS(ctx context.Context, w http.ResponseWriter, r *http.Request, vars map[string]string) error {
	name := vars["name"]
	_, opts, err := s.attachRequest(ctx, r, name)
	if err != nil {
		return err
	}
	binary := !versionLess(apiVersion(ctx), "1.28")
	// Before API 1.42 dockerd attached every stream whatever the query
	// asked.
	all := versionLess(apiVersion(ctx), "1.42")
	serve := func(conn *websocket.Conn) {
		if binary {
			conn.PayloadType = websocket.BinaryFrame
		}
		// A WebSocket has no half-close: once the client's side ends
		// (a close frame, or the connection gone) it is not reading
		// either, so the attach ends.
		ctx, cancel := context.WithCancel(conn.Request().Context())
		defer cancel()
		in := &endingReader{r: conn, onEnd: cancel}
		if all || boolValue(r, "stdin") {
			opts.Stdin = in
		} else {
			go io.Copy(io.Discard, in)
		}
		if all || boolValue(r, "stdout") {
			opts.Stdout = conn
		}
		if all || boolValue(r, "stderr") {
			opts.Stderr = conn
		}
		if err := s.cfg.Containers.Attach(ctx, name, opts); err != nil && ctx.Err() == nil {
			s.log.Error("websocket attach failed", "container", name, "error", err)
		}
	}
	// No Handshake: like dockerd, any Origin may attach; the socket's
	// permissions are the access control.
	websocket.Server{Handler: serve}.ServeHTTP(w, r)
	return nil
}

// endingReader calls onEnd when a read fails, EOF included.
type endingReader struct {
	r     io.Reader
	onEnd func()
}

func (e *endingReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.onEnd()
	}
	return n, err
}
