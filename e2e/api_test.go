package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/harness"
)

// apiResult is one raw Engine API answer.
type apiResult struct {
	Status int
	Header http.Header
	Body   string
}

// api sends one request straight to the daemon's socket, for what the CLI
// does not show (exec inspect, status codes, headers).
func api(t *testing.T, method, path, body string) apiResult {
	t.Helper()
	sock := strings.TrimPrefix(suite.DockerHost, "unix://")
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://docker/v1.41"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := apiResult{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}
	t.Logf("%s %s %q\n  %d %q", method, path, clip(body), r.Status, clip(r.Body))
	return r
}

// apiJSON is api for a JSON answer, decoded into out.
func apiJSON(t *testing.T, method, path, body string, wantStatus int, out any) {
	t.Helper()
	r := api(t, method, path, body)
	if r.Status != wantStatus {
		t.Fatalf("%s %s: status %d (%s), want %d", method, path, r.Status, r.Body, wantStatus)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.Body), out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, path, r.Body, err)
		}
	}
}

// unknownFilter is the daemon's error for a filter it does not take:
// dockerd >= 23 words it in lower case, as huskd does; 20.10, the
// reference here, capitalised it.
func unknownFilter(name string) string {
	if suite.Kind == harness.Dockerd {
		return "Invalid filter '" + name + "'"
	}
	return "invalid filter '" + name + "'"
}

// errorMessage is dockerd's JSON error body for msg.
func errorMessage(msg string) string {
	b, _ := json.Marshal(map[string]string{"message": msg})
	return string(b) + "\n"
}
