/*
 * A stand-in for libcudart for tprof's CUDA tests: it exports the runtime
 * functions tprof probes, with their real signatures, and spends the time a
 * GPU would make the caller spend, by sleeping:
 *
 * - cudaMemcpy copies synchronously: it sleeps for the transfer.
 * - cudaMemcpyAsync from pageable host memory is staged synchronously by
 *   the real driver, so it sleeps for the transfer too; from pinned memory
 *   (cudaMallocHost, cudaHostAlloc, cudaHostRegister) it only queues the
 *   transfer on its stream and returns at once.
 * - cudaLaunchKernel queues FAKE_CUDART_KERNEL_US of work on its stream.
 * - cudaStreamSynchronize sleeps until its stream's queue is done;
 *   cudaDeviceSynchronize until every stream's is; cudaEventSynchronize
 *   until the default stream's is (events are not modelled further).
 *
 * A transfer takes FAKE_CUDART_US_PER_MIB microseconds per MiB (default
 * 1000, about PCIe 3 x16's 1 GB/s staging rate for pageable memory). Memory
 * "on the device" is plain malloc'd memory; copies really copy, so a
 * program can check its data. Streams are small integers (0 = default).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int cudaError_t;
typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef struct {
	unsigned x, y, z;
} dim3;

enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum { H2H = 0, H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };

#define MAX_PINNED 1024
#define MAX_STREAMS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uintptr_t start, end;
} pinned[MAX_PINNED];
/* CLOCK_MONOTONIC ns at which each stream's queued work is done. */
static uint64_t stream_done[MAX_STREAMS];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	if (t <= now_ns())
		return;
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u)};
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 10) : fallback;
}

static uint64_t transfer_ns(size_t bytes)
{
	return (uint64_t)((double)bytes * env_u64("FAKE_CUDART_US_PER_MIB", 1000) * 1000.0 / (1 << 20));
}

static unsigned stream_index(cudaStream_t stream)
{
	return (unsigned)((uintptr_t)stream % MAX_STREAMS);
}

static int is_pinned(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	int found = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_PINNED && !found; i++)
		found = pinned[i].end && pinned[i].start <= a && a < pinned[i].end;
	pthread_mutex_unlock(&lock);
	return found;
}

static cudaError_t pin(void *p, size_t size)
{
	cudaError_t rc = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_PINNED; i++) {
		if (!pinned[i].end) {
			pinned[i].start = (uintptr_t)p;
			pinned[i].end = (uintptr_t)p + size;
			rc = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

static cudaError_t unpin(void *p)
{
	cudaError_t rc = cudaErrorInvalidValue;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_PINNED; i++) {
		if (pinned[i].end && pinned[i].start == (uintptr_t)p) {
			pinned[i].start = pinned[i].end = 0;
			rc = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Queues `ns` of work on a stream; returns when that work will be done. */
static uint64_t enqueue(cudaStream_t stream, uint64_t ns)
{
	uint64_t now = now_ns();
	pthread_mutex_lock(&lock);
	uint64_t *done = &stream_done[stream_index(stream)];
	*done = (*done > now ? *done : now) + ns;
	uint64_t t = *done;
	pthread_mutex_unlock(&lock);
	return t;
}

/* The host side of a copy, for the pinned check. */
static const void *host_side(void *dst, const void *src, int kind)
{
	switch (kind) {
	case H2D:
		return src;
	case D2H:
		return dst;
	default:
		return NULL;
	}
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
	if (kind < H2H || kind > DEFAULT)
		return cudaErrorInvalidValue;
	/* Waits for the default stream's work, then copies. */
	sleep_until(enqueue(NULL, transfer_ns(count)));
	memmove(dst, src, count);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
			    cudaStream_t stream)
{
	if (kind < H2H || kind > DEFAULT)
		return cudaErrorInvalidValue;
	const void *host = host_side(dst, src, kind);
	uint64_t done = enqueue(stream, transfer_ns(count));
	if (host && !is_pinned(host))
		sleep_until(done); /* pageable: staged synchronously */
	memmove(dst, src, count);
	return cudaSuccess;
}

/* Exported functions never call each other: in a shared library such a
 * call goes through the PLT, and tprof would see two calls where a program
 * made one. Shared code lives in static helpers. */
static cudaError_t stream_sync(cudaStream_t stream)
{
	sleep_until(enqueue(stream, 0));
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return stream_sync(stream);
}

cudaError_t cudaDeviceSynchronize(void)
{
	uint64_t latest = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_STREAMS; i++)
		latest = stream_done[i] > latest ? stream_done[i] : latest;
	pthread_mutex_unlock(&lock);
	sleep_until(latest);
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	(void)event;
	return stream_sync(NULL);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
			     size_t shared_mem, cudaStream_t stream)
{
	(void)func, (void)grid, (void)block, (void)args, (void)shared_mem;
	enqueue(stream, env_u64("FAKE_CUDART_KERNEL_US", 100) * 1000);
	return cudaSuccess;
}

static cudaError_t host_alloc(void **ptr, size_t size)
{
	void *p = malloc(size ? size : 1);
	if (!p)
		return cudaErrorMemoryAllocation;
	cudaError_t rc = pin(p, size);
	if (rc != cudaSuccess) {
		free(p);
		return rc;
	}
	*ptr = p;
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned flags)
{
	(void)flags;
	return host_alloc(ptr, size);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return host_alloc(ptr, size);
}

cudaError_t cudaFreeHost(void *ptr)
{
	cudaError_t rc = unpin(ptr);
	if (rc == cudaSuccess)
		free(ptr);
	return rc;
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned flags)
{
	(void)flags;
	return pin(ptr, size);
}

cudaError_t cudaHostUnregister(void *ptr)
{
	return unpin(ptr);
}
