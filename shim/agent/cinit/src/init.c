/*
 * husk-init: the init of a container's processes (shim/agent/cinit_linux.go).
 *
 * The agent starts this program as PID 1 of the container's new PID, mount
 * and UTS namespaces for its main process, and inside the container's
 * namespaces and root for an exec with resource limits, which the agent
 * cannot start itself. It reads a list of operations from descriptor 3,
 * carries them out in order (mounts, device nodes, chroot, limits, a
 * terminal, credentials, ...) and the last one execs the user's program. Everything
 * the operations do is worked out by the agent, in Go; this program only
 * interprets them, so it holds no policy of its own. A main process's list
 * stops at OP_CONTINUE_FD, which reads the rest from another descriptor:
 * the agent sends it once it has looked the user and the program up, which
 * it does while this program starts and carries out the first part.
 *
 * Why C: after a VM is restored from a template its translation cache is
 * empty, and a Go init's runtime start alone took 70-100 ms there before
 * main, against ~26 ms for a static musl program (see cinit_linux.go).
 *
 * Started as "husk-init-warm" it exits 0 at once: the template's warm-up
 * execs it as a container's program (warm_linux.go). Started as
 * /sbin/docker-init, where the init binds itself for --init, it is that
 * init (docker_init below).
 *
 * On a failing operation the program writes "<index> <errno>" to
 * descriptor 4 (close-on-exec, so a successful exec closes it with nothing
 * written) and exits 127; the agent words the error as its Go init did.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <termios.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* clone3's arguments up to the cgroup (struct clone_args, Linux 5.7). */
struct clone_args_v2 {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
		stack_size, tls, set_tid, set_tid_size, cgroup;
};

/* Keep in step with cinitOp in cinit_linux.go. */
enum {
	OP_MKDIR_ALL = 1, /* path, mode */
	OP_MOUNT,         /* source, target, fstype, flags, data ("" is none) */
	OP_MKNOD,         /* path, mode, dev */
	OP_SYMLINK,       /* target, link */
	OP_REMOVE,        /* path; a missing one is no error */
	OP_LCHOWN,        /* path, uid, gid */
	OP_SETHOSTNAME,   /* name */
	OP_CREATE,        /* path, mode: create the file if missing */
	OP_CHROOT,        /* path */
	OP_CHDIR,         /* path */
	OP_SETRLIMIT,     /* resource, soft, hard */
	OP_CAPBSET_DROP,  /* capability; one the kernel does not know is skipped */
	OP_SETGROUPS,     /* count, gids */
	OP_SETGID,        /* gid */
	OP_SETUID,        /* uid */
	OP_WRITE_FD,      /* fd, data; the descriptor is closed afterwards */
	OP_EXEC,          /* path, argc, args, envc, env */
	OP_OPEN_TERMINAL, /* open a pseudo-terminal in the root's /dev/ptmx */
	OP_TERMINAL_SIZE, /* rows, cols */
	OP_TERMINAL_CHOWN, /* uid: the slave side's owner */
	OP_SEND_TERMINAL, /* fd: a socket to send the master side over */
	OP_DUP_TERMINAL,  /* fd: make it the slave side */
	OP_SET_CTTY,      /* make the terminal (stdin) the controlling one */
	OP_OPEN,          /* path, fd: open path read-only at fd, close-on-exec */
	OP_CLOSE_ON_EXEC, /* fd */
	OP_AWAIT_FD,      /* fd: read one byte from it, then close it */
	OP_CONTINUE_FD,   /* fd: the operations that follow are read from it, to its end */
	OP_NO_NEW_PRIVS,  /* set no_new_privs: execve grants no privileges (--security-opt no-new-privileges) */
	OP_SETDOMAINNAME, /* name */
	OP_OOM_SCORE_ADJ, /* value, as text, written to /proc/self/oom_score_adj */
	OP_MASK_PATH,     /* null, path: hide it, as runc's maskPath; a missing one is no error */
	OP_READONLY_PATH, /* path: make it read-only, as runc's readonlyPath; a missing one is no error */
};

/* The terminal OP_OPEN_TERMINAL opened. */
static int term_master = -1, term_slave = -1;

enum { CONFIG_FD = 3, STATUS_FD = 4 };

/* NO_OP is the index reported for a failure of no one operation. */
#define NO_OP ((unsigned long)-1)

struct reader {
	const unsigned char *p, *end;
	int bad;
};

static uint64_t num(struct reader *r)
{
	uint64_t v = 0;
	if (r->end - r->p < 8) {
		r->bad = 1;
		return 0;
	}
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)r->p[i] << (8 * i);
	r->p += 8;
	return v;
}

