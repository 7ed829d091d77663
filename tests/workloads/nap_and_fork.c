/*
 * nap_and_fork SECONDS: a thread "napper" sleeps SECONDS in nap(); meanwhile
 * the main thread forks a process whose thread "worker" burns 0.3 s of CPU
 * time in worker_burn() and exits, long before the napper wakes. The main
 * thread reaps the worker and joins the napper. Prints
 * {"role":"napper","pid","tid","slept_ns"} (measured with CLOCK_MONOTONIC
 * around the sleep) and {"role":"worker","pid","tid"}.
 */
#include "truth.h"

#include <pthread.h>
#include <sys/wait.h>

static double nap_s;
static volatile unsigned long sink;

__attribute__((noipa)) static void nap(double seconds)
{
	sleep_for(seconds);
}

static void *napper(void *arg)
{
	(void)arg;
	set_thread_name("napper");
	double start = now_s();
	nap(nap_s);
	double slept = now_s() - start;
	emit("{\"role\":\"napper\",\"pid\":%d,\"tid\":%d,\"slept_ns\":%.0f}", getpid(),
	     truth_gettid(), slept * 1e9);
	return NULL;
}

static inline double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Burns `seconds` of the thread's own CPU time, so it is sampled as often
 * however busy the machine is. */
__attribute__((noipa)) static void worker_burn(double seconds)
{
	double end = thread_cpu_s() + seconds;
	while (thread_cpu_s() < end)
		for (int i = 0; i < 100000; i++)
			sink += (unsigned long)i * 2654435761u;
}

static void worker(void)
{
	set_thread_name("worker");
	emit("{\"role\":\"worker\",\"pid\":%d,\"tid\":%d}", getpid(), truth_gettid());
	worker_burn(0.3);
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) <= 0.5) {
		fprintf(stderr, "usage: %s SECONDS (> 0.5)\n", argv[0]);
		return 2;
	}
	nap_s = atof(argv[1]);
	pthread_t thread;
	pthread_create(&thread, NULL, napper, NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0)
		worker();
	waitpid(pid, NULL, 0);
	pthread_join(thread, NULL);
	return 0;
}
