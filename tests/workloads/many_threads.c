/*
 * many_threads N SECONDS: starts N threads named "idle-K" (small stacks)
 * that wait on one condition variable, prints {"pid","threads":N} once all
 * exist, keeps them for SECONDS, then wakes and joins them all.
 */
#include "truth.h"

#include <pthread.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static int done;

static void *idle(void *arg)
{
	char name[16];
	snprintf(name, sizeof name, "idle-%ld", (long)arg);
	set_thread_name(name);
	pthread_mutex_lock(&lock);
	while (!done)
		pthread_cond_wait(&go, &lock);
	pthread_mutex_unlock(&lock);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3 || atoi(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s N SECONDS\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	pthread_t *threads = calloc((size_t)n, sizeof *threads);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	for (long i = 0; i < n; i++) {
		int err = pthread_create(&threads[i], &attr, idle, (void *)i);
		if (err) {
			fprintf(stderr, "pthread_create %ld: %s\n", i, strerror(err));
			return 1;
		}
	}
	emit("{\"pid\":%d,\"threads\":%d}", getpid(), n);
	sleep_for(atof(argv[2]));
	pthread_mutex_lock(&lock);
	done = 1;
	pthread_cond_broadcast(&go);
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
