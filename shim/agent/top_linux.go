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
	names := map[int]string{}
	if f, err := os.Open(filepath.Join(root, "etc/passwd")); err == nil {
		entries, _ := parsePasswd(f)
		f.Close()
		for _, e := range entries {
			if _, dup := names[e.uid]; !dup {
				names[e.uid] = e.name
			}
		}
	}
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
			info.User = names[info.UID]
			out = append(out, info)
		}
	}
	return out, nil
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
	if len(f) < 20 {
		return info, fmt.Errorf("short stat of %d", pid)
	}
	num := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	info.PPID = int(num(1))
	info.TTY = ttyName(num(4))
	info.CPUTime = time.Duration(num(11)+num(12)) * time.Second / clockTicks
	info.StartTime = boot.Add(time.Duration(num(19)) * time.Second / clockTicks)
	if status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		sc := bufio.NewScanner(status)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				if fs := strings.Fields(v); len(fs) > 0 {
					info.UID, _ = strconv.Atoi(fs[0])
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
