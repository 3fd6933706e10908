package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/husk-vm/husk/shim/proto"
)

// execUser is who a container process runs as.
type execUser struct {
	UID, GID int
	Groups   []int // supplementary groups
	Home     string
}

type passwdEntry struct {
	name     string
	uid, gid int
	home     string
}

type groupEntry struct {
	name    string
	gid     int
	members []string
}

// userError is a user/group resolution failure (proto.KindUser).
type userError struct{ msg string }

func (e *userError) Error() string { return e.msg }

// resolveUser resolves Docker's --user value against the container's
// /etc/passwd and /etc/group contents (either may be nil when the file is
// missing), following the rules runc applies: a name must exist; a number
// need not; the user's supplementary groups are added only when no group was
// given explicitly. Messages are worded as Docker reports them.
//
// groupAdd is Docker's --group-add: more supplementary groups, by name or
// number, which dockerd resolves with runc's GetAdditionalGroups.
func resolveUser(spec string, groupAdd []string, passwd, group io.Reader) (execUser, error) {
	// Read once, and only when the user or groupAdd needs it.
	groups := sync.OnceValues(func() ([]groupEntry, error) { return parseGroup(group) })
	u, err := resolveUserGroups(spec, passwd, groups)
	if err != nil {
		return u, err
	}
	if !slices.Contains(u.Groups, u.GID) {
		// runc sets the primary group as a supplementary group too, after
		// the memberships: `id` lists it under groups=.
		u.Groups = append(u.Groups, u.GID)
	}
	added, err := additionalGroups(groupAdd, groups)
	if err != nil {
		return u, err
	}
	for _, gid := range added {
		if !slices.Contains(u.Groups, gid) {
			u.Groups = append(u.Groups, gid)
		}
	}
	return u, nil
}

// additionalGroups resolves --group-add values as runc does: a group's
// name or number as the group file has it, else any number in range.
func additionalGroups(names []string, groupFile func() ([]groupEntry, error)) ([]int, error) {
	if len(names) == 0 {
		return nil, nil
	}
	groups, err := groupFile()
	if err != nil {
		return nil, fmt.Errorf("read group: %w", err)
	}
	var gids []int
	for _, name := range names {
		i := slices.IndexFunc(groups, func(g groupEntry) bool { return g.name == name || strconv.Itoa(g.gid) == name })
		if i >= 0 {
			gids = append(gids, groups[i].gid)
			continue
		}
		gid, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			return nil, &userError{fmt.Sprintf("Unable to find group %s: no matching entries in group file", name)}
		}
		if gid < 0 || gid > 1<<31-1 {
			return nil, &userError{fmt.Sprintf("uids and gids must be in range 0-%d", 1<<31-1)}
		}
		gids = append(gids, int(gid))
	}
	return gids, nil
}

func resolveUserGroups(spec string, passwd io.Reader, groupFile func() ([]groupEntry, error)) (execUser, error) {
	u := execUser{Home: "/", Groups: []int{}}
	userArg, groupArg, _ := strings.Cut(spec, ":")
	uidArg, uidErr := strconv.Atoi(userArg)
	gidArg, gidErr := strconv.Atoi(groupArg)

	users, err := parsePasswd(passwd)
	if err != nil {
		return u, fmt.Errorf("read passwd: %w", err)
	}
	var matched *passwdEntry
	for i := range users {
		e := &users[i]
		ok := false
		switch {
		case userArg == "":
			ok = e.uid == 0
		case uidErr == nil:
			ok = e.uid == uidArg
		default:
			ok = e.name == userArg
		}
		if ok {
			matched = e
			break
		}
	}
	switch {
	case matched != nil:
		u.UID, u.GID, u.Home = matched.uid, matched.gid, matched.home
	case userArg == "":
	case uidErr != nil:
		return u, &userError{fmt.Sprintf("unable to find user %s: no matching entries in passwd file", userArg)}
	case uidArg < 0 || uidArg > 1<<31-1:
		return u, &userError{fmt.Sprintf("uids and gids must be in range 0-%d", 1<<31-1)}
	default:
		u.UID = uidArg
	}

	if groupArg == "" && matched == nil {
		return u, nil
	}
	groups, err := groupFile()
	if err != nil {
		return u, fmt.Errorf("read group: %w", err)
	}
	if groupArg != "" {
		for _, g := range groups {
			if (gidErr == nil && g.gid == gidArg) || (gidErr != nil && g.name == groupArg) {
				u.GID = g.gid
				return u, nil
			}
		}
		if gidErr != nil {
			return u, &userError{fmt.Sprintf("unable to find group %s: no matching entries in group file", groupArg)}
		}
		if gidArg < 0 || gidArg > 1<<31-1 {
			return u, &userError{fmt.Sprintf("uids and gids must be in range 0-%d", 1<<31-1)}
		}
		u.GID = gidArg
		return u, nil
	}
	for _, g := range groups {
		for _, m := range g.members {
			if m == matched.name {
				u.Groups = append(u.Groups, g.gid)
				break
			}
		}
	}
	return u, nil
}

// parsePasswd reads passwd(5) lines, skipping malformed ones as libc does.
func parsePasswd(r io.Reader) ([]passwdEntry, error) {
	var out []passwdEntry
	err := eachLine(r, func(f []string) {
		if len(f) < 6 {
			return
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			return
		}
		out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid, home: f[5]})
	})
	return out, err
}

// parseGroup reads group(5) lines, skipping malformed ones.
func parseGroup(r io.Reader) ([]groupEntry, error) {
	var out []groupEntry
	err := eachLine(r, func(f []string) {
		if len(f) < 3 {
			return
		}
		gid, err := strconv.Atoi(f[2])
		if err != nil {
			return
		}
		g := groupEntry{name: f[0], gid: gid}
		if len(f) > 3 && f[3] != "" {
			g.members = strings.Split(f[3], ",")
		}
		out = append(out, g)
	})
	return out, err
}

func eachLine(r io.Reader, fn func(fields []string)) error {
	if r == nil {
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fn(strings.Split(line, ":"))
	}
	return sc.Err()
}

// openOptional opens path, returning a nil reader if it does not exist.
func openOptional(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// lookupUser resolves a --user value, and --group-add's, against the
// container's files, under the calling thread's root.
func lookupUser(spec string, groupAdd []string) (execUser, error) {
	passwd, err := openOptional("/etc/passwd")
	if err != nil {
		return execUser{}, err
	}
	group, err := openOptional("/etc/group")
	if err != nil {
		return execUser{}, err
	}
	u, err := resolveUser(spec, groupAdd, passwd, group)
	if passwd != nil {
		passwd.Close()
	}
	if group != nil {
		group.Close()
	}
	var ue *userError
	if errors.As(err, &ue) {
		return u, &agentError{proto.KindUser, ue.msg}
	}
	return u, err
}
