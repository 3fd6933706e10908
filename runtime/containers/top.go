package containers

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/husk-vm/husk/shim/proto"
)

// psColumn is one column of docker top: its header and how a process
// reads in it at now.
type psColumn struct {
	header string
	value  func(p proto.ProcessInfo, now time.Time) string
}

// dockerd runs the host's ps with docker top's ps options and keeps the
// rows of the container's processes. A guest has no ps to run, and the
// image may have none, so the daemon lays out what the agent reads from
// the guest's /proc in ps's columns: the formats of procps's ps that
// docker top is given in practice (-ef, -e, -f, -j, aux, ax, -o and o
// lists), each column as procps shows it. Selection options (-e, -A, a,
// x) change nothing: the container's processes are all listed, as under
// dockerd.

// psLayout is the columns docker top's ps options (psArgs) ask for, as
// procps's ps lays them out, or the error dockerd gives.
func psLayout(psArgs string) ([]psColumn, error) {
	if psArgs == "" {
		psArgs = "-ef"
	}
	var full, jobs, bsd, bsdUser bool
	var custom []string
	tokens := strings.Fields(psArgs)
	for i := 0; i < len(tokens); i++ {
		if long, ok := strings.CutPrefix(tokens[i], "--"); ok {
			name, _, _ := strings.Cut(long, "=")
			if !isProcpsLongOption(name) {
				return nil, psError("unknown gnu long option")
			}
			return nil, psError(fmt.Sprintf("unsupported option %q", tokens[i]))
		}
		flags, dash := strings.CutPrefix(tokens[i], "-")
		if flags == "" {
			return nil, psError("garbage option")
		}
	token:
		for j := 0; j < len(flags); j++ {
			switch c := flags[j]; {
			case c == 'o':
				// The rest of the token, or the next one, is a list.
				list := flags[j+1:]
				if list == "" {
					if i+1 == len(tokens) {
						return nil, psError("format specification must follow -o")
					}
					i++
					list = tokens[i]
				}
				custom = append(custom, list)
				break token
			case dash && strings.IndexByte("eAaHw", c) >= 0:
			case dash && c == 'f':
				full = true
			case dash && c == 'j':
				jobs = true
			case !dash && strings.IndexByte("axwe", c) >= 0:
				bsd = true
			case !dash && c == 'u':
				bsd, bsdUser = true, true
			default:
				return nil, psError(fmt.Sprintf("unsupported option %q", tokens[i]))
			}
		}
	}
	var names []string
	switch {
	case len(custom) > 0:
		for _, list := range custom {
			names = append(names, strings.Split(list, ",")...)
		}
	case bsdUser:
		names = []string{"user", "pid", "%cpu", "%mem", "vsz", "rss", "tname", "stat", "bsdstart", "bsdtime", "args"}
	case bsd:
		names = []string{"pid", "tname", "stat", "bsdtime", "args"}
	case full:
		// dockerd's default, -ef.
		names = []string{"user=UID", "pid", "ppid", "c", "stime", "tname", "time", "args=CMD"}
	case jobs:
		names = []string{"pid", "pgid", "sid", "tname", "time", "cmd=CMD"}
	default:
		names = []string{"pid", "tname", "time", "ucmd"}
	}
	cols := make([]psColumn, 0, len(names))
	for _, n := range names {
		if n == "" {
			return nil, psError("improper format list")
		}
		name, header, renamed := strings.Cut(n, "=")
		col, ok := psColumnNamed(name)
		if !ok {
			return nil, psError(fmt.Sprintf("unknown user-defined format specifier %q", name))
		}
		if renamed {
			col.header = header
		}
		cols = append(cols, col)
	}
	return cols, nil
}

// isProcpsLongOption says procps's ps knows the long option: one it
// knows is refused as husk's, any other as procps refuses it.
func isProcpsLongOption(name string) bool {
	switch name {
	case "Group", "User", "cols", "columns", "context", "cumulative", "deselect", "forest", "format",
		"group", "header", "headers", "heading", "headings", "help", "info", "lines", "no-header",
		"no-headers", "no-heading", "no-headings", "noheader", "noheaders", "noheading", "noheadings",
		"pid", "ppid", "quick-pid", "rows", "sid", "signames", "sort", "tty", "user", "version", "width":
		return true
	}
	return false
}

// psError is a refusal of ps options in procps's words, as dockerd
// passes them on.
func psError(msg string) error {
	return errdefs.ErrUnknown.WithMessage("ps: error: " + msg)
}

