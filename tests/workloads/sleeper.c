/*
 * sleeper SECONDS: one thread named "sleeper" nanosleeps for SECONDS, so it
 * spends almost its whole life blocked (interruptible sleep). Prints
 * {"role":"start","pid"} at once, then the sleeper's {"tid","name",
 * "pid","on_cpu_ns","run_delay_ns"} schedstat deltas over the sleep.
 */
#include "truth.h"

#include <pthread.h>

static double sleep_s;

static void *sleeper(void *arg)
{
	(void)arg;
	set_thread_name("sleeper");
	struct schedstat start = read_schedstat();
	sleep_for(sleep_s);
	struct schedstat end = read_schedstat();
	emit("{\"tid\":%d,\"name\":\"sleeper\",\"pid\":%d,\"on_cpu_ns\":%llu,\"run_delay_ns\":%llu}",
	     truth_gettid(), getpid(), end.on_cpu_ns - start.on_cpu_ns,
	     end.run_delay_ns - start.run_delay_ns);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) < 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	sleep_s = atof(argv[1]);
	/* Lets a test find (and clean up) the process before the sleep ends. */
	emit("{\"role\":\"start\",\"pid\":%d}", getpid());
	pthread_t thread;
	pthread_create(&thread, NULL, sleeper, NULL);
	pthread_join(thread, NULL);
	return 0;
}
