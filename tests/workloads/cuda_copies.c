/*
 * A training loop's host-to-device copies through a CUDA runtime library
 * loaded with dlopen from $TPROF_CUDART (tests/fake_cudart, or the real
 * libcudart of the nvidia-cuda-runtime wheel).
 *
 *   cuda_copies pageable STEPS      malloc'd batches, cudaMemcpyAsync +
 *                                   cudaStreamSynchronize per tensor
 *                                   (pin_memory=False)
 *   cuda_copies pinned-sync STEPS   pinned batches, each copy followed by a
 *                                   sync (pin_memory=True, .to(device)
 *                                   without non_blocking=True)
 *   cuda_copies pinned-async STEPS  pinned batches, copies without syncs
 *                                   (the pair used right)
 *   cuda_copies real                one call of every probed function with
 *                                   known arguments (no GPU: they fail, and
 *                                   the return codes are ground truth too)
 *   cuda_copies bench CALLS         per-call cost of cudaLaunchKernel and
 *                                   cudaStreamSynchronize
 *   cuda_copies overlap THREADS     THREADS threads each make 20 pageable
 *                                   1 MiB cudaMemcpy calls at once, so
 *                                   calls are in flight together
 *   cuda_copies abandon             a thread waits in cudaStreamSynchronize
 *                                   for a 30 s kernel while the process
 *                                   exits: a call that never returns
 *
 * Each step waits 2 ms "for data", copies x (4 MiB; pinned through
 * cudaMallocHost) and y (256 KiB; pinned through cudaHostRegister), launches
 * 20 kernels and reads the loss back (a 4-byte device-to-host copy and a
 * sync, as loss.item() does). Ground truth, one JSON line at the end: the
 * copies, bytes and pointers, and the time the H2D copies (with the syncs
 * that follow them) blocked this thread, timed around the calls.
 *
 * With CUDA_FORK=1 a forked child loads the library and does the work
 * (the library appears in a process tprof did not start, after tracing
 * began); the parent only waits for it.
 *
 * Before its first call the program waits until tprof's uprobes are in
 * place (the first byte of each function turns into int3), unless
 * WAIT_FOR_PROBES=0.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>

#include "truth.h"

typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*memcpy_async_fn)(void *, const void *, size_t, int, void *);
typedef int (*ptr_fn)(void *);
typedef int (*void_fn)(void);
typedef int (*host_alloc_fn)(void **, size_t, unsigned);
typedef int (*malloc_host_fn)(void **, size_t);
typedef int (*host_register_fn)(void *, size_t, unsigned);
typedef struct {
	unsigned x, y, z;
} dim3;
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);

static struct {
	memcpy_fn memcpy;
	memcpy_async_fn memcpy_async;
	ptr_fn stream_sync;
	void_fn device_sync;
	ptr_fn event_sync;
	host_alloc_fn host_alloc;
	malloc_host_fn malloc_host;
	host_register_fn host_register;
	ptr_fn free_host;
	ptr_fn host_unregister;
	launch_fn launch;
} cuda;

enum { H2D = 1, D2H = 2 };
/* cudaStreamPerThread: a handle the real runtime accepts without a device. */
#define STREAM ((void *)0x2)
#define X_BYTES (4u << 20)
#define Y_BYTES (256u << 10)
#define KERNELS 20

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "%s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

static void load(void)
{
	const char *path = getenv("TPROF_CUDART");
	void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
	if (!lib) {
		fprintf(stderr, "set TPROF_CUDART to a libcudart: %s\n", path ? dlerror() : "unset");
		exit(2);
	}
	cuda.memcpy = (memcpy_fn)sym(lib, "cudaMemcpy");
	cuda.memcpy_async = (memcpy_async_fn)sym(lib, "cudaMemcpyAsync");
	cuda.stream_sync = (ptr_fn)sym(lib, "cudaStreamSynchronize");
	cuda.device_sync = (void_fn)sym(lib, "cudaDeviceSynchronize");
	cuda.event_sync = (ptr_fn)sym(lib, "cudaEventSynchronize");
	cuda.host_alloc = (host_alloc_fn)sym(lib, "cudaHostAlloc");
	cuda.malloc_host = (malloc_host_fn)sym(lib, "cudaMallocHost");
	cuda.host_register = (host_register_fn)sym(lib, "cudaHostRegister");
	cuda.free_host = (ptr_fn)sym(lib, "cudaFreeHost");
	cuda.host_unregister = (ptr_fn)sym(lib, "cudaHostUnregister");
	cuda.launch = (launch_fn)sym(lib, "cudaLaunchKernel");
}

/* Waits (at most 10 s) until a uprobe's breakpoint (int3) sits at the
 * start of every function this program calls, so none is made before
 * tprof can see it. tprof attaches the functions one after another, each
 * entry with its return, so all entries probed means all returns too. */
