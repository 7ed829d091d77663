/*
 * forker DELAY_S: a three-generation process tree with known names, like a
 * DataLoader forking workers. After DELAY_S the parent forks "child"; the
 * child starts a "child-worker" thread and forks a "grandchild"; the worker
 * and the grandchild each spin 200 ms. Everyone prints {"role","pid","tid",
 * "ppid"} for its threads; the parent waits for all. About 1 s in total.
 */
#include "truth.h"

#include <pthread.h>
#include <sys/wait.h>

static void announce(const char *role)
{
	emit("{\"role\":\"%s\",\"pid\":%d,\"tid\":%d,\"ppid\":%d}", role, getpid(), truth_gettid(),
	     getppid());
}

static void *child_worker(void *arg)
{
	(void)arg;
	set_thread_name("child-worker");
	announce("child-worker");
	spin_for(0.2);
	return NULL;
}

static void grandchild(void)
{
	set_thread_name("grandchild");
	announce("grandchild");
	spin_for(0.2);
	_exit(0);
}

static void child(void)
{
	set_thread_name("child");
	announce("child");
	pthread_t worker;
	pthread_create(&worker, NULL, child_worker, NULL);
	/* emit() writes unbuffered, so nothing is duplicated by fork. */
	pid_t pid = fork();
	if (pid == 0)
		grandchild();
	waitpid(pid, NULL, 0);
	pthread_join(worker, NULL);
	sleep_for(0.2);
	_exit(0);
}

int main(int argc, char **argv)
{
	double delay_s = argc > 1 ? atof(argv[1]) : 0.3;
	announce("parent");
	sleep_for(delay_s);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		child();
	waitpid(pid, NULL, 0);
	/* Keep the total near 1 s so the tree's exit is well inside tracing. */
	sleep_for(0.2);
	return 0;
}
