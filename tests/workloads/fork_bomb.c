/*
 * fork_bomb N SECONDS: a fork bomb the test bounds. Forks N children, all
 * alive at once, each sleeping SECONDS before it exits; the parent reaps
 * them all. Prints {"pid","children":K} with K the forks that succeeded.
 */
#include "truth.h"

#include <sys/wait.h>

int main(int argc, char **argv)
{
	if (argc != 3 || atoi(argv[1]) <= 0) {
		fprintf(stderr, "usage: %s N SECONDS\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	double seconds = atof(argv[2]);
	int forked = 0;
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			sleep_for(seconds);
			_exit(0);
		}
		if (pid > 0)
			forked++;
	}
	emit("{\"pid\":%d,\"children\":%d}", getpid(), forked);
	while (wait(NULL) > 0)
		;
	return 0;
}
