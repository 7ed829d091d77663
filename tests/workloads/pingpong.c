/*
 * The overhead benchmark's job: context-switch heavy, with futex and block
 * IO traffic, like a data pipeline at full tilt.
 *
 * PAIRS producer processes each ping-pong one byte with a consumer thread
 * over two pipes (every round trip is two wakeups and two context switches
 * at least); consumer threads count round trips under one shared mutex (futex
 * contention); with FILE, one more process reads it with O_DIRECT, 64 KiB at
 * a time, 100 times a second (block IO). With WORK, each producer also runs
 * WORK steps of arithmetic per byte (the "decode" of an item), which paces
 * the job from ~800,000 context switches/s on two cores down to a chosen
 * rate while keeping the CPUs busy. Runs SECONDS, printing one JSON line per
 * second: {"t":s,"round_trips":cumulative,"ctxt":machine-wide context
 * switches so far (/proc/stat)}.
 *
 * With PIN, pair i's producer and consumer both run on CPU i % CPUs: every
 * round trip is then two context switches on one CPU, no cross-CPU wakeup,
 * and the job's throughput is bound by CPU time alone -- so run to run it
 * varies little, and what a tracer adds per switch shows directly. Unpinned,
 * the scheduler's placement of the pairs (and how often a wakeup lands on an
 * idle CPU) moves the throughput of a paced job by up to a quarter between
 * runs.
 *
 * usage: pingpong PAIRS SECONDS [FILE [WORK [pin]]]
 */
#include "truth.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#define MAX_PAIRS 64

static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long round_trips;
static volatile int stop;
static unsigned long work;
static volatile unsigned long sink;
static int pin;

/* With PIN, the CPU of pair i (else -1). */
static int pair_cpu(int i)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return pin && cpus > 0 ? (int)(i % cpus) : -1;
}

static void pin_to(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		exit(2);
}

/* WORK steps of a dependent multiply-add chain: CPU time that cannot be
 * optimized away or overlapped. */
static void decode(char byte)
{
	unsigned long x = (unsigned char)byte;
	for (unsigned long i = 0; i < work; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	sink = x;
}

/* Context switches on the machine since boot. */
static unsigned long long ctxt(void)
{
	FILE *f = fopen("/proc/stat", "r");
	char line[256];
	unsigned long long n = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "ctxt %llu", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

struct pair {
	int to_producer, from_producer;
	int cpu;
};

static void producer(int in, int out)
{
	set_thread_name("producer");
	char byte;
	while (read(in, &byte, 1) == 1) {
		decode(byte);
		if (write(out, &byte, 1) != 1)
			break;
	}
	exit(0);
}

static void *consumer(void *arg)
{
	struct pair *p = arg;
	set_thread_name("consumer");
	pin_to(p->cpu);
	char byte = 'x';
	while (!stop) {
		if (write(p->to_producer, &byte, 1) != 1 || read(p->from_producer, &byte, 1) != 1)
			break;
		pthread_mutex_lock(&count_lock);
		round_trips++;
		pthread_mutex_unlock(&count_lock);
	}
	return NULL;
}

static void reader(const char *file)
{
	set_thread_name("reader");
	int fd = open(file, O_RDONLY | O_DIRECT);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 65536) != 0)
		exit(2);
	off_t size = lseek(fd, 0, SEEK_END), off = 0;
	for (;;) {
		if (off + 65536 > size)
			off = 0;
		if (pread(fd, buf, 65536, off) != 65536)
			exit(2);
		off += 65536;
		sleep_for(0.01);
	}
}

static pid_t spawn_producer(struct pair *p)
{
	int down[2], up[2];
	if (pipe(down) != 0 || pipe(up) != 0)
		exit(2);
	pid_t pid = fork();
	if (pid == 0) {
		pin_to(p->cpu);
		close(down[1]);
		close(up[0]);
		producer(down[0], up[1]);
	}
	close(down[0]);
	close(up[1]);
	p->to_producer = down[1];
	p->from_producer = up[0];
	return pid;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s PAIRS SECONDS [FILE [WORK [pin]]]\n", argv[0]);
		return 2;
	}
	int pairs = atoi(argv[1]);
	double seconds = atof(argv[2]);
	if (pairs < 1 || pairs > MAX_PAIRS)
		return 2;
	if (argc > 4)
		work = strtoul(argv[4], NULL, 10);
	pin = argc > 5 && strcmp(argv[5], "pin") == 0;
	static struct pair p[MAX_PAIRS];
	pid_t pids[MAX_PAIRS + 1];
	int children = 0;
	for (int i = 0; i < pairs; i++) {
		p[i].cpu = pair_cpu(i);
		pids[children++] = spawn_producer(&p[i]);
	}
	if (argc > 3) {
		pid_t pid = fork();
		if (pid == 0)
			reader(argv[3]);
		pids[children++] = pid;
	}
	pthread_t threads[MAX_PAIRS];
	for (int i = 0; i < pairs; i++)
		pthread_create(&threads[i], NULL, consumer, &p[i]);
	double start = now_s();
	for (int t = 1; t <= (int)seconds; t++) {
		sleep_for(start + t - now_s());
		pthread_mutex_lock(&count_lock);
		unsigned long long n = round_trips;
		pthread_mutex_unlock(&count_lock);
		emit("{\"t\":%d,\"round_trips\":%llu,\"ctxt\":%llu}", t, n, ctxt());
	}
	stop = 1;
	for (int i = 0; i < pairs; i++) {
		close(p[i].to_producer);
		pthread_join(threads[i], NULL);
	}
	for (int i = 0; i < children; i++) {
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	return 0;
}
