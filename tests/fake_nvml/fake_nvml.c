/*
 * A fake libnvidia-ml.so for tprof's tests: exports the NVML functions
 * nvml-wrapper calls and replays a scripted utilization series against the
 * real clock, so tprof's real NVML path can be tested without a GPU.
 *
 * FAKE_NVML_SCRIPT   "label:UTIL:SECONDS,..." repeated from nvmlInit
 *                    (default "busy:95:2.0,idle:0:1.0").
 * FAKE_NVML_T0_FILE  if set, nvmlInit writes the script's start there
 *                    (CLOCK_REALTIME ns), so a test knows where the
 *                    script's boundaries fall.
 * FAKE_NVML_GPUS     number of GPUs (default 1).
 *
 * Build switches for degraded libraries: -DNO_SAMPLES leaves out
 * nvmlDeviceGetSamples, -DNO_PROCESS_UTIL nvmlDeviceGetProcessUtilization.
 *
 * Like a driver's sample buffer, nvmlDeviceGetSamples holds samples on a
 * fixed grid (every SAMPLE_US; real drivers use about 1/6 s, finer here so
 * the tests can check boundaries to 50 ms), each the average utilization
 * over the period it ends, with wall-clock µs timestamps, and only the last
 * BUFFER_SAMPLES of them. Per-process utilization reports every child of
 * the process that loaded the library (tprof's launched command) as using
 * the GPU at the script's current value.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
};
enum { NVML_GPU_UTILIZATION_SAMPLES = 1, NVML_MEMORY_UTILIZATION_SAMPLES = 2 };
enum { NVML_VALUE_TYPE_UNSIGNED_INT = 1 };
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };

typedef struct fake_device {
	unsigned int index;
} *nvmlDevice_t;

typedef struct {
	unsigned int gpu;
	unsigned int memory;
} nvmlUtilization_t;

typedef struct {
	unsigned int version;
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;

typedef union {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	long long sllVal;
	unsigned short usVal;
} nvmlValue_t;

typedef struct {
	unsigned long long timeStamp;
	nvmlValue_t sampleValue;
} nvmlSample_t;

typedef struct {
	unsigned int pid;
	unsigned long long timeStamp;
	unsigned int smUtil;
	unsigned int memUtil;
	unsigned int encUtil;
	unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

#define SAMPLE_US 20000ULL
#define BUFFER_SAMPLES 120
#define MAX_SEGMENTS 32
#define MAX_GPUS 8
#define GIB (1ULL << 30)
#define MIB (1ULL << 20)

struct segment {
	unsigned int util;
	unsigned long long len_us;
};

static struct segment script[MAX_SEGMENTS];
static int segments;
static unsigned long long script_len_us;
static unsigned long long t0_us;
static int initialized;
static unsigned int gpu_count = 1;
static struct fake_device devices[MAX_GPUS];

static unsigned long long realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static unsigned long long now_us(void)
{
	return realtime_ns() / 1000;
}

static void parse_script(const char *text)
{
	char *copy = strdup(text), *save = NULL;
	segments = 0;
	script_len_us = 0;
	for (char *item = strtok_r(copy, ",", &save); item && segments < MAX_SEGMENTS;
	     item = strtok_r(NULL, ",", &save)) {
		unsigned int util;
		double seconds;
		if (sscanf(item, "%*[^:]:%u:%lf", &util, &seconds) != 2 || seconds <= 0)
			continue;
		script[segments].util = util;
		script[segments].len_us = (unsigned long long)(seconds * 1e6 + 0.5);
		script_len_us += script[segments].len_us;
		segments++;
	}
	free(copy);
}

/* The script's utilization at wall-clock time t (µs). */
static unsigned int util_at(unsigned long long t)
{
	if (segments == 0 || t < t0_us)
		return 0;
	unsigned long long phase = (t - t0_us) % script_len_us;
	for (int i = 0; i < segments; i++) {
		if (phase < script[i].len_us)
			return script[i].util;
		phase -= script[i].len_us;
	}
	return 0;
}

nvmlReturn_t nvmlInit_v2(void)
{
	const char *text = getenv("FAKE_NVML_SCRIPT");
	parse_script(text ? text : "busy:95:2.0,idle:0:1.0");
	const char *gpus = getenv("FAKE_NVML_GPUS");
	if (gpus) {
		gpu_count = (unsigned int)atoi(gpus);
		if (gpu_count > MAX_GPUS)
			gpu_count = MAX_GPUS;
	}
	for (unsigned int i = 0; i < MAX_GPUS; i++)
		devices[i].index = i;
	unsigned long long t0_ns = realtime_ns();
	t0_us = t0_ns / 1000;
	const char *t0_file = getenv("FAKE_NVML_T0_FILE");
	if (t0_file) {
		FILE *f = fopen(t0_file, "w");
		if (f) {
			fprintf(f, "%llu\n", t0_us * 1000);
			fclose(f);
		}
	}
	initialized = 1;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
	initialized = 0;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	default:
		return "Fake NVML error";
	}
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	snprintf(version, length, "999.99-fake");
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	*count = gpu_count;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (index >= gpu_count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	snprintf(name, length, "Fake GPU %u", device->index);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util)
{
	(void)device;
	util->gpu = util_at(now_us());
	util->memory = util->gpu / 2;
	return NVML_SUCCESS;
}

