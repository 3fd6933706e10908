package containers

import (
	"strings"
	"testing"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// TestPSLayout: docker top's ps options give procps's columns for them,
// and what ps would refuse is refused in its words.
func TestPSLayout(t *testing.T) {
	for _, tc := range []struct {
		args    string
		titles  string
		wantErr string
	}{
		{"", "UID PID PPID C STIME TTY TIME CMD", ""},
		{"-ef", "UID PID PPID C STIME TTY TIME CMD", ""},
		{"-f", "UID PID PPID C STIME TTY TIME CMD", ""},
		{"-e", "PID TTY TIME CMD", ""},
		{"-A", "PID TTY TIME CMD", ""},
		{"-ejH", "PID PGID SID TTY TIME CMD", ""},
		{"aux", "USER PID %CPU %MEM VSZ RSS TTY STAT START TIME COMMAND", ""},
		{"ax", "PID TTY STAT TIME COMMAND", ""},
		{"-o pid,comm", "PID COMMAND", ""},
		{"-eo pid -o args", "PID COMMAND", ""},
		{"-opid,tty,tname", "PID TT TTY", ""},
		{"axo pid,stat", "PID STAT", ""},
		{"-o pid=ID,args=", "ID ", ""},
		{"-o pid,foo", "", `ps: error: unknown user-defined format specifier "foo"`},
		{"-o", "", "ps: error: format specification must follow -o"},
		{"-o ,pid", "", "ps: error: improper format list"},
		{"--bogus", "", "ps: error: unknown gnu long option"},
		{"--forest", "", `ps: error: unsupported option "--forest"`},
		{"- x", "", "ps: error: garbage option"},
		{"-q 1", "", `ps: error: unsupported option "-q"`},
		{"axz", "", `ps: error: unsupported option "axz"`},
	} {
		cols, err := psLayout(tc.args)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		var titles []string
		for _, c := range cols {
			titles = append(titles, c.header)
		}
		if got := strings.Join(titles, " "); got != tc.titles {
			t.Errorf("%q: titles %q, want %q", tc.args, got, tc.titles)
		}
	}
}

// TestPSValues: the columns read a process as procps shows it.
func TestPSValues(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	p := proto.ProcessInfo{PID: 1, PPID: 0, UID: 1000, User: "app", GID: 50, Comm: "sleep", Cmd: "sleep 1000",
		State: "S", PGID: 1, SID: 1, TPGID: 1, Nice: 5, Threads: 2, RSSKiB: 1380, VSZKiB: 2268, MemPercent: 0.26,
		StartTime: now.Add(-(90*time.Minute + 5*time.Second)), CPUTime: 75 * time.Second}
	cols, err := psLayout("-o pid,user,group,comm,args,stat,nice,etime,time,bsdtime,rss,vsz,%mem,%cpu,tty,nlwp")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cols {
		got = append(got, c.value(p, now))
	}
	// STAT: sleeping, niced (N), a session leader (s), threaded (l), in
	// its terminal's foreground group (+).
	want := "1|app|50|sleep|sleep 1000|SNsl+|5|01:30:05|00:01:15|1:15|1380|2268|0.3|1.4|?|2"
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("values %q, want %q", g, want)
	}
}
