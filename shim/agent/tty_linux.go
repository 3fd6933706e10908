//go:build linux

package agent

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/husk-vm/husk/shim/proto"
)

// consoleFd is the descriptor over which a child started with a terminal
// hands the terminal's master side back to the agent.
const consoleFd = 5

// openTerminal opens a pseudo-terminal in the devpts instance under the
// caller's root (/dev/ptmx) of size and owned by uid, as runc arranges (the
// group stays tty).
func openTerminal(size *proto.WindowSize, uid int) (master, slave *os.File, _ error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal in the container's /dev/pts: %w", err)
	}
	fail := func(err error) (*os.File, *os.File, error) {
		m.Close()
		s.Close()
		return nil, nil, err
	}
	if size != nil && size.Rows > 0 && size.Cols > 0 {
		if err := pty.Setsize(m, &pty.Winsize{Rows: size.Rows, Cols: size.Cols}); err != nil {
			return fail(fmt.Errorf("set terminal size: %w", err))
		}
	}
	if err := s.Chown(uid, -1); err != nil {
		return fail(fmt.Errorf("chown terminal: %w", err))
	}
	return m, s, nil
}

// receiveTerminal reads the master side the C init sent over its console
// socket (cinitSendTerminal).
func receiveTerminal(sock *os.File) (*os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receive terminal: %w", err)
	}
	if n == 0 && oobn == 0 {
		return nil, errors.New("receive terminal: the child sent none")
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("receive terminal: bad control message: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("receive terminal: bad rights: %v", err)
	}
	return os.NewFile(uintptr(fds[0]), "pty-master"), nil
}

// dupFile returns a second descriptor for f, so that closing one (the end
// of a stdin attachment) leaves the other (the output pump) open.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// resize sets the size of p's terminal.
func (p *process) resize(size proto.WindowSize) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty == nil {
		return &agentError{proto.KindInvalid, fmt.Sprintf("process %s has no terminal", p.id)}
	}
	if err := pty.Setsize(p.tty, &pty.Winsize{Rows: size.Rows, Cols: size.Cols}); err != nil {
		return fmt.Errorf("resize terminal of %s: %w", p.id, err)
	}
	return nil
}

// noOutput is the stderr of a process with a terminal: everything goes to
// the terminal, so the stream ends at once.
type noOutput struct{}

func (noOutput) Read([]byte) (int, error) { return 0, io.EOF }
func (noOutput) Close() error             { return nil }

// terminalOutput is what the output pump reads a process's terminal
// through. It does not close the master side at the end, which stays
// usable for resizes until the process is forgotten.
//
// Linux answers a read of the master with EIO once the last slave
// descriptor closes, and that EIO can come before the last bytes written
// to the slave are readable: here (6.18 host kernel) about one terminal
// exec in a thousand lost its last line that way, and a second read made
// 25-150 µs later returned it. So the first EIO ends the output only after
// the process has exited (containerd's console waits for the exit too),
// and a read after that takes what arrived late.
type terminalOutput struct {
	f             *os.File
	exited        <-chan struct{}
	waitedForExit bool
}

func (t *terminalOutput) Read(b []byte) (int, error) {
	n, err := t.f.Read(b)
	if n == 0 && errors.Is(err, unix.EIO) && !t.waitedForExit {
		<-t.exited
		t.waitedForExit = true
		return t.f.Read(b)
	}
	return n, err
}

func (*terminalOutput) Close() error { return nil }
