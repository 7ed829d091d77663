/*
 * A holder thread takes a mutex for HOLD_MS, drops it for a moment, and
 * repeats ROUNDS times; a waiter thread blocks on the same mutex each round.
 * The waiter measures its own time inside pthread_mutex_lock (its futex
 * wait on the mutex) and inside pthread_barrier_wait (futex waits on the
 * barrier), and reports them with the mutex's address and both tids.
 *
 * usage: mutex_pair ROUNDS HOLD_MS
 */
#include "truth.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t round_start;
static int rounds, hold_ms;
static volatile pid_t holder_tid;

static void *holder(void *arg)
{
	(void)arg;
	set_thread_name("holder");
	holder_tid = truth_gettid();
	for (int i = 0; i < rounds; i++) {
		pthread_mutex_lock(&lock);
		pthread_barrier_wait(&round_start);
		sleep_for(hold_ms / 1000.0);
		pthread_mutex_unlock(&lock);
		sleep_for(0.02); /* let the waiter take and drop it */
	}
	return NULL;
}

static void *waiter(void *arg)
{
	(void)arg;
	set_thread_name("waiter");
	double waited = 0, at_barrier = 0;
	for (int i = 0; i < rounds; i++) {
		double t0 = now_s();
		pthread_barrier_wait(&round_start);
		double t1 = now_s();
		pthread_mutex_lock(&lock);
		waited += now_s() - t1;
		at_barrier += t1 - t0;
		pthread_mutex_unlock(&lock);
	}
	emit("{\"tid\":%d,\"holder_tid\":%d,\"uaddr\":\"%p\",\"wait_ns\":%.0f,"
	     "\"barrier_ns\":%.0f,\"rounds\":%d}",
	     truth_gettid(), holder_tid, (void *)&lock, waited * 1e9, at_barrier * 1e9, rounds);
	return NULL;
}

int main(int argc, char **argv)
{
	rounds = argc > 1 ? atoi(argv[1]) : 5;
	hold_ms = argc > 2 ? atoi(argv[2]) : 100;
	pthread_barrier_init(&round_start, NULL, 2);
	pthread_t h, w;
	pthread_create(&h, NULL, holder, NULL);
	pthread_create(&w, NULL, waiter, NULL);
	pthread_join(h, NULL);
	pthread_join(w, NULL);
	return 0;
}