static int wait_for_probes(void)
{
	const char *wait = getenv("WAIT_FOR_PROBES");
	if (wait && strcmp(wait, "0") == 0)
		return 0;
	void *fns[] = {
		(void *)cuda.memcpy,	    (void *)cuda.memcpy_async, (void *)cuda.stream_sync,
		(void *)cuda.device_sync,   (void *)cuda.event_sync,   (void *)cuda.host_alloc,
		(void *)cuda.malloc_host,   (void *)cuda.host_register, (void *)cuda.free_host,
		(void *)cuda.host_unregister, (void *)cuda.launch,
	};
	for (int i = 0; i < 1000; i++) {
		int all = 1;
		for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++)
			all &= *(volatile const unsigned char *)fns[f] == 0xcc;
		if (all)
			return 1;
		sleep_for(0.01);
	}
	return 0;
}

static void fill(unsigned char *p, size_t n, unsigned char seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed + i);
}

static void check(int rc, const char *what)
{
	if (rc != 0) {
		fprintf(stderr, "%s failed: %d\n", what, rc);
		exit(3);
	}
}

/* One tensor's .to(device): the copy, and the sync when `sync`. Returns
 * the seconds it blocked the caller. */
static double to_device(void *dst, const void *src, size_t n, int sync)
{
	double t0 = now_s();
	check(cuda.memcpy_async(dst, src, n, H2D, STREAM), "cudaMemcpyAsync");
	if (sync)
		check(cuda.stream_sync(STREAM), "cudaStreamSynchronize");
	return now_s() - t0;
}

static int train(const char *mode, int steps)
{
	int pinned = strcmp(mode, "pageable") != 0;
	int sync = strcmp(mode, "pinned-async") != 0;
	unsigned char *x, *y;
	if (pinned) {
		check(cuda.malloc_host((void **)&x, X_BYTES), "cudaMallocHost");
		y = malloc(Y_BYTES);
		check(cuda.host_register(y, Y_BYTES, 0), "cudaHostRegister");
	} else {
		x = malloc(X_BYTES);
		y = malloc(Y_BYTES);
	}
	unsigned char *dx = malloc(X_BYTES), *dy = malloc(Y_BYTES);
	float loss = 0, dloss = 1.5f;
	double blocked = 0, sync_s = 0;
	for (int step = 0; step < steps; step++) {
		sleep_for(0.002); /* waiting for the DataLoader */
		fill(x, 64, (unsigned char)step);
		fill(y, 64, (unsigned char)(step + 1));
		blocked += to_device(dx, x, X_BYTES, sync);
		blocked += to_device(dy, y, Y_BYTES, sync);
		for (int k = 0; k < KERNELS; k++) {
			dim3 grid = {1, 1, 1}, block = {256, 1, 1};
			check(cuda.launch((const void *)train, grid, block, NULL, 0, STREAM),
			      "cudaLaunchKernel");
		}
		check(cuda.memcpy_async(&loss, &dloss, sizeof loss, D2H, STREAM), "cudaMemcpyAsync");
		double t0 = now_s();
		check(cuda.stream_sync(STREAM), "cudaStreamSynchronize");
		sync_s += now_s() - t0;
		if (dx[0] != (unsigned char)step || dy[0] != (unsigned char)(step + 1)) {
			fprintf(stderr, "step %d: the copies did not arrive\n", step);
			return 3;
		}
	}
	emit("{\"mode\":\"%s\",\"steps\":%d,\"h2d_copies\":%d,\"h2d_bytes\":%llu,"
	     "\"pinned\":%s,\"x\":\"%p\",\"y\":\"%p\",\"blocked_s\":%.6f,\"launches\":%d,"
	     "\"stream_syncs\":%d,\"tid\":%d}",
	     mode, steps, 2 * steps, (unsigned long long)(X_BYTES + Y_BYTES) * (unsigned)steps,
	     pinned ? "true" : "false", (void *)x, (void *)y, blocked, KERNELS * steps,
	     steps * (sync ? 3 : 1), truth_gettid());
	(void)sync_s;
	if (pinned) {
		check(cuda.free_host(x), "cudaFreeHost");
		check(cuda.host_unregister(y), "cudaHostUnregister");
		free(y);
	}
	return 0;
}

