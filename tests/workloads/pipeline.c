/*
 * A data-loading pipeline shaped like PyTorch's DataLoader: a trainer
 * process forks WORKERS worker processes ("pt_data_worker"), hands each two
 * batch requests (prefetch_factor=2) over a pipe, and consumes the batches
 * from one shared queue (a pipe all workers write to) as they arrive,
 * training TRAIN_MS of CPU on each and asking the batch's worker for the
 * next.
 * A worker makes a batch by spinning WORK ms of CPU (mode cpu), sleeping
 * WORK ms (mode sleep: a worker waiting on something outside the machine),
 * or reading WORK KiB of FILE with O_DIRECT (mode io), then writes it to
 * its own data pipe.
 *
 * usage: pipeline WORKERS BATCHES WORK TRAIN_MS cpu|sleep|io [FILE]
 * With PIPELINE_POOL=N in the environment, each worker splits a cpu batch
 * between itself and N pool threads ("omp_worker") that meet at a barrier,
 * like an OpenMP parallel region. CPU work is measured in thread CPU time,
 * so a batch costs the same CPU however contended the cores are.
 *
 * Ground truth, from the trainer: the batch count, its time blocked in
 * read() waiting for batches, and its life from main() to exit.
 * Workers start staggered by WORK/WORKERS so their batches arrive spread
 * out, as in a steady-state pipeline.
 */
#include "truth.h"

#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>

#define MAX_WORKERS 64
#define PREFETCH 2

struct batch {
	int worker;
	int seq;
	char payload[56];
};

static int workers, batches, train_ms, io_mode, sleep_mode;
static double work;
static const char *file;

static double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Spins until this thread has used `ms` of CPU time. */
static void burn_cpu(double ms)
{
	volatile unsigned long sink = 0;
	double end = thread_cpu_s() + ms / 1000.0;
	do {
		for (int i = 0; i < 1000; i++)
			sink += (unsigned long)i * 2654435761u;
	} while (thread_cpu_s() < end);
}

/* A worker's pool: POOL threads and the worker's main thread share each
 * batch's CPU work between two barrier waits. */
static pthread_barrier_t pool_start, pool_done;
static int pool_size;

static void *pool_thread(void *arg)
{
	(void)arg;
	set_thread_name("omp_worker");
	for (;;) {
		pthread_barrier_wait(&pool_start);
		burn_cpu(work / (pool_size + 1));
		pthread_barrier_wait(&pool_done);
	}
	return NULL;
}

static void start_pool(void)
{
	const char *env = getenv("PIPELINE_POOL");
	pool_size = env ? atoi(env) : 0;
	if (pool_size <= 0)
		return;
	pthread_barrier_init(&pool_start, NULL, (unsigned)pool_size + 1);
	pthread_barrier_init(&pool_done, NULL, (unsigned)pool_size + 1);
	for (int i = 0; i < pool_size; i++) {
		pthread_t t;
		pthread_create(&t, NULL, pool_thread, NULL);
	}
}

static void decode_cpu(void)
{
	if (pool_size <= 0) {
		burn_cpu(work);
		return;
	}
	pthread_barrier_wait(&pool_start);
	burn_cpu(work / (pool_size + 1));
	pthread_barrier_wait(&pool_done);
}

static void read_full(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			exit(3);
		p += n;
		len -= (size_t)n;
	}
}

static void make_batch(int fd, void *buf, size_t chunk, off_t *off, off_t size)
{
	if (sleep_mode) {
		sleep_for(work / 1000.0);
		return;
	}
	if (!io_mode) {
		decode_cpu();
		return;
	}
	if (*off + (off_t)chunk > size)
		*off = 0;
	if (pread(fd, buf, chunk, *off) != (ssize_t)chunk)
		exit(4);
	*off += (off_t)chunk;
}

/* Workers' batches are smaller than PIPE_BUF, so their writes to the shared
 * pipe never interleave. */
static void worker(int id, int credits, int data)
{
	set_thread_name("pt_data_worker");
	int fd = -1;
	void *buf = NULL;
	size_t chunk = (size_t)work * 1024;
	off_t off = (off_t)id * (off_t)chunk * 8, size = 0;
	if (io_mode) {
		fd = open(file, O_RDONLY | O_DIRECT);
		if (fd < 0 || posix_memalign(&buf, 4096, chunk) != 0)
			exit(4);
		size = lseek(fd, 0, SEEK_END);
	} else {
		if (!sleep_mode)
			start_pool();
		sleep_for(work / 1000.0 * id / workers);
	}
	struct batch b = {.worker = id};
	char credit;
	while (read(credits, &credit, 1) == 1) {
		make_batch(fd, buf, chunk, &off, size);
		write_all(data, (const char *)&b, sizeof b);
		b.seq++;
	}
	exit(0);
}

int main(int argc, char **argv)
{
	if (argc < 6) {
		fprintf(stderr, "usage: %s WORKERS BATCHES WORK TRAIN_MS cpu|sleep|io [FILE]\n",
			argv[0]);
		return 2;
	}
	double born = now_s();
	workers = atoi(argv[1]);
	batches = atoi(argv[2]);
	work = atof(argv[3]);
	train_ms = atoi(argv[4]);
	io_mode = strcmp(argv[5], "io") == 0;
	sleep_mode = strcmp(argv[5], "sleep") == 0;
	file = argc > 6 ? argv[6] : NULL;
	if (workers < 1 || workers > MAX_WORKERS || (io_mode && !file))
		return 2;
	set_thread_name("trainer");
	int credit[MAX_WORKERS], queue[2];
	pid_t pids[MAX_WORKERS];
	if (pipe(queue) != 0)
		return 2;
	for (int w = 0; w < workers; w++) {
		int c[2];
		if (pipe(c) != 0)
			return 2;
		pids[w] = fork();
		if (pids[w] == 0) {
			close(c[1]);
			close(queue[0]);
			for (int o = 0; o < w; o++)
				close(credit[o]);
			worker(w, c[0], queue[1]);
		}
		close(c[0]);
		credit[w] = c[1];
	}
	close(queue[1]);
	int asked = 0;
	for (int k = 0; k < PREFETCH; k++)
		for (int w = 0; w < workers && asked < batches; w++, asked++)
			write_all(credit[w], "c", 1);
	double waited = 0;
	for (int i = 0; i < batches; i++) {
		struct batch b;
		double t0 = now_s();
		read_full(queue[0], &b, sizeof b);
		waited += now_s() - t0;
		if (asked < batches) {
			write_all(credit[b.worker], "c", 1);
			asked++;
		}
		burn_cpu(train_ms);
	}
	for (int w = 0; w < workers; w++)
		close(credit[w]);
	for (int w = 0; w < workers; w++)
		waitpid(pids[w], NULL, 0);
	emit("{\"role\":\"trainer\",\"tid\":%d,\"batches\":%d,\"data_wait_ns\":%.0f,"
	     "\"life_ns\":%.0f}",
	     truth_gettid(), batches, waited * 1e9, (now_s() - born) * 1e9);
	return 0;
}
