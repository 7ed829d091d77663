/*
 * two_functions SECONDS: one thread burns CPU in burn_a and burn_b, in
 * rounds of 6 ms and 2 ms of the thread's own CPU time
 * (CLOCK_THREAD_CPUTIME_ID), so on-CPU samples must split 3:1 between them
 * whatever the scheduler does. (Counting loop iterations instead is not
 * 3:1 in time: the same loop runs at different speeds in the two places.)
 * Prints {"role":"done","pid","tid","rounds","a_ns","b_ns","a_delay_ns",
 * "b_delay_ns"} at the end, with the CPU time each function measured and
 * the time the thread waited for a CPU inside each (its schedstat
 * run_delay read around them: a preempted thread's wait is added when it
 * runs again, inside the function it was preempted in).
 *
 * noipa keeps both functions out of line and unclones, so each sample's
 * stack names one of them.
 */
#include "truth.h"

/* burn_b's CPU time per round; burn_a burns three times this. */
#define SLICE_S 0.002

static volatile unsigned long sink;

static inline double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The clock is a system call: read it every ~10 µs of work, so the loop,
 * not the kernel, holds nearly all samples. */
__attribute__((noipa)) static void burn_a(double cpu_s)
{
	double end = thread_cpu_s() + cpu_s;
	do {
		for (int i = 0; i < 20000; i++)
			sink += (unsigned long)i * 2654435761u;
	} while (thread_cpu_s() < end);
}

__attribute__((noipa)) static void burn_b(double cpu_s)
{
	double end = thread_cpu_s() + cpu_s;
	do {
		for (int i = 0; i < 20000; i++)
			sink += (unsigned long)i * 2654435761u;
	} while (thread_cpu_s() < end);
}

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	double end = now_s() + atof(argv[1]);
	double a = 0, b = 0;
	unsigned long long a_delay = 0, b_delay = 0;
	unsigned long rounds = 0;
	while (now_s() < end) {
		unsigned long long d0 = read_schedstat().run_delay_ns;
		double t0 = thread_cpu_s();
		burn_a(3 * SLICE_S);
		double t1 = thread_cpu_s();
		unsigned long long d1 = read_schedstat().run_delay_ns;
		burn_b(SLICE_S);
		b += thread_cpu_s() - t1;
		a += t1 - t0;
		a_delay += d1 - d0;
		b_delay += read_schedstat().run_delay_ns - d1;
		rounds++;
	}
	emit("{\"role\":\"done\",\"pid\":%d,\"tid\":%d,\"rounds\":%lu,\"a_ns\":%.0f,\"b_ns\":%.0f,"
	     "\"a_delay_ns\":%llu,\"b_delay_ns\":%llu}",
	     getpid(), truth_gettid(), rounds, a * 1e9, b * 1e9, a_delay, b_delay);
	return 0;
}
