/* common/clock.c — thin wrappers over clock_gettime. */
#include "clock.h"

#include <time.h>

uint64_t clock_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double clock_now_s(void)
{
	return (double)clock_now_ns() * 1e-9;
}

int64_t clock_unix_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec;
}