// psColumnNamed is the column procps's ps shows for a -o name.
func psColumnNamed(name string) (psColumn, bool) {
	header, ok := map[string]string{
		"pid": "PID", "ppid": "PPID", "pgid": "PGID", "pgrp": "PGRP", "sid": "SID", "sess": "SESS", "session": "SESS",
		"uid": "UID", "euid": "EUID", "user": "USER", "euser": "EUSER", "uname": "USER",
		"gid": "GID", "egid": "EGID", "group": "GROUP", "egroup": "EGROUP",
		"comm": "COMMAND", "ucomm": "COMMAND", "ucmd": "CMD", "args": "COMMAND", "command": "COMMAND", "cmd": "CMD",
		"tty": "TT", "tt": "TT", "tname": "TTY", "time": "TIME", "cputime": "TIME", "bsdtime": "TIME", "etime": "ELAPSED",
		"stat": "STAT", "s": "S", "state": "S", "nice": "NI", "ni": "NI", "nlwp": "NLWP", "thcount": "THCNT",
		"rss": "RSS", "rssize": "RSS", "rsz": "RSZ", "vsz": "VSZ", "vsize": "VSZ", "%mem": "%MEM", "pmem": "%MEM",
		"%cpu": "%CPU", "pcpu": "%CPU", "c": "C", "stime": "STIME", "start_time": "START", "start": "STARTED", "bsdstart": "START",
	}[name]
	if !ok {
		return psColumn{}, false
	}
	return psColumn{header, psValue(name)}, true
}

// psValue is how a process reads in the column of a -o name psColumnNamed
// knows.
func psValue(name string) func(p proto.ProcessInfo, now time.Time) string {
	itoa := strconv.Itoa
	orNumber := func(name string, id int) string {
		if name == "" {
			return itoa(id)
		}
		return name
	}
	switch name {
	case "pid":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.PID) }
	case "ppid":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.PPID) }
	case "pgid", "pgrp":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.PGID) }
	case "sid", "sess", "session":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.SID) }
	case "uid", "euid":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.UID) }
	case "user", "euser", "uname":
		return func(p proto.ProcessInfo, _ time.Time) string { return orNumber(p.User, p.UID) }
	case "gid", "egid":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.GID) }
	case "group", "egroup":
		return func(p proto.ProcessInfo, _ time.Time) string { return orNumber(p.Group, p.GID) }
	case "comm", "ucomm", "ucmd":
		return func(p proto.ProcessInfo, _ time.Time) string {
			if p.Comm == "" {
				return p.Cmd // an agent older than Comm
			}
			return p.Comm
		}
	case "args", "command", "cmd":
		return func(p proto.ProcessInfo, _ time.Time) string { return p.Cmd }
	case "tty", "tt", "tname":
		return func(p proto.ProcessInfo, _ time.Time) string {
			if p.TTY == "" {
				return "?"
			}
			return p.TTY
		}
	case "time", "cputime":
		return func(p proto.ProcessInfo, _ time.Time) string { return cpuTime(p.CPUTime) }
	case "bsdtime":
		return func(p proto.ProcessInfo, _ time.Time) string {
			s := int64(p.CPUTime / time.Second)
			return fmt.Sprintf("%d:%02d", s/60, s%60)
		}
	case "etime":
		return func(p proto.ProcessInfo, now time.Time) string { return elapsed(now.Sub(p.StartTime)) }
	case "stat":
		return func(p proto.ProcessInfo, _ time.Time) string { return bsdStat(p) }
	case "s", "state":
		return func(p proto.ProcessInfo, _ time.Time) string { return p.State }
	case "nice", "ni":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.Nice) }
	case "nlwp", "thcount":
		return func(p proto.ProcessInfo, _ time.Time) string { return itoa(p.Threads) }
	case "rss", "rssize", "rsz":
		return func(p proto.ProcessInfo, _ time.Time) string { return strconv.FormatInt(p.RSSKiB, 10) }
	case "vsz", "vsize":
		return func(p proto.ProcessInfo, _ time.Time) string { return strconv.FormatInt(p.VSZKiB, 10) }
	case "%mem", "pmem":
		return func(p proto.ProcessInfo, _ time.Time) string { return strconv.FormatFloat(p.MemPercent, 'f', 1, 64) }
	case "%cpu", "pcpu":
		return func(p proto.ProcessInfo, now time.Time) string {
			life := now.Sub(p.StartTime)
			if life <= 0 {
				return "0.0"
			}
			return strconv.FormatFloat(float64(p.CPUTime)*100/float64(life), 'f', 1, 64)
		}
	case "c":
		return func(p proto.ProcessInfo, now time.Time) string { return cpuPercent(p.CPUTime, now.Sub(p.StartTime)) }
	default: // stime, start_time, start, bsdstart
		return func(p proto.ProcessInfo, now time.Time) string { return startTime(p.StartTime, now) }
	}
}

// bsdStat is ps's STAT: the state and the flags BSD's ps adds to it.
func bsdStat(p proto.ProcessInfo) string {
	s := p.State
	switch {
	case p.Nice < 0:
		s += "<"
	case p.Nice > 0:
		s += "N"
	}
	if p.SID == p.PID && p.PID != 0 {
		s += "s"
	}
	if p.Threads > 1 {
		s += "l"
	}
	if p.TPGID == p.PGID && p.TPGID > 0 {
		s += "+"
	}
	return s
}

// elapsed is ps's ELAPSED: [[DD-]HH:]MM:SS.
func elapsed(d time.Duration) string {
	s := int64(d / time.Second)
	switch {
	case s >= 86400:
		return fmt.Sprintf("%d-%02d:%02d:%02d", s/86400, s/3600%24, s/60%60, s%60)
	case s >= 3600:
		return fmt.Sprintf("%02d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}
