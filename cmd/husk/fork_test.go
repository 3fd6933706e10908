package main

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func TestFork(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "h.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var got string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.String()
		if r.URL.Query().Get("count") == "0" {
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"message":"fork count 0 out of range 1-64"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`[{"Id":"a","Name":"one"},{"Id":"b","Name":"two"}]`))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	names, err := fork(context.Background(), "unix://"+sock, "web", "cp1", "/ck", 2)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "one,two" {
		t.Errorf("names %q", names)
	}
	if want := "POST /husk/containers/web/fork?checkpoint=cp1&checkpoint-dir=%2Fck&count=2"; got != want {
		t.Errorf("request %q, want %q", got, want)
	}
	if _, err := fork(context.Background(), "unix://"+sock, "web", "cp1", "", 0); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("refused fork: %v, want huskd's message", err)
	}
	if _, err := fork(context.Background(), "tcp://x:1", "web", "cp1", "", 1); err == nil {
		t.Error("tcp host accepted")
	}
}

func TestForkArgsFirst(t *testing.T) {
	for in, want := range map[string]string{
		"husk fork web --checkpoint cp -n 3": "husk fork --checkpoint cp -n 3 web",
		"husk fork --checkpoint cp web":      "husk fork --checkpoint cp web",
		"husk doctor --kernel k":             "husk doctor --kernel k",
		"husk fork web":                      "husk fork web",
	} {
		if got := strings.Join(forkArgsFirst(strings.Fields(in)), " "); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}
