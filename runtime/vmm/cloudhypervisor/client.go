package cloudhypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/containerd/errdefs"
)

// apiRoot is where cloud-hypervisor serves its API (servers[0].url).
const apiRoot = "http://localhost/api/v1/"

// client speaks HTTP/1.1 to one cloud-hypervisor API socket.
type client struct {
	http *http.Client
}

// newClient dials socketPath for every request: cloud-hypervisor's
// micro_http server handles one request at a time per connection, and a
// fresh connection cannot be half-used by an earlier, cancelled request.
func newClient(socketPath func() string) *client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath())
		},
		DisableKeepAlives: true,
	}
	return &client{http: &http.Client{Transport: tr}}
}

// APIError is a request cloud-hypervisor refused. It unwraps to the
// errdefs class that matches the status, so callers can test it with
// errdefs.IsNotFound and friends.
type APIError struct {
	// Endpoint is the API path, e.g. "vm.pause".
	Endpoint string
	Status   int
	// Messages is cloud-hypervisor's error chain, outermost first: its
	// error bodies are a JSON array of strings (older releases sent
	// plain text, which becomes one message).
	Messages []string
}

func (e *APIError) Error() string {
	msg := strings.Join(e.Messages, ": ")
	if msg == "" {
		msg = "no details"
	}
	return fmt.Sprintf("cloud-hypervisor %s: %d %s: %s", e.Endpoint, e.Status, http.StatusText(e.Status), msg)
}

// Unwrap gives the errdefs class. cloud-hypervisor answers 404 when there
// is no VM, 405 when the VM is in the wrong state for the action, 429
// while a CPU removal is pending, 400 for a body it cannot parse, and 500
// for everything else, where an invalid state transition is still told
// apart by its message.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusBadRequest:
		return errdefs.ErrInvalidArgument
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusMethodNotAllowed:
		return errdefs.ErrFailedPrecondition
	case http.StatusTooManyRequests:
		return errdefs.ErrUnavailable
	}
	for _, m := range e.Messages {
		l := strings.ToLower(m)
		if strings.Contains(l, "invalid state transition") || strings.Contains(l, "invalidstatetransition") {
			return errdefs.ErrFailedPrecondition
		}
	}
	return errdefs.ErrInternal
}

// parseErrorBody reads cloud-hypervisor's error body: a JSON array of
// messages, else plain text.
func parseErrorBody(b []byte) []string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	var msgs []string
	if json.Unmarshal(b, &msgs) == nil {
		return msgs
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		return []string{one}
	}
	return []string{string(b)}
}

// do sends one request. A nil in means no body at all: cloud-hypervisor
// refuses a body on actions that take none. out, when not nil, receives
// the JSON answer.
func (c *client) do(ctx context.Context, method, endpoint string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("cloud-hypervisor %s: encode request: %w", endpoint, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, apiRoot+endpoint, body)
	if err != nil {
		return fmt.Errorf("cloud-hypervisor %s: %w", endpoint, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cloud-hypervisor %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("cloud-hypervisor %s: read answer: %w", endpoint, err)
	}
	if resp.StatusCode/100 != 2 {
		return &APIError{Endpoint: endpoint, Status: resp.StatusCode, Messages: parseErrorBody(b)}
	}
	if out == nil {
		return nil
	}
	if resp.StatusCode == http.StatusNoContent || len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("cloud-hypervisor %s: empty answer: %w", endpoint, errdefs.ErrInternal)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("cloud-hypervisor %s: decode answer: %w", endpoint, err)
	}
	return nil
}

func (c *client) put(ctx context.Context, endpoint string, in any) error {
	return c.do(ctx, http.MethodPut, endpoint, in, nil)
}

func (c *client) get(ctx context.Context, endpoint string, out any) error {
	return c.do(ctx, http.MethodGet, endpoint, nil, out)
}

func (c *client) close() { c.http.CloseIdleConnections() }
