package logs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeLines logs n numbered lines and returns the log's directory listing
// and what reading it back gives.
func writeLines(t *testing.T, opts Options, n int) (files map[string]int64, read []string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "c-json.log")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	l.SetOptions(opts)
	for i := 1; i <= n; i++ {
		if _, err := fmt.Fprintf(l.Writer("stdout"), "line-%03d-abcdefghijklmnopqrstuvwxyz\n", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Read as a restarted daemon would, with the container's options.
	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l.SetOptions(opts)
	ch, err := l.Read(context.Background(), ReadOptions{Stdout: true, Tail: -1})
	if err != nil {
		t.Fatal(err)
	}
	for e := range ch {
		read = append(read, string(e.Data))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files = map[string]int64{}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = info.Size()
	}
	return files, read
}

// recordLen is the size of one record written by writeLines.
const recordLen = len(`{"log":"line-001-abcdefghijklmnopqrstuvwxyz\n","stream":"stdout","time":"2026-01-01T00:00:01Z"}` + "\n")

func TestRotation(t *testing.T) {
	// 1024 bytes hold 10 records and the 11th starts a new file, as with
	// dockerd's json-file and --log-opt max-size=1k.
	perFile := (1024 + recordLen - 1) / recordLen
	// The live file holds what came after the last rotation.
	live := 100 % perFile
	tests := []struct {
		name      string
		opts      Options
		wantFiles []string
		wantLines int
	}{
		{"unlimited", Options{}, []string{"c-json.log"}, 100},
		{"three files", Options{MaxSize: 1024, MaxFiles: 3}, []string{"c-json.log", "c-json.log.1", "c-json.log.2"}, 2*perFile + live},
		{"compressed", Options{MaxSize: 1024, MaxFiles: 3, Compress: true}, []string{"c-json.log", "c-json.log.1.gz", "c-json.log.2.gz"}, 2*perFile + live},
		{"one file truncates", Options{MaxSize: 1024, MaxFiles: 1}, []string{"c-json.log"}, live},
		{"discard", Options{Discard: true}, []string{"c-json.log"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, read := writeLines(t, tt.opts, 100)
			if len(files) != len(tt.wantFiles) {
				t.Errorf("files %v, want %v", files, tt.wantFiles)
			}
			for _, f := range tt.wantFiles {
				if _, ok := files[f]; !ok {
					t.Errorf("no %s among %v", f, files)
				}
			}
			if tt.opts.MaxSize > 0 && !tt.opts.Compress {
				if got := files["c-json.log.1"]; tt.opts.MaxFiles > 1 && got != int64(perFile*recordLen) {
					t.Errorf("rotated file holds %d bytes, want %d", got, perFile*recordLen)
				}
			}
			if len(read) != tt.wantLines {
				t.Fatalf("read %d lines, want %d", len(read), tt.wantLines)
			}
			// What is kept is the newest output, in order.
			for i, line := range read {
				if want := fmt.Sprintf("line-%03d-abcdefghijklmnopqrstuvwxyz\n", 100-len(read)+1+i); line != want {
					t.Fatalf("line %d = %q, want %q", i, line, want)
				}
			}
		})
	}
}
