/*
 * flood SECONDS: two threads, "ping" and "pong", bounce one byte through
 * a pair of pipes for SECONDS. Every round trip is two context switches and
 * two wakeups, so this floods tprof's ring buffer and file far faster than
 * any CPU-bound workload. Prints {"role":"start","pid"} at once, then
 * {"round_trips":N}.
 */
#include "truth.h"

#include <pthread.h>

static int ping_to_pong[2], pong_to_ping[2];

static void *pong(void *arg)
{
	(void)arg;
	set_thread_name("pong");
	char byte;
	while (read(ping_to_pong[0], &byte, 1) == 1)
		write_all(pong_to_ping[1], &byte, 1);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	double seconds = atof(argv[1]);
	if (pipe(ping_to_pong) || pipe(pong_to_ping)) {
		perror("pipe");
		return 1;
	}
	emit("{\"role\":\"start\",\"pid\":%d}", getpid());
	set_thread_name("ping");
	pthread_t thread;
	pthread_create(&thread, NULL, pong, NULL);
	unsigned long long trips = 0;
	double end = now_s() + seconds;
	char byte = 'x';
	while (now_s() < end) {
		write_all(ping_to_pong[1], &byte, 1);
		if (read(pong_to_ping[0], &byte, 1) != 1)
			break;
		trips++;
	}
	close(ping_to_pong[1]);
	pthread_join(thread, NULL);
	emit("{\"round_trips\":%llu}", trips);
	return 0;
}