/* str returns a string of the config; each is stored NUL-terminated. */
static const char *str(struct reader *r)
{
	uint64_t n = num(r);
	if (r->bad || n >= (uint64_t)(r->end - r->p) || r->p[n] != 0) {
		r->bad = 1;
		return "";
	}
	const char *s = (const char *)r->p;
	r->p += n + 1;
	return s;
}

/* strs returns a NULL-terminated array of the next count strings. */
static char **strs(struct reader *r)
{
	uint64_t n = num(r);
	if (r->bad || n > (uint64_t)(r->end - r->p)) {
		r->bad = 1;
		return NULL;
	}
	char **v = calloc(n + 1, sizeof(char *));
	if (v == NULL) {
		r->bad = 1;
		return NULL;
	}
	for (uint64_t i = 0; i < n; i++)
		v[i] = (char *)str(r);
	return v;
}

static unsigned char *read_all(int fd, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	unsigned char *buf = malloc(cap);
	while (buf != NULL) {
		if (n == cap) {
			unsigned char *grown = realloc(buf, cap *= 2);
			if (grown == NULL)
				break;
			buf = grown;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got == 0) {
			close(fd);
			*len = n;
			return buf;
		}
		if (got < 0 && errno != EINTR)
			break;
		if (got > 0)
			n += (size_t)got;
	}
	free(buf);
	return NULL;
}

static void fail(unsigned long index, int err)
{
	char msg[64];
	int n = snprintf(msg, sizeof msg, "%lu %d", index, err);
	if (write(STATUS_FD, msg, (size_t)n) < 0) {
		/* Nothing else to tell the agent with; the exit says enough. */
	}
	_exit(127);
}

/* mkdir_all creates path and its missing parents, as Go's os.MkdirAll. */
static int mkdir_all(const char *path, mode_t mode)
{
	struct stat st;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		errno = ENOTDIR;
		return -1;
	}
	size_t n = strlen(path);
	char *p = strdup(path);
	if (p == NULL)
		return -1;
	while (n > 1 && p[n - 1] == '/')
		p[--n] = 0;
	char *slash = strrchr(p, '/');
	if (slash != NULL && slash != p) {
		*slash = 0;
		if (mkdir_all(p, mode) < 0) {
			free(p);
			return -1;
		}
		*slash = '/';
	}
	int rc = mkdir(p, mode);
	if (rc < 0 && errno == EEXIST && lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
		rc = 0;
	free(p);
	return rc;
}

