/*
 * A reader thread blocks reading an empty pipe until a writer thread writes
 * to it after DELAY_S: the reader's wait is "other sleep", neither futex nor
 * block IO.
 *
 * usage: pipe_reader DELAY_S
 */
#include "truth.h"

#include <pthread.h>

static int fds[2];
static double delay_s;

static void *reader(void *arg)
{
	(void)arg;
	set_thread_name("pipe-reader");
	char byte;
	double t0 = now_s();
	if (read(fds[0], &byte, 1) != 1)
		exit(2);
	emit("{\"tid\":%d,\"name\":\"pipe-reader\",\"blocked_ns\":%.0f}", truth_gettid(),
	     (now_s() - t0) * 1e9);
	return NULL;
}

static void *writer(void *arg)
{
	(void)arg;
	set_thread_name("pipe-writer");
	sleep_for(delay_s);
	write_all(fds[1], "x", 1);
	return NULL;
}

int main(int argc, char **argv)
{
	delay_s = argc > 1 ? atof(argv[1]) : 1.0;
	if (pipe(fds) != 0)
		return 2;
	pthread_t r, w;
	pthread_create(&r, NULL, reader, NULL);
	pthread_create(&w, NULL, writer, NULL);
	pthread_join(r, NULL);
	pthread_join(w, NULL);
	return 0;
}
