package proto

import "time"

// OpTop lists the processes in the PID namespace of the process ID names
// (docker top): one Response with Processes set.
const OpTop Op = "top"

// ProcessInfo is one process as the guest sees it.
type ProcessInfo struct {
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	UID  int `json:"uid"`
	// User is the name of UID in the container's /etc/passwd, or "".
	User      string        `json:"user,omitempty"`
	StartTime time.Time     `json:"startTime"`
	CPUTime   time.Duration `json:"cpuTime"`
	// TTY is the controlling terminal ("pts/0"), "" for none.
	TTY string `json:"tty,omitempty"`
	// Cmd is the command line, or "[comm]" for a process without one.
	Cmd string `json:"cmd"`
	// What ps's other columns show (docker top's ps options). An agent
	// older than them leaves them zero.
	GID   int    `json:"gid,omitempty"`
	Group string `json:"group,omitempty"` // GID's name in /etc/group, or ""
	Comm  string `json:"comm,omitempty"`
	// State is proc(5)'s one-letter state (R, S, D, Z, T, ...).
	State   string `json:"state,omitempty"`
	PGID    int    `json:"pgid,omitempty"`
	SID     int    `json:"sid,omitempty"`
	TPGID   int    `json:"tpgid,omitempty"` // the terminal's foreground group
	Nice    int    `json:"nice,omitempty"`
	Threads int    `json:"threads,omitempty"`
	VSZKiB  int64  `json:"vszKiB,omitempty"`
	RSSKiB  int64  `json:"rssKiB,omitempty"`
	// MemPercent is RSS over the guest's memory, in percent.
	MemPercent float64 `json:"memPercent,omitempty"`
}
