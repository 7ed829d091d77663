/*
 * busy_threads N SECONDS: N threads spin for SECONDS of wall time each. On
 * a machine with fewer cores than N they compete, so each thread spends a
 * known share of its life on the CPU and the rest runnable (waiting for a
 * CPU), which the kernel's schedstat accounts exactly.
 *
 * With TPROF_WAIT_START set, nothing starts until a byte arrives on stdin.
 * Each thread prints {"tid","start_on_cpu_ns","start_run_delay_ns",
 * "end_on_cpu_ns","end_run_delay_ns"}.
 */
#include "truth.h"

#include <pthread.h>

static pthread_barrier_t start_line;
static double burn_s;

struct worker {
	pthread_t thread;
	int index;
};

static void *busy(void *arg)
{
	struct worker *w = arg;
	char name[16];
	snprintf(name, sizeof name, "busy-%d", w->index);
	set_thread_name(name);
	/* All threads start spinning together so they really compete. */
	pthread_barrier_wait(&start_line);
	struct schedstat start = read_schedstat();
	spin_for(burn_s);
	struct schedstat end = read_schedstat();
	emit("{\"tid\":%d,\"name\":\"%s\",\"start_on_cpu_ns\":%llu,\"start_run_delay_ns\":%llu,"
	     "\"end_on_cpu_ns\":%llu,\"end_run_delay_ns\":%llu}",
	     truth_gettid(), name, start.on_cpu_ns, start.run_delay_ns, end.on_cpu_ns,
	     end.run_delay_ns);
	return NULL;
}

static void wait_for_start(void)
{
	char byte;
	if (getenv("TPROF_WAIT_START") && read(STDIN_FILENO, &byte, 1) < 0)
		perror("read start signal");
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s THREADS SECONDS\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	burn_s = atof(argv[2]);
	if (n < 1 || n > 256 || burn_s <= 0) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	wait_for_start();
	struct worker *workers = calloc((size_t)n, sizeof *workers);
	pthread_barrier_init(&start_line, NULL, (unsigned)n);
	for (int i = 0; i < n; i++) {
		workers[i].index = i;
		pthread_create(&workers[i].thread, NULL, busy, &workers[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(workers[i].thread, NULL);
	free(workers);
	return 0;
}
