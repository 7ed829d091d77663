/*
 * Reads a file with O_DIRECT, so every byte comes from the disk, in chunks
 * of a given size; reports the bytes read, the time spent inside pread()
 * and how much of it the thread was blocked (neither on a CPU nor waiting
 * for one, by its schedstat), and the process's read_bytes in
 * /proc/self/io: its growth during the reads, and its total (which also
 * counts what exec and the loader read).
 *
 * usage: direct_reader FILE CHUNK_KIB [DELAY_S [TAIL_S [PASSES]]]
 * DELAY_S idles before the first read so a recording window can open;
 * TAIL_S idles after the last one, so the IO sits inside a fixed window;
 * PASSES reads the file that many times (O_DIRECT: each pass hits the disk);
 * written as SECONDS followed by "s" ("3s"), it reads pass after pass until
 * that long has passed, however fast the disk.
 */
#include "truth.h"

#include <errno.h>

static unsigned long long proc_read_bytes(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char key[64];
	unsigned long long value, result = 0;
	if (!f) {
		perror("/proc/self/io");
		exit(2);
	}
	while (fscanf(f, "%63[^:]: %llu\n", key, &value) == 2)
		if (strcmp(key, "read_bytes") == 0)
			result = value;
	fclose(f);
	return result;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s FILE CHUNK_KIB [DELAY_S [TAIL_S [PASSES]]]\n", argv[0]);
		return 2;
	}
	size_t chunk = (size_t)atoi(argv[2]) * 1024;
	if (argc > 3)
		sleep_for(atof(argv[3]));
	set_thread_name("direct-reader");
	int fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	void *buf;
	if (posix_memalign(&buf, 4096, chunk) != 0)
		return 2;
	unsigned long long before = proc_read_bytes(), bytes = 0;
	double in_read = 0, on_cpu_in_read = 0, blocked_in_read = 0;
	int passes = argc > 5 ? atoi(argv[5]) : 1;
	double until = 0;
	if (argc > 5 && argv[5][0] && argv[5][strlen(argv[5]) - 1] == 's') {
		passes = 0;
		until = now_s() + atof(argv[5]);
	}
	for (off_t off = 0, pass = 0;; off += (off_t)chunk) {
		struct schedstat s0 = read_schedstat();
		double t0 = now_s();
		ssize_t n = pread(fd, buf, chunk, off);
		double wall = now_s() - t0;
		struct schedstat s1 = read_schedstat();
		in_read += wall;
		on_cpu_in_read += (s1.on_cpu_ns - s0.on_cpu_ns) / 1e9;
		/* Off the CPU and not waiting for one: blocked. */
		blocked_in_read += wall - (s1.on_cpu_ns - s0.on_cpu_ns) / 1e9 -
				   (s1.run_delay_ns - s0.run_delay_ns) / 1e9;
		if (n < 0) {
			perror("pread");
			return 2;
		}
		if (n == 0) {
			++pass;
			if (until > 0 ? now_s() >= until : pass >= passes)
				break;
			off = -(off_t)chunk;
			continue;
		}
		bytes += (unsigned long long)n;
	}
	unsigned long long after = proc_read_bytes();
	struct schedstat life = read_schedstat();
	emit("{\"tid\":%d,\"bytes\":%llu,\"read_ns\":%.0f,\"read_on_cpu_ns\":%.0f,\"read_blocked_ns\":%.0f,"
	     "\"proc_read_bytes\":%llu,\"proc_read_bytes_total\":%llu,"
	     "\"end_on_cpu_ns\":%llu,\"end_run_delay_ns\":%llu}",
	     truth_gettid(), bytes, in_read * 1e9, on_cpu_in_read * 1e9, blocked_in_read * 1e9, after - before, after,
	     life.on_cpu_ns, life.run_delay_ns);
	close(fd);
	if (argc > 4)
		sleep_for(atof(argv[4]));
	return 0;
}