static int run(struct reader *r, mode_t umask_before)
{
	unsigned op = *r->p++;
	switch (op) {
	case OP_MKDIR_ALL: {
		const char *path = str(r);
		mode_t mode = (mode_t)num(r);
		return r->bad ? -2 : mkdir_all(path, mode);
	}
	case OP_MOUNT: {
		const char *src = str(r), *target = str(r), *fstype = str(r);
		unsigned long flags = (unsigned long)num(r);
		const char *data = str(r);
		if (r->bad)
			return -2;
		return mount(src, target, fstype, flags, *data ? data : NULL);
	}
	case OP_MKNOD: {
		const char *path = str(r);
		mode_t mode = (mode_t)num(r);
		dev_t dev = (dev_t)num(r);
		return r->bad ? -2 : mknod(path, mode, dev);
	}
	case OP_SYMLINK: {
		const char *target = str(r), *link = str(r);
		return r->bad ? -2 : symlink(target, link);
	}
	case OP_REMOVE: {
		const char *path = str(r);
		if (r->bad)
			return -2;
		if (unlink(path) == 0 || errno == ENOENT)
			return 0;
		if (errno != EISDIR && errno != EPERM)
			return -1;
		return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
	}
	case OP_LCHOWN: {
		const char *path = str(r);
		uid_t uid = (uid_t)num(r);
		gid_t gid = (gid_t)num(r);
		return r->bad ? -2 : lchown(path, uid, gid);
	}
	case OP_SETHOSTNAME: {
		const char *name = str(r);
		return r->bad ? -2 : sethostname(name, strlen(name));
	}
	case OP_CREATE: {
		const char *path = str(r);
		mode_t mode = (mode_t)num(r);
		if (r->bad)
			return -2;
		int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, mode);
		if (fd < 0)
			return -1;
		close(fd);
		return 0;
	}
	case OP_CHROOT: {
		const char *path = str(r);
		return r->bad ? -2 : chroot(path);
	}
	case OP_CHDIR: {
		const char *path = str(r);
		return r->bad ? -2 : chdir(path);
	}
	case OP_SETRLIMIT: {
		int res = (int)num(r);
		struct rlimit lim = {.rlim_cur = (rlim_t)num(r), .rlim_max = (rlim_t)num(r)};
		return r->bad ? -2 : setrlimit(res, &lim);
	}
	case OP_NO_NEW_PRIVS:
		return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	case OP_SETDOMAINNAME: {
		const char *name = str(r);
		return r->bad ? -2 : setdomainname(name, strlen(name));
	}
	case OP_MASK_PATH: {
		/* A file goes behind the container's /dev/null (null), as
		 * runc binds it after its pivot, a directory behind an empty
		 * read-only tmpfs. */
		const char *null = str(r);
		const char *path = str(r);
		if (r->bad)
			return -2;
		if (mount(null, path, NULL, MS_BIND, NULL) == 0 || errno == ENOENT)
			return 0;
		if (errno != ENOTDIR)
			return -1;
		return mount("tmpfs", path, "tmpfs", MS_RDONLY, NULL);
	}
	case OP_READONLY_PATH: {
		/* A bind of the path on itself, remounted read-only with the
		 * nosuid, nodev and noexec it had (a bind remount that drops
		 * them is refused). */
		const char *path = str(r);
		if (r->bad)
			return -2;
		if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0)
			return errno == ENOENT ? 0 : -1;
		struct statfs sfs;
		if (statfs(path, &sfs) < 0)
			return -1;
		unsigned long keep = (unsigned long)sfs.f_flags & (MS_NOSUID | MS_NODEV | MS_NOEXEC);
		return mount(path, path, NULL, keep | MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
	}
	case OP_OOM_SCORE_ADJ: {
		const char *value = str(r);
		if (r->bad)
			return -2;
		int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		ssize_t n = write(fd, value, strlen(value));
		int saved = errno;
		close(fd);
		errno = saved;
		return n < 0 ? -1 : 0;
	}
	case OP_CAPBSET_DROP: {
		unsigned long cap = (unsigned long)num(r);
		if (r->bad)
			return -2;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
		return 0;
	}
	case OP_SETGROUPS: {
		uint64_t n = num(r);
		if (r->bad || n > 65536)
			return -2;
		gid_t *gids = calloc(n + 1, sizeof(gid_t));
		if (gids == NULL)
			return -1;
		for (uint64_t i = 0; i < n; i++)
			gids[i] = (gid_t)num(r);
		return r->bad ? -2 : setgroups((size_t)n, gids);
	}
	case OP_SETGID: {
		gid_t gid = (gid_t)num(r);
		return r->bad ? -2 : setgid(gid);
	}
	case OP_SETUID: {
		uid_t uid = (uid_t)num(r);
		return r->bad ? -2 : setuid(uid);
	}
	case OP_WRITE_FD: {
		int fd = (int)num(r);
		const char *data = str(r);
		if (r->bad)
			return -2;
		ssize_t n = write(fd, data, strlen(data));
		int err = errno;
		close(fd);
		errno = err;
		return n < 0 ? -1 : 0;
	}
	case OP_EXEC: {
		const char *path = str(r);
		char **argv = strs(r), **envp = strs(r);
		if (r->bad)
			return -2;
		umask(umask_before);
		execve(path, argv, envp);
		return -1;
	}
	case OP_OPEN_TERMINAL: {
		term_master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (term_master < 0)
			return -1;
		int unlock = 0, n = 0;
		if (ioctl(term_master, TIOCSPTLCK, &unlock) < 0 || ioctl(term_master, TIOCGPTN, &n) < 0)
			return -1;
		char name[32];
		snprintf(name, sizeof name, "/dev/pts/%d", n);
		term_slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
		return term_slave < 0 ? -1 : 0;
	}
	case OP_TERMINAL_SIZE: {
		struct winsize ws = {.ws_row = (unsigned short)num(r), .ws_col = (unsigned short)num(r)};
		return r->bad ? -2 : ioctl(term_master, TIOCSWINSZ, &ws);
	}
	case OP_TERMINAL_CHOWN: {
		uid_t uid = (uid_t)num(r);
		return r->bad ? -2 : fchown(term_slave, uid, (gid_t)-1);
	}
	case OP_SEND_TERMINAL: {
		int sock = (int)num(r);
		if (r->bad)
			return -2;
		char byte = 0, control[CMSG_SPACE(sizeof(int))];
		struct iovec iov = {.iov_base = &byte, .iov_len = 1};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
		memset(control, 0, sizeof control);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &term_master, sizeof(int));
		ssize_t sent = sendmsg(sock, &msg, 0);
		int err = errno;
		close(sock);
		close(term_master);
		errno = err;
		return sent < 0 ? -1 : 0;
	}
	case OP_DUP_TERMINAL: {
		int fd = (int)num(r);
		return r->bad ? -2 : dup3(term_slave, fd, 0) < 0 ? -1 : 0;
	}
	case OP_SET_CTTY:
		return ioctl(0, TIOCSCTTY, 0);
	case OP_CLOSE_ON_EXEC: {
		int fd = (int)num(r);
		return r->bad ? -2 : fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	case OP_AWAIT_FD: {
		int fd = (int)num(r);
		if (r->bad)
			return -2;
		char b;
		ssize_t n;
		do
			n = read(fd, &b, 1);
		while (n < 0 && errno == EINTR);
		int err = n == 0 ? EPIPE : errno;
		close(fd);
		errno = err;
		return n == 1 ? 0 : -1;
	}
	case OP_CONTINUE_FD: {
		/* The agent sends the rest once it has worked it out; an empty
		 * rest (the agent gave up on the process) ends the list without
		 * an exec, which fails as a malformed one. */
		int fd = (int)num(r);
		if (r->bad || r->p != r->end)
			return -2;
		size_t len = 0;
		unsigned char *rest = read_all(fd, &len);
		if (rest == NULL)
			return -1;
		r->p = rest;
		r->end = rest + len;
		return 0;
	}
	case OP_OPEN: {
		const char *path = str(r);
		int fd = (int)num(r);
		if (r->bad)
			return -2;
		int opened = open(path, O_RDONLY | O_CLOEXEC);
		if (opened < 0 || opened == fd)
			return opened < 0 ? -1 : 0;
		int rc = dup3(opened, fd, O_CLOEXEC);
		int err = errno;
		close(opened);
		errno = err;
		return rc < 0 ? -1 : 0;
	}
	}
	return -2;
}

