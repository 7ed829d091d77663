/*
 * demo_pipeline: the bundled demo for `cargo xtask demo`, imitating a
 * PyTorch training job whose input pipeline oversubscribes the CPU.
 *
 * A "trainer" process forks WORKERS DataLoader-style worker processes (main
 * thread "pt_data_worker"), each with POOL OpenMP-style pool threads
 * ("omp_worker") that burn a fixed amount of CPU per batch on fake decoding.
 * Workers send fixed-size batches through pipes; the trainer takes them in
 * order, "trains" on each for TRAIN_MS and waits for the next. On two cores
 * the 12 pool threads fight for the CPU, so the trainer spends most of its
 * time blocked on the pipe: the "GPU idles" picture tprof should explain.
 * Runs RUN_S seconds, then every process exits cleanly. The trainer prints
 * {"role":"trainer","batches","seconds"} at the end.
 */
#include "truth.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define WORKERS 4
#define POOL 3
#define RUN_S 5.0
#define TRAIN_MS 5
#define DECODE_CPU_MS 15
#define BATCH_BYTES (32 * 1024)

/* ---- worker process: pool threads decode, the main thread ships ---- */

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	unsigned long generation;
	int pending;
	int quit;
};

static double thread_cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Fixed CPU work, not wall time: under contention a batch takes longer,
 * as real decoding does. The thread CPU clock is a real system call (no
 * vDSO), so it is read only every ~50 us of work. */
static void fake_decode(void)
{
	volatile unsigned long sink = 0;
	double end = thread_cpu_s() + DECODE_CPU_MS / 1000.0;
	do {
		for (int i = 0; i < 50000; i++)
			sink += (unsigned long)i * 40503u;
	} while (thread_cpu_s() < end);
}

static void *omp_worker(void *arg)
{
	struct pool *p = arg;
	unsigned long seen = 0;
	set_thread_name("omp_worker");
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->quit && p->generation == seen)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->quit)
			break;
		seen = p->generation;
		pthread_mutex_unlock(&p->lock);
		fake_decode();
		pthread_mutex_lock(&p->lock);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Hands one batch to the pool and waits until every pool thread is done. */
static void decode_batch(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->generation++;
	p->pending = POOL;
	pthread_cond_broadcast(&p->work);
	while (p->pending > 0)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

static int send_batch(int fd, const char *batch)
{
	size_t off = 0;
	while (off < BATCH_BYTES) {
		ssize_t n = write(fd, batch + off, BATCH_BYTES - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1; /* EPIPE: the trainer is done */
		off += (size_t)n;
	}
	return 0;
}

static void worker_main(int out_fd, int index)
{
	static char batch[BATCH_BYTES];
	struct pool p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			 PTHREAD_COND_INITIALIZER, 0, 0, 0};
	pthread_t threads[POOL];
	set_thread_name("pt_data_worker");
	for (int i = 0; i < POOL; i++)
		pthread_create(&threads[i], NULL, omp_worker, &p);
	/* Safety net in case the trainer dies without closing the pipe. */
	double give_up = now_s() + RUN_S + 5.0;
	for (unsigned long n = 0; now_s() < give_up; n++) {
		decode_batch(&p);
		memset(batch, (int)(n + (unsigned long)index), sizeof batch);
		if (send_batch(out_fd, batch) < 0)
			break;
	}
	pthread_mutex_lock(&p.lock);
	p.quit = 1;
	pthread_cond_broadcast(&p.work);
	pthread_mutex_unlock(&p.lock);
	for (int i = 0; i < POOL; i++)
		pthread_join(threads[i], NULL);
	_exit(0);
}

/* ---- trainer process ---- */

static int recv_batch(int fd, char *batch)
{
	size_t off = 0;
	while (off < BATCH_BYTES) {
		ssize_t n = read(fd, batch + off, BATCH_BYTES - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

/* Forks the workers; each child keeps only its own pipe's write end, so a
 * worker sees EPIPE as soon as the trainer closes its read end. */
static void spawn_workers(int pipes[WORKERS][2], pid_t pids[WORKERS])
{
	for (int i = 0; i < WORKERS; i++)
		if (pipe(pipes[i]) != 0) {
			perror("pipe");
			exit(1);
		}
	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("fork");
			exit(1);
		}
		if (pids[i] > 0)
			continue;
		for (int j = 0; j < WORKERS; j++) {
			close(pipes[j][0]);
			if (j != i)
				close(pipes[j][1]);
		}
		worker_main(pipes[i][1], i);
	}
	for (int i = 0; i < WORKERS; i++)
		close(pipes[i][1]);
}

/* Takes batches in order, like DataLoader, and trains on each. */
static unsigned long train(int pipes[WORKERS][2])
{
	static char batch[BATCH_BYTES];
	unsigned long batches = 0;
	double end = now_s() + RUN_S;
	while (now_s() < end) {
		if (recv_batch(pipes[batches % WORKERS][0], batch) < 0)
			break;
		spin_for(TRAIN_MS / 1000.0);
		batches++;
	}
	return batches;
}

int main(void)
{
	int pipes[WORKERS][2];
	pid_t pids[WORKERS];
	signal(SIGPIPE, SIG_IGN);
	set_thread_name("trainer");
	double started = now_s();
	spawn_workers(pipes, pids);
	unsigned long batches = train(pipes);
	for (int i = 0; i < WORKERS; i++)
		close(pipes[i][0]);
	for (int i = 0; i < WORKERS; i++)
		waitpid(pids[i], NULL, 0);
	emit("{\"role\":\"trainer\",\"batches\":%lu,\"seconds\":%.3f}", batches, now_s() - started);
	return 0;
}
