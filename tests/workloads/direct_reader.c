/*
 * Reads a file with O_DIRECT, so every byte comes from the disk, in chunks
 * of a given size; reports the bytes read, the time spent inside pread(),
 * and the process's read_bytes from /proc/self/io before and after.
 *
 * usage: direct_reader FILE CHUNK_KIB [DELAY_S]
 * DELAY_S idles before the first read so a recording window can open.
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
		fprintf(stderr, "usage: %s FILE CHUNK_KIB [DELAY_S]\n", argv[0]);
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
	double in_read = 0;
	for (off_t off = 0;; off += (off_t)chunk) {
		double t0 = now_s();
		ssize_t n = pread(fd, buf, chunk, off);
		in_read += now_s() - t0;
		if (n < 0) {
			perror("pread");
			return 2;
		}
		if (n == 0)
			break;
		bytes += (unsigned long long)n;
	}
	unsigned long long after = proc_read_bytes();
	emit("{\"tid\":%d,\"bytes\":%llu,\"read_ns\":%.0f,\"proc_read_bytes\":%llu}",
	     truth_gettid(), bytes, in_read * 1e9, after - before);
	close(fd);
	return 0;
}
