package harness

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Failures reads `go test -v` output as it is written and keeps what each
// failed top-level test said besides the commands it ran and the daemon
// log it printed. A CI log of a long run is often shown only around its
// first failure and at its end, where the daemon log's tail hides the
// assertion that failed; Summary says it again for the end of the run.
type Failures struct {
	mu      sync.Mutex
	partial []byte
	test    string
	said    []string
	inEntry bool // the current log entry is kept: its next lines go with it
	extra   int  // lines kept after the current entry's first
	failed  []failedTest
}

type failedTest struct {
	name string
	said []string
}

const (
	keptEntries  = 12
	keptExtra    = 3
	keptLineSize = 300
)

// logEntry is the first line of a t.Log/t.Error entry: "    file.go:12: msg".
var logEntry = regexp.MustCompile(`^\s+([\w./-]+\.go:\d+): (.*)$`)

// notSaid are entries that record what a test did, not what it found.
var notSaid = regexp.MustCompile(`^(\$ |last lines of the |(GET|HEAD|POST|PUT|DELETE) /)`)

func (f *Failures) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partial = append(f.partial, p...)
	for {
		i := bytes.IndexByte(f.partial, '\n')
		if i < 0 {
			break
		}
		f.line(string(f.partial[:i]))
		f.partial = f.partial[i+1:]
	}
	return len(p), nil
}

func (f *Failures) line(s string) {
	switch {
	case strings.HasPrefix(s, "=== RUN   "):
		if name := strings.TrimPrefix(s, "=== RUN   "); !strings.Contains(name, "/") {
			f.test, f.said, f.inEntry = name, nil, false
		}
		return
	case strings.HasPrefix(s, "--- FAIL: "+f.test+" "):
		f.failed = append(f.failed, failedTest{f.test, f.said})
		f.test, f.said, f.inEntry = "", nil, false
		return
	case strings.HasPrefix(strings.TrimSpace(s), "--- "), strings.HasPrefix(strings.TrimSpace(s), "=== "):
		// A subtest's end, or a top-level test's that passed.
		f.inEntry = false
		return
	}
	if f.test == "" {
		return
	}
	if m := logEntry.FindStringSubmatch(s); m != nil {
		f.inEntry = !notSaid.MatchString(m[2])
		f.extra = 0
		if f.inEntry {
			f.said = append(f.said, cut(m[1]+": "+m[2]))
			if len(f.said) > keptEntries {
				f.said = f.said[1:]
			}
		}
		return
	}
	if f.inEntry && f.extra < keptExtra && strings.TrimSpace(s) != "" {
		f.extra++
		f.said[len(f.said)-1] += "\n        " + cut(strings.TrimSpace(s))
	}
}

func cut(s string) string {
	if len(s) > keptLineSize {
		return s[:keptLineSize] + "…"
	}
	return s
}

// Summary is what the failed tests said, or "" if none failed.
func (f *Failures) Summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.failed) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "e2e: what the %d failed test(s) said, without their commands and daemon logs:\n", len(f.failed))
	for _, t := range f.failed {
		fmt.Fprintf(&b, "%s\n", t.name)
		if len(t.said) == 0 {
			b.WriteString("    (nothing besides its commands)\n")
		}
		for _, s := range t.said {
			fmt.Fprintf(&b, "    %s\n", s)
		}
	}
	return b.String()
}
