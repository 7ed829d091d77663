/*
 * jit_spin SECONDS: "JIT-compiles" a spin loop into anonymous executable
 * memory, lists it in /tmp/perf-<pid>.map as jit_spin_loop the way JITs
 * (and CPython 3.12's perf trampoline) do, and runs it for SECONDS. The map
 * file is left behind, as JITs leave it; the test removes it. Prints
 * {"role":"done","pid","map"} at the end. x86-64 only.
 */
#include "truth.h"

#include <sys/mman.h>

/* mov ecx, 50000000; 1: dec ecx; jnz 1b; ret */
static const unsigned char code[] = {0xb9, 0x80, 0xf0, 0xfa, 0x02, 0xff, 0xc9, 0x75, 0xfc, 0xc3};

int main(int argc, char **argv)
{
	if (argc != 2 || atof(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(page, code, sizeof code);
	char map[64];
	snprintf(map, sizeof map, "/tmp/perf-%d.map", getpid());
	FILE *f = fopen(map, "w");
	if (!f) {
		perror(map);
		return 1;
	}
	fprintf(f, "%lx %zx jit_spin_loop\n", (unsigned long)page, sizeof code);
	fclose(f);
	void (*loop)(void) = (void (*)(void))page;
	double end = now_s() + atof(argv[1]);
	while (now_s() < end)
		loop();
	emit("{\"role\":\"done\",\"pid\":%d,\"map\":\"%s\"}", getpid(), map);
	return 0;
}
