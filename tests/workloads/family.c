/*
 * family SECONDS MODE: a job that forks like a DataLoader, for the tests of
 * how tprof stops the command it launched. The parent forks two workers;
 * the first forks a helper of its own. Each prints
 * {"role","pid","ppid","pgid"} at once (the parent last, once its signal
 * handling is set up), then naps in 10 ms steps until
 * SECONDS have passed; the parent then waits for its children and exits 0.
 *
 * MODE "default": SIGINT, SIGTERM and SIGHUP keep their default action
 * (the process dies of the signal).
 * MODE "graceful": the parent catches them (its children keep the default
 * action), counts them, and on the first waits for its children, takes
 * 200 ms to "clean up", prints {"role":"exit","signals":N} with the count
 * and exits 3: a job that shuts down properly. N tells the tests how many
 * stop signals reached the job.
 * MODE "stubborn": every process ignores them; only SIGKILL stops it.
 */
#include "truth.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

static volatile sig_atomic_t signals_seen;
static int graceful;

static void count_signal(int sig)
{
	(void)sig;
	signals_seen++;
}

static void announce(const char *role)
{
	emit("{\"role\":\"%s\",\"pid\":%d,\"ppid\":%d,\"pgid\":%d}", role, getpid(), getppid(),
	     getpgrp());
}

static void ignore_stop_signals(void)
{
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
}

/* Naps until `until` (CLOCK_MONOTONIC seconds), or until a counted signal
 * arrived in the parent. */
static void nap_until(double until)
{
	while (now_s() < until && signals_seen == 0)
		sleep_for(0.01);
}

static pid_t fork_role(const char *role, double until, int grandchild)
{
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid > 0)
		return pid;
	if (graceful) {
		/* The parent's handler counts; its children die of the signal. */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
	}
	set_thread_name(role);
	announce(role);
	pid_t helper = grandchild ? fork_role("helper", until, 0) : 0;
	nap_until(until);
	if (helper > 0)
		waitpid(helper, NULL, 0);
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s SECONDS default|graceful|stubborn\n", argv[0]);
		return 2;
	}
	double until = now_s() + atof(argv[1]);
	const char *mode = argv[2];
	if (strcmp(mode, "stubborn") == 0)
		ignore_stop_signals();
	else if (strcmp(mode, "default") != 0 && strcmp(mode, "graceful") != 0) {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	graceful = strcmp(mode, "graceful") == 0;
	if (graceful) {
		struct sigaction action = {0};
		action.sa_handler = count_signal;
		sigemptyset(&action.sa_mask);
		sigaction(SIGINT, &action, NULL);
		sigaction(SIGTERM, &action, NULL);
		sigaction(SIGHUP, &action, NULL);
	}
	pid_t workers[2] = {fork_role("worker", until, 1), fork_role("worker", until, 0)};
	/* Last: once the parent has spoken, every handler is in place. */
	announce("parent");
	nap_until(until);
	for (int i = 0; i < 2; i++)
		while (waitpid(workers[i], NULL, 0) < 0 && errno == EINTR)
			;
	if (signals_seen == 0)
		return 0;
	sleep_for(0.2);
	emit("{\"role\":\"exit\",\"signals\":%d}", (int)signals_seen);
	return 3;
}