/*
 * docker_init is --init's init ("docker-init -- CMD ARGS..."), doing what
 * tini does by default: it runs the command as its child in a process
 * group of its own (in the foreground of a terminal), forwards every
 * signal to it, reaps every orphan that ends up with it, and exits as the
 * child did (128+signal when killed). HUSK_CGROUP_FD names the container's
 * cgroup, when the agent keeps one: the child is born in it (clone3's
 * CLONE_INTO_CGROUP), so no fork of the command escapes its pids limit,
 * while this init stays out, as under the agent's accounting before.
 */
static int docker_init(char **args)
{
	if (*args != NULL && strcmp(*args, "--") == 0)
		args++;
	if (*args == NULL) {
		fputs("docker-init: no command given\n", stderr);
		return 1;
	}
	sigset_t all, before;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &before);
	struct clone_args_v2 ca = {.exit_signal = SIGCHLD};
	const char *fd = getenv("HUSK_CGROUP_FD");
	if (fd != NULL) {
		char *end;
		long n = strtol(fd, &end, 10);
		if (*fd != 0 && *end == 0 && n > 2 && n < 1 << 20) {
			fcntl((int)n, F_SETFD, FD_CLOEXEC);
			ca.flags = CLONE_INTO_CGROUP;
			ca.cgroup = (uint64_t)n;
		}
		unsetenv("HUSK_CGROUP_FD");
	}
	long child = syscall(SYS_clone3, &ca, sizeof ca);
	if (child < 0) {
		fprintf(stderr, "docker-init: exec %s failed: %s\n", args[0], strerror(errno));
		return 127;
	}
	if (child == 0) {
		setpgid(0, 0);
		if (isatty(0)) {
			pid_t self = getpid();
			ioctl(0, TIOCSPGRP, &self);
		}
		sigprocmask(SIG_SETMASK, &before, NULL);
		execvp(args[0], args);
		fprintf(stderr, "docker-init: exec %s failed: %s\n", args[0], strerror(errno));
		_exit(127);
	}
	for (;;) {
		int sig = sigwaitinfo(&all, NULL);
		if (sig < 0)
			continue;
		if (sig != SIGCHLD) {
			kill((pid_t)child, sig);
			continue;
		}
		int status, done = 0, code = 0;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			if (pid != (pid_t)child)
				continue;
			done = 1;
			code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
		}
		if (done)
			return code;
	}
}

int main(int argc, char **argv)
{
	/* The template's warm-up execs this program again under this name. */
	if (argc > 0 && strcmp(argv[0], "husk-init-warm") == 0)
		return 0;
	if (argc > 0 && strcmp(argv[0], "/sbin/docker-init") == 0)
		return docker_init(argv + 1);
	if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) < 0)
		_exit(127);
	/* Modes in the operations are final; the program gets the umask back. */
	mode_t umask_before = umask(0);
	size_t len = 0;
	unsigned char *config = read_all(CONFIG_FD, &len);
	if (config == NULL)
		fail(NO_OP, errno ? errno : EIO);
	struct reader r = {.p = config, .end = config + len};
	for (unsigned long i = 0; r.p < r.end; i++) {
		int rc = run(&r, umask_before);
		if (rc == -2)
			fail(i, EBADMSG);
		if (rc < 0)
			fail(i, errno);
	}
	/* The last operation execs; a list that does not is malformed. */
	fail(NO_OP, EBADMSG);
}
