/*
 * two_sleepers SECONDS: one thread sleeps in rounds of three 1 ms naps
 * from sleep_a and one 3 ms nap from sleep_b, both through the same
 * nap(), so at every nanosleep the thread stands at the same instruction,
 * stack pointer and frame pointer whichever of the two called: only the
 * return addresses further up the stack tell them apart. The off-CPU time
 * splits 1:1 by construction, 3:1 by count. Prints
 * {"role":"done","pid","tid","rounds","a_ns","b_ns"} at the end, with the
 * wall time each function spent (CLOCK_MONOTONIC around it).
 *
 * It naps once from sleep_a and then sleeps 0.5 s in main before its
 * rounds (neither counted): time for tprof to unwind that first copy of
 * nap's site and tell the kernel its callers, which a reuse of a copy is
 * checked against only once they are known.
 *
 * noipa keeps sleep_a, sleep_b and nap out of line and unclones, so each
 * stack names one of the two callers; both have the same frame (none of
 * their own), which is what puts nap's nanosleep at one stack pointer.
 */
#include "truth.h"

__attribute__((noipa)) static void nap(long ns)
{
	struct timespec t = {0, ns};
	nanosleep(&t, NULL);
}

__attribute__((noipa)) static void sleep_a(void)
{
	nap(1000000);
}

__attribute__((noipa)) static void sleep_b(void)
{
	nap(3000000);
}

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	sleep_a();
	struct timespec settle = {0, 500000000};
	nanosleep(&settle, NULL);
	double end = now_s() + atof(argv[1]);
	double a = 0, b = 0;
	unsigned long rounds = 0;
	while (now_s() < end) {
		double t0 = now_s();
		sleep_a();
		sleep_a();
		sleep_a();
		double t1 = now_s();
		sleep_b();
		b += now_s() - t1;
		a += t1 - t0;
		rounds++;
	}
	emit("{\"role\":\"done\",\"pid\":%d,\"tid\":%d,\"rounds\":%lu,\"a_ns\":%.0f,\"b_ns\":%.0f}",
	     getpid(), truth_gettid(), rounds, a * 1e9, b * 1e9);
	return 0;
}
