package logs

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func collect(t *testing.T, ch <-chan Entry) []string {
	t.Helper()
	var out []string
	for e := range ch {
		out = append(out, e.Stream+":"+string(e.Data))
	}
	return out
}

func TestReadSelectsStreamsAndTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c-json.log")
	l, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	// Lines split across writes are joined; a final partial line is kept.
	for _, w := range []struct{ stream, data string }{
		{"stdout", "one\ntw"}, {"stderr", "err1\n"}, {"stdout", "o\nthree\n"}, {"stdout", "partial"},
	} {
		if _, err := l.Writer(w.stream).Write([]byte(w.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopen as a restarted daemon would.
	l, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts ReadOptions
		want string
	}{
		{"all", ReadOptions{Stdout: true, Stderr: true, Tail: -1}, "stdout:one\n|stderr:err1\n|stdout:two\n|stdout:three\n|stdout:partial"},
		{"stdout only", ReadOptions{Stdout: true, Tail: -1}, "stdout:one\n|stdout:two\n|stdout:three\n|stdout:partial"},
		{"stderr only", ReadOptions{Stderr: true, Tail: -1}, "stderr:err1\n"},
		{"tail 2", ReadOptions{Stdout: true, Stderr: true, Tail: 2}, "stdout:three\n|stdout:partial"},
		{"tail 0", ReadOptions{Stdout: true, Stderr: true, Tail: 0}, ""},
		{"since", ReadOptions{Stdout: true, Stderr: true, Tail: -1, Since: time.Date(2026, 1, 1, 0, 0, 4, 0, time.UTC)}, "stdout:three\n|stdout:partial"},
		{"until", ReadOptions{Stdout: true, Stderr: true, Tail: -1, Until: time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)}, "stdout:one\n|stderr:err1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := l.Read(context.Background(), tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(collect(t, ch), "|"); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFollowSeesEveryEntryOnceAndEndsOnEndRun(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "c-json.log"))
	if err != nil {
		t.Fatal(err)
	}
	w := l.Writer("stdout")
	w.Write([]byte("before\n"))
	ch, err := l.Read(context.Background(), ReadOptions{Stdout: true, Tail: -1, Follow: true, Running: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("after\n"))
	w.Write([]byte("last"))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// The flush writes the partial line; the follow goes on until the
	// run's end is recorded.
	select {
	case e, ok := <-ch:
		for ok && string(e.Data) != "last" {
			e, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the flushed partial line did not reach the follower")
	}
	select {
	case e, ok := <-ch:
		t.Fatalf("the follow went on past the flush: %v %q", ok, e.Data)
	case <-time.After(50 * time.Millisecond):
	}
	l.EndRun()
	if rest := collect(t, ch); len(rest) != 0 {
		t.Fatalf("after EndRun: %q", rest)
	}
	// A follow that starts after the run ended ends with what is stored,
	// even if its caller still thought the container running; the next
	// run's BeginRun lets follows wait again.
	late, err := l.Read(context.Background(), ReadOptions{Stdout: true, Tail: 1, Follow: true, Running: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(collect(t, late), "|"); got != "stdout:last" {
		t.Fatalf("late follow got %q", got)
	}
	l.BeginRun()
	again, err := l.Read(context.Background(), ReadOptions{Stdout: true, Tail: 0, Follow: true, Running: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("next run\n"))
	l.EndRun()
	if got := strings.Join(collect(t, again), "|"); got != "stdout:next run\n" {
		t.Fatalf("next run's follow got %q", got)
	}
}

func TestFollowOfStoppedContainerEnds(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "c-json.log"))
	if err != nil {
		t.Fatal(err)
	}
	l.Writer("stderr").Write([]byte("x\n"))
	ch, err := l.Read(context.Background(), ReadOptions{Stderr: true, Tail: -1, Follow: true, Running: false})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(collect(t, ch), "|"); got != "stderr:x\n" {
		t.Fatalf("got %q", got)
	}
}
