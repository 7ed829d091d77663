/*
 * unwind_chains SECONDS: code built the way users' code is (-O2
 * -fomit-frame-pointer, see tests/support/workload.rs) with known call
 * chains, for checking whole user stacks:
 *
 *   main thread, in rounds until SECONDS have passed:
 *     main -> cpu_mid -> cpu_leaf                 (burns CPU)
 *     main -> clobber_mid -> clobber_leaf         (burns CPU with rbp set to
 *                                                  the sentinel 0x5ec0ffee)
 *     main -> deep(300) -> ... -> deep(0) -> deep_leaf   (burns CPU 301
 *                                                  frames down)
 *     main -> wait_for_batch -> nap -> nanosleep  (sleeps 2 ms)
 *   a pthread, the whole time:
 *     worker_main -> worker_mid -> worker_leaf    (burns CPU)
 *
 * Each function is noipa (never inlined, cloned or specialized) and does
 * something after each call, so none is a tail call: the chains above are
 * exactly the frames a correct unwinder must find. Prints
 * {"role":"done","pid","tid","worker_tid","slept_ns","rounds"} at the end,
 * slept_ns being the wall time spent in nanosleep.
 */
#include "truth.h"

#include <pthread.h>

#define DEPTH 300

static volatile unsigned long sink;
static volatile int stop;

#define NOIPA __attribute__((noipa))
/* After a call, so the call is not the function's last act. */
#define AFTER_CALL() __asm__ volatile("" ::: "memory")

static inline double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Burns `cpu_s` of this thread's CPU time; the clock is read every
 * ~10 µs of work, so nearly all samples land in the loop. */
static inline void burn(double cpu_s)
{
	double end = thread_cpu_s() + cpu_s;
	do {
		for (int i = 0; i < 20000; i++)
			sink += (unsigned long)i * 2654435761u;
	} while (thread_cpu_s() < end);
}

NOIPA static void cpu_leaf(void)
{
	burn(0.004);
}

NOIPA static void cpu_mid(void)
{
	cpu_leaf();
	AFTER_CALL();
}

/* Frameless, with rbp holding the sentinel while it burns: gcc saves and
 * restores rbp around the asm and says so in the CFI, so an unwinder that
 * follows the CFI never sees the sentinel; one that follows rbp does. */
NOIPA static void clobber_leaf(void)
{
	double end = thread_cpu_s() + 0.004;
	do {
		__asm__ volatile(
			"mov $0x5ec0ffee, %%rbp\n\t"
			"mov $20000, %%ecx\n"
			"1:\n\t"
			"add %%rcx, %%rbp\n\t"
			"dec %%ecx\n\t"
			"jnz 1b\n\t"
			"mov $0x5ec0ffee, %%rbp\n\t"
			:
			:
			: "rbp", "rcx", "cc");
	} while (thread_cpu_s() < end);
}

NOIPA static void clobber_mid(void)
{
	clobber_leaf();
	AFTER_CALL();
}

NOIPA static void deep_leaf(void)
{
	burn(0.004);
}

/* A frame of about 256 bytes each: 301 of them are deeper than the
 * largest copy tprof makes (64 KiB). */
NOIPA static int deep(int n)
{
	volatile char pad[232];
	pad[0] = (char)n;
	if (n == 0)
		deep_leaf();
	else
		deep(n - 1);
	AFTER_CALL();
	return pad[0];
}

static double slept_s;

NOIPA static void nap(void)
{
	struct timespec ts = {0, 2000000};
	double t0 = now_s();
	nanosleep(&ts, NULL);
	slept_s += now_s() - t0;
	AFTER_CALL();
}

NOIPA static void wait_for_batch(void)
{
	nap();
	AFTER_CALL();
}

NOIPA static void worker_leaf(void)
{
	burn(0.004);
}

NOIPA static void worker_mid(void)
{
	worker_leaf();
	AFTER_CALL();
}

static pid_t worker_tid;

static void *worker_main(void *arg)
{
	(void)arg;
	worker_tid = truth_gettid();
	while (!stop) {
		worker_mid();
		AFTER_CALL();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	double end = now_s() + atof(argv[1]);
	pthread_t worker;
	if (pthread_create(&worker, NULL, worker_main, NULL) != 0) {
		perror("pthread_create");
		return 1;
	}
	unsigned long rounds = 0;
	while (now_s() < end) {
		cpu_mid();
		clobber_mid();
		deep(DEPTH);
		wait_for_batch();
		rounds++;
	}
	stop = 1;
	pthread_join(worker, NULL);
	emit("{\"role\":\"done\",\"pid\":%d,\"tid\":%d,\"worker_tid\":%d,"
	     "\"slept_ns\":%.0f,\"rounds\":%lu}",
	     getpid(), truth_gettid(), worker_tid, slept_s * 1e9, rounds);
	return 0;
}
