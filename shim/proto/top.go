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
}