/* Memory in use follows utilization: 1 GiB plus 64 MiB per percent. */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	(void)device;
	memory->total = 16 * GIB;
	memory->reserved = 0;
	memory->used = GIB + util_at(now_us()) * 64 * MIB;
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}

#ifndef NO_SAMPLES
/*
 * Samples k = first..last on the grid t0 + k * SAMPLE_US that are newer
 * than last_seen, no newer than now and still in the buffer.
 */
static void sample_range(unsigned long long last_seen, unsigned long long *first,
			 unsigned long long *last)
{
	unsigned long long now = now_us();
	*last = now < t0_us ? 0 : (now - t0_us) / SAMPLE_US;
	*first = last_seen < t0_us ? 1 : (last_seen - t0_us) / SAMPLE_US + 1;
	if (*last >= BUFFER_SAMPLES && *first < *last - BUFFER_SAMPLES + 1)
		*first = *last - BUFFER_SAMPLES + 1;
	if (*first < 1)
		*first = 1;
}

nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, int type,
				  unsigned long long last_seen, int *value_type,
				  unsigned int *count, nvmlSample_t *samples)
{
	(void)device;
	if (type != NVML_GPU_UTILIZATION_SAMPLES && type != NVML_MEMORY_UTILIZATION_SAMPLES)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned long long first, last;
	sample_range(last_seen, &first, &last);
	if (last < first)
		return NVML_ERROR_NOT_FOUND;
	unsigned int available = (unsigned int)(last - first + 1);
	*value_type = NVML_VALUE_TYPE_UNSIGNED_INT;
	if (!samples) {
		*count = available;
		return NVML_SUCCESS;
	}
	unsigned int n = available < *count ? available : *count;
	for (unsigned int i = 0; i < n; i++) {
		unsigned long long t = t0_us + (first + i) * SAMPLE_US;
		/* The period's value: the script at its middle. */
		unsigned int util = util_at(t - SAMPLE_US / 2);
		samples[i].timeStamp = t;
		samples[i].sampleValue.uiVal =
			type == NVML_GPU_UTILIZATION_SAMPLES ? util : util / 2;
	}
	*count = n;
	return NVML_SUCCESS;
}
#endif

#ifndef NO_PROCESS_UTIL
/* Up to max children of this process, from /proc. */
static unsigned int children(unsigned int *pids, unsigned int max)
{
	unsigned int n = 0;
	DIR *proc = opendir("/proc");
	if (!proc)
		return 0;
	struct dirent *entry;
	while ((entry = readdir(proc)) && n < max) {
		int pid = atoi(entry->d_name);
		if (pid <= 0)
			continue;
		char path[64], buf[512];
		snprintf(path, sizeof path, "/proc/%d/stat", pid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		size_t len = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[len] = 0;
		char *end = strrchr(buf, ')');
		int ppid;
		if (end && sscanf(end + 1, " %*c %d", &ppid) == 1 && ppid == getpid())
			pids[n++] = (unsigned int)pid;
	}
	closedir(proc);
	return n;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
					     nvmlProcessUtilizationSample_t *util,
					     unsigned int *count,
					     unsigned long long last_seen)
{
	(void)device;
	(void)last_seen;
	unsigned int pids[64];
	unsigned int n = children(pids, 64);
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	if (!util) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	if (n > *count)
		n = *count;
	unsigned long long now = now_us();
	for (unsigned int i = 0; i < n; i++) {
		memset(&util[i], 0, sizeof util[i]);
		util[i].pid = pids[i];
		util[i].timeStamp = now;
		util[i].smUtil = util_at(now);
		util[i].memUtil = util[i].smUtil / 2;
	}
	*count = n;
	return NVML_SUCCESS;
}
#endif

/* KB/s, following utilization. */
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter, unsigned int *value)
{
	(void)device;
	unsigned int util = util_at(now_us());
	*value = counter == NVML_PCIE_UTIL_RX_BYTES ? util * 1000 : util * 500;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *clock)
{
	(void)device;
	(void)type;
	*clock = 1410;
	return NVML_SUCCESS;
}

/* mW. */
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	(void)device;
	*power = 60000 + util_at(now_us()) * 2000;
	return NVML_SUCCESS;
}
