//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// clockTicks is USER_HZ, the unit of /proc/*/stat times; Linux fixes it at
// 100 on every architecture it exposes to user space.
const clockTicks = 100

// top lists the processes in p's PID namespace from /proc: the image may
// have no ps, and the guest's /proc is the one source of truth anyway.
func (a *Agent) top(p *process) ([]proto.ProcessInfo, error) {
	select {
	case <-p.exited:
		return nil, &agentError{proto.KindInvalid, fmt.Sprintf("process %s is not running", p.id)}
	default:
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.pid))
	if err != nil {
		return nil, fmt.Errorf("top: pid namespace of %s: %w", p.id, err)
	}
	boot, err := bootTime()
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	root := a.root
	a.mu.Unlock()
	names, groups := map[int]string{}, map[int]string{}
	if f, err := os.Open(filepath.Join(root, "etc/passwd")); err == nil {
		entries, _ := parsePasswd(f)
		f.Close()
		for _, e := range entries {
			if _, dup := names[e.uid]; !dup {
				names[e.uid] = e.name
			}
		}
	}
	if f, err := os.Open(filepath.Join(root, "etc/group")); err == nil {
		entries, _ := parseGroup(f)
		f.Close()
		for _, e := range entries {
			if _, dup := groups[e.gid]; !dup {
				groups[e.gid] = e.name
			}
		}
	}
	memTotalKiB := memTotal()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("top: %w", err)
	}
	var out []proto.ProcessInfo
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if other, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || other != ns {
			continue
		}
		// A process that ends while being read is simply left out.
		if info, err := readProcess(pid, boot); err == nil {
			info.User, info.Group = names[info.UID], groups[info.GID]
			if memTotalKiB > 0 {
				info.MemPercent = float64(info.RSSKiB) * 100 / float64(memTotalKiB)
			}
			out = append(out, info)
		}
	}
	return out, nil
}

// smapsRSS is pid's resident set in KiB, from its page tables. The
// guest's 6.1 kernel keeps each task's RSS counts to itself until it has
// taken 64 page faults (SPLIT_RSS_COUNTING, gone in 6.2), so stat's rss of
// a process that mostly sleeps reads a few KiB; runc's host shows ps the
// true figure.
func smapsRSS(pid int) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Rss:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

func bootTime() (time.Time, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("top: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				break
			}
			return time.Unix(secs, 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("top: no btime in /proc/stat")
}

func readProcess(pid int, boot time.Time) (proto.ProcessInfo, error) {
	info := proto.ProcessInfo{PID: pid}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return info, err
	}
	// comm is in parentheses and may itself hold spaces and parentheses.
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return info, fmt.Errorf("malformed stat of %d", pid)
	}
	comm := string(stat[open+1 : end])
	f := strings.Fields(string(stat[end+1:]))
	// f[0] is field 3 (state) of proc(5).
	if len(f) < 22 {
		return info, fmt.Errorf("short stat of %d", pid)
	}
	num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	info.Comm, info.State = comm, f[0]
	info.PPID, info.PGID, info.SID, info.TPGID = int(num(1)), int(num(2)), int(num(3)), int(num(5))
	info.Nice, info.Threads = int(num(16)), int(num(17))
	info.VSZKiB, info.RSSKiB = num(20)/1024, num(21)*int64(os.Getpagesize())/1024
	if rss, ok := smapsRSS(pid); ok {
		info.RSSKiB = rss
	}
	info.TTY = ttyName(num(4))
	info.CPUTime = time.Duration(num(11)+num(12)) * time.Second / clockTicks
	info.StartTime = boot.Add(time.Duration(num(19)) * time.Second / clockTicks)
	if status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(status)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				if fs := strings.Fields(v); len(fs) > 1 {
					info.UID, _ = strconv.Atoi(fs[1]) // effective, as ps shows
				}
			}
			if v, ok := strings.CutPrefix(sc.Text(), "Gid:"); ok {
				if fs := strings.Fields(v); len(fs) > 1 {
					info.GID, _ = strconv.Atoi(fs[1])
				}
				break
			}
		}
		status.Close()
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	info.Cmd = strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
	if info.Cmd == "" {
		info.Cmd = "[" + comm + "]"
	}
	return info, nil
}

// ttyName names a tty_nr as ps does for the terminals a container can have.
func ttyName(nr int64) string {
	major, minor := (nr>>8)&0xfff, (nr&0xff)|((nr>>12)&0xfff00)
	switch {
	case nr == 0:
		return ""
	case major >= 136 && major <= 143:
		return "pts/" + strconv.FormatInt((major-136)*256+minor, 10)
	case major == 4:
		return "tty" + strconv.FormatInt(minor, 10)
	case major == 5 && minor == 1:
		return "console"
	}
	return "?"
}

// memTotal is the guest's memory in KiB, 0 if unknown.
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
