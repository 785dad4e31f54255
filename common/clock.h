/* common/clock.h — monotonic and wall clocks. Thread-safe. */
#ifndef AORTA_COMMON_CLOCK_H
#define AORTA_COMMON_CLOCK_H

#include <stdint.h>

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC); only differences mean anything. */
uint64_t clock_now_ns(void);
/* Monotonic time in seconds, as a double. */
double clock_now_s(void);
/* Wall-clock Unix time in seconds (for "created" fields and log stamps). */
int64_t clock_unix_s(void);

#endif
