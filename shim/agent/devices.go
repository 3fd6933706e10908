package agent

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/husk-vm/husk/shim/proto"
)

// miscMajor is the character major of the misc devices (fuse, tun, ...),
// whose minors /proc/misc lists.
const miscMajor = 10

// checkGuestDevices refuses --device nodes the guest kernel has no driver
// for: the node would exist, and every open of it fail with ENXIO. A
// major counts when /proc/devices lists it among the character devices;
// a misc device when /proc/misc lists its minor.
func checkGuestDevices(proc string, devs []proto.Device) error {
	if len(devs) == 0 {
		return nil
	}
	majors, err := charMajors(filepath.Join(proc, "devices"))
	if err != nil {
		return err
	}
	var misc map[uint32]bool
	for _, d := range devs {
		ok := majors[d.Major]
		if ok && d.Major == miscMajor {
			if misc == nil {
				if misc, err = miscMinors(filepath.Join(proc, "misc")); err != nil {
					return err
				}
			}
			ok = misc[d.Minor]
		}
		if !ok {
			return fmt.Errorf("device %s: the guest kernel has no driver for character device %d:%d (a husk VM has none of the host's hardware)", d.Path, d.Major, d.Minor)
		}
	}
	return nil
}

// charMajors reads the "Character devices:" section of /proc/devices.
func charMajors(path string) (map[uint32]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the guest's devices: %w", err)
	}
	defer f.Close()
	out := map[uint32]bool{}
	inChar := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
		case strings.HasSuffix(line, "devices:"):
			inChar = false
		case inChar:
			num, _, _ := strings.Cut(line, " ")
			if n, err := strconv.ParseUint(num, 10, 32); err == nil {
				out[uint32(n)] = true
			}
		}
	}
	return out, sc.Err()
}

// miscMinors reads /proc/misc: "minor name" per line.
func miscMinors(path string) (map[uint32]bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the guest's misc devices: %w", err)
	}
	out := map[uint32]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		num, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if n, err := strconv.ParseUint(num, 10, 32); err == nil {
			out[uint32(n)] = true
		}
	}
	return out, nil
}
