/*
 * pid_reuse: two processes with the same pid, one after the other. Forks
 * "first", which spins 0.2 s and exits; reaps it; then sets the pid
 * namespace's ns_last_pid so that the next fork gets first's pid again,
 * and forks "second", which spins 0.3 s. Other processes on the machine may
 * take the pid in between, so it retries. Prints {"role","pid","ppid"} for
 * each child and {"reused":true|false}. Needs root (ns_last_pid).
 *
 * `pid_reuse exec`: second then execs a shell loop, so the pid's two
 * holders play different roles (a forked worker, then a helper program).
 */
#include "truth.h"

#include <sys/wait.h>

static void child(const char *role, double seconds, int exec_shell)
{
	set_thread_name(role);
	emit("{\"role\":\"%s\",\"pid\":%d,\"ppid\":%d}", role, getpid(), getppid());
	if (exec_shell) {
		/* About as long as the spin, on a machine of today. */
		execl("/bin/sh", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
		      (char *)NULL);
		perror("exec /bin/sh");
	}
	spin_for(seconds);
	_exit(0);
}

static int set_last_pid(pid_t pid)
{
	int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char text[32];
	int n = snprintf(text, sizeof text, "%d", pid);
	int ok = write(fd, text, (size_t)n) == n;
	close(fd);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	int exec_shell = argc > 1 && strcmp(argv[1], "exec") == 0;
	pid_t first = fork();
	if (first == 0)
		child("first", 0.2, 0);
	waitpid(first, NULL, 0);
	for (int attempt = 0; attempt < 100; attempt++) {
		if (set_last_pid(first - 1) != 0) {
			perror("ns_last_pid");
			break;
		}
		pid_t pid = fork();
		if (pid == 0) {
			if (getpid() == first)
				child("second", 0.3, exec_shell);
			_exit(0);
		}
		waitpid(pid, NULL, 0);
		if (pid == first) {
			emit("{\"reused\":true}");
			return 0;
		}
	}
	emit("{\"reused\":false}");
	return 1;
}
