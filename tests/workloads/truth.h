/*
 * Shared helpers for the test workloads: ground truth from the kernel's
 * own per-thread accounting (/proc/self/task/<tid>/schedstat) and one JSON
 * object per line on stdout, and also appended to $TPROF_TRUTH_FILE when it
 * is set (tprof mixes the child's stdout with its report, so tests read the
 * file instead).
 *
 * Header-only so each workload is one `gcc file.c` invocation.
 */
#ifndef TPROF_TRUTH_H
#define TPROF_TRUTH_H

#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct schedstat {
	unsigned long long on_cpu_ns;
	unsigned long long run_delay_ns;
	unsigned long long timeslices;
};

static inline pid_t truth_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The calling thread's schedstat; exits on failure since a workload without
 * ground truth is useless to the tests. */
static inline struct schedstat read_schedstat(void)
{
	char path[64];
	struct schedstat s = {0};
	snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", truth_gettid());
	FILE *f = fopen(path, "r");
	if (!f || fscanf(f, "%llu %llu %llu", &s.on_cpu_ns, &s.run_delay_ns, &s.timeslices) != 3) {
		perror(path);
		exit(2);
	}
	fclose(f);
	return s;
}

static inline void write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* One JSON line, written with single write() calls rather than stdio so
 * that lines from several threads and processes never interleave and no
 * buffered output is duplicated across fork(). */
__attribute__((format(printf, 1, 2)))
static inline void emit(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof line - 1)
		return;
	line[n++] = '\n';
	write_all(STDOUT_FILENO, line, (size_t)n);
	const char *file = getenv("TPROF_TRUTH_FILE");
	if (file && *file) {
		int fd = open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
		if (fd >= 0) {
			write_all(fd, line, (size_t)n);
			close(fd);
		}
	}
}

static inline void set_thread_name(const char *name)
{
	prctl(PR_SET_NAME, name, 0, 0, 0);
}

/* Pure CPU loop for `seconds` of wall time; the clock is read only every
 * 1000 iterations so the thread stays in user space. */
static inline void spin_for(double seconds)
{
	volatile unsigned long sink = 0;
	double end = now_s() + seconds;
	do {
		for (int i = 0; i < 1000; i++)
			sink += (unsigned long)i * 2654435761u;
	} while (now_s() < end);
}

static inline void sleep_for(double seconds)
{
	struct timespec ts = {.tv_sec = (time_t)seconds};
	ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0)
		;
}

#endif