/* Every probed function once, with arguments the test can recognize. */
static int real(void)
{
	static unsigned char src[1 << 16], dst[1 << 16];
	void *host = (void *)0x5a5a5a5a5a5a5a5a;
	void *host2 = (void *)0x6b6b6b6b6b6b6b6b;
	int r_malloc_host = cuda.malloc_host(&host, 1 << 20);
	int r_host_alloc = cuda.host_alloc(&host2, 1 << 21, 0);
	int r_register = cuda.host_register(src, sizeof src, 0);
	int r_memcpy = cuda.memcpy(dst, src, 12345, H2D);
	int r_memcpy_async = cuda.memcpy_async(dst, src, 54321, D2H, STREAM);
	int r_stream_sync = cuda.stream_sync(STREAM);
	int r_device_sync = cuda.device_sync();
	int r_event_sync = cuda.event_sync(NULL);
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	int r_launch = cuda.launch((const void *)real, grid, block, NULL, 0, STREAM);
	int r_unregister = cuda.host_unregister(src);
	int r_free_host = cuda.free_host(NULL);
	emit("{\"mode\":\"real\",\"tid\":%d,\"src\":\"%p\",\"dst\":\"%p\",\"stream\":\"%p\","
	     "\"host_after\":\"%p\",\"host2_after\":\"%p\","
	     "\"ret\":{\"cudaMallocHost\":%d,\"cudaHostAlloc\":%d,\"cudaHostRegister\":%d,"
	     "\"cudaMemcpy\":%d,\"cudaMemcpyAsync\":%d,\"cudaStreamSynchronize\":%d,"
	     "\"cudaDeviceSynchronize\":%d,\"cudaEventSynchronize\":%d,\"cudaLaunchKernel\":%d,"
	     "\"cudaHostUnregister\":%d,\"cudaFreeHost\":%d}}",
	     truth_gettid(), (void *)src, (void *)dst, STREAM, host, host2, r_malloc_host,
	     r_host_alloc, r_register, r_memcpy, r_memcpy_async, r_stream_sync, r_device_sync,
	     r_event_sync, r_launch, r_unregister, r_free_host);
	return 0;
}

/* Mean wall time of one call of cudaLaunchKernel and of
 * cudaStreamSynchronize (an idle stream: the fake returns at once). */
static int bench(int calls)
{
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	double t0 = now_s();
	for (int i = 0; i < calls; i++)
		cuda.launch((const void *)bench, grid, block, NULL, 0, STREAM);
	double t1 = now_s();
	cuda.device_sync();
	double t2 = now_s();
	for (int i = 0; i < calls; i++)
		cuda.stream_sync((void *)0x3);
	double t3 = now_s();
	emit("{\"mode\":\"bench\",\"calls\":%d,\"launch_ns\":%.1f,\"stream_sync_ns\":%.1f}", calls,
	     (t1 - t0) * 1e9 / calls, (t3 - t2) * 1e9 / calls);
	return 0;
}

#define OVERLAP_CALLS 20

static void *overlap_thread(void *arg)
{
	(void)arg;
	static unsigned char dst[1 << 20];
	unsigned char *src = malloc(1 << 20);
	fill(src, 64, 1);
	for (int i = 0; i < OVERLAP_CALLS; i++)
		check(cuda.memcpy(dst, src, 1 << 20, H2D), "cudaMemcpy");
	free(src);
	return NULL;
}

/* THREADS threads copying at once; ground truth: how many calls. */
static int overlap(int threads)
{
	pthread_t tids[64];
	threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
	for (int t = 0; t < threads; t++)
		pthread_create(&tids[t], NULL, overlap_thread, NULL);
	for (int t = 0; t < threads; t++)
		pthread_join(tids[t], NULL);
	emit("{\"mode\":\"overlap\",\"memcpy_calls\":%d}", threads * OVERLAP_CALLS);
	return 0;
}

static void *abandoned_thread(void *arg)
{
	(void)arg;
	dim3 grid = {1, 1, 1}, block = {32, 1, 1};
	cuda.launch((const void *)abandoned_thread, grid, block, NULL, 0, STREAM);
	cuda.stream_sync(STREAM);
	return NULL;
}

/* A call in progress when its thread dies: the process exits while a
 * thread waits for a 30 s kernel (FAKE_CUDART_KERNEL_US is set for it). */
static int abandon(void)
{
	setenv("FAKE_CUDART_KERNEL_US", "30000000", 1);
	pthread_t tid;
	pthread_create(&tid, NULL, abandoned_thread, NULL);
	sleep_for(0.5);
	emit("{\"mode\":\"abandon\",\"unreturned\":1}");
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s pageable|pinned-sync|pinned-async|real|bench|overlap|abandon [N]\n",
			argv[0]);
		return 2;
	}
	const char *in_child = getenv("CUDA_FORK");
	if (in_child && strcmp(in_child, "1") == 0) {
		pid_t child = fork();
		if (child < 0) {
			perror("fork");
			return 2;
		}
		if (child > 0) {
			int status;
			if (waitpid(child, &status, 0) != child)
				return 2;
			return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
		}
	}
	load();
	int probed = wait_for_probes();
	emit("{\"probed\":%s}", probed ? "true" : "false");
	int n = argc > 2 ? atoi(argv[2]) : 30;
	if (strcmp(argv[1], "real") == 0)
		return real();
	if (strcmp(argv[1], "bench") == 0)
		return bench(n);
	if (strcmp(argv[1], "overlap") == 0)
		return overlap(n);
	if (strcmp(argv[1], "abandon") == 0)
		return abandon();
	return train(argv[1], n);
}
