/*
 * idle_target START_FILE: a long-running process for `tprof record -p`.
 * Prints {"role":"target","pid"} at once, then runs two threads until
 * SIGTERM: "idle-busy" spins, "idle-sleep" sleeps 10 ms at a time. Each
 * thread reads its start schedstat when START_FILE appears (polled every
 * 1 ms) and its end schedstat on SIGTERM, then prints {"tid","name",
 * "started","start_on_cpu_ns","start_run_delay_ns","end_on_cpu_ns",
 * "end_run_delay_ns"} and exits. Gives up after 60 s so a failed test
 * cannot leave it running forever.
 */
#include "truth.h"

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#define GIVE_UP_S 60.0

static volatile sig_atomic_t stop;
static const char *start_file;
static double deadline;

static void on_sigterm(int sig)
{
	(void)sig;
	stop = 1;
}

static int should_stop(void)
{
	return stop || now_s() > deadline;
}

static int start_file_exists(void)
{
	struct stat st;
	return stat(start_file, &st) == 0;
}

struct window {
	const char *name;
	int started;
	double next_poll;
	struct schedstat start;
};

static void window_begin(struct window *w, const char *name)
{
	set_thread_name(name);
	w->name = name;
	w->started = 0;
	w->next_poll = 0;
	w->start = read_schedstat();
}

/* Polls the start file at most once per millisecond. */
static void window_poll(struct window *w)
{
	if (w->started || now_s() < w->next_poll)
		return;
	w->next_poll = now_s() + 0.001;
	if (start_file_exists()) {
		w->start = read_schedstat();
		w->started = 1;
	}
}

static void window_end(struct window *w)
{
	struct schedstat end = read_schedstat();
	emit("{\"tid\":%d,\"name\":\"%s\",\"started\":%s,\"start_on_cpu_ns\":%llu,"
	     "\"start_run_delay_ns\":%llu,\"end_on_cpu_ns\":%llu,\"end_run_delay_ns\":%llu}",
	     truth_gettid(), w->name, w->started ? "true" : "false", w->start.on_cpu_ns,
	     w->start.run_delay_ns, end.on_cpu_ns, end.run_delay_ns);
}

static void *busy(void *arg)
{
	(void)arg;
	struct window w;
	window_begin(&w, "idle-busy");
	while (!should_stop()) {
		spin_for(0.0005);
		window_poll(&w);
	}
	window_end(&w);
	return NULL;
}

static void *sleepy(void *arg)
{
	(void)arg;
	struct window w;
	window_begin(&w, "idle-sleep");
	while (!should_stop()) {
		sleep_for(w.started ? 0.010 : 0.001);
		window_poll(&w);
	}
	window_end(&w);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s START_FILE\n", argv[0]);
		return 2;
	}
	start_file = argv[1];
	deadline = now_s() + GIVE_UP_S;
	struct sigaction sa = {.sa_handler = on_sigterm};
	sigaction(SIGTERM, &sa, NULL);
	emit("{\"role\":\"target\",\"pid\":%d}", getpid());
	pthread_t threads[2];
	pthread_create(&threads[0], NULL, busy, NULL);
	pthread_create(&threads[1], NULL, sleepy, NULL);
	pthread_join(threads[0], NULL);
	pthread_join(threads[1], NULL);
	return 0;
}
