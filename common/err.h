/* common/err.h — error codes and a small diagnostic buffer.
 *
 * Every fallible function in aorta returns int: 0 on success or a negative
 * ERR_* code, and writes results through out-parameters. Where a caller needs
 * more than a code (a loader naming the bad tensor), the function also takes a
 * `struct diag *` (may be NULL) and fills it with one human-readable line.
 * Errors become HTTP statuses in exactly one place: api/.
 */
#ifndef AORTA_COMMON_ERR_H
#define AORTA_COMMON_ERR_H

#include <stddef.h>

enum {
	ERR_OK = 0,
	ERR_NOMEM = -1,       /* allocation failed */
	ERR_INVAL = -2,       /* invalid argument or input value */
	ERR_IO = -3,          /* read/write/open/mmap failed */
	ERR_FORMAT = -4,      /* malformed file or message */
	ERR_UNSUPPORTED = -5, /* well-formed but not supported */
	ERR_RANGE = -6,       /* value out of the allowed range */
	ERR_NOTFOUND = -7,    /* key, tensor, file or route missing */
	ERR_OVERFLOW = -8,    /* size arithmetic would overflow */
	ERR_FULL = -9,        /* queue or pool exhausted; try later */
	ERR_CANCELLED = -10,  /* the operation was cancelled */
	ERR_STATE = -11,      /* call not valid in the current state */
	ERR_TOO_LARGE = -12,  /* input over a configured limit */
	ERR_INTERNAL = -13,   /* a bug: an invariant did not hold */
	ERR_DEVICE = -14,     /* GPU / accelerator failure */
	ERR__COUNT = 15
};

/* Static string for an ERR_* code ("unknown error" for anything else). */
const char *err_str(int err);

/* One line of context for an error. Callers allocate it (stack is fine). */
struct diag {
	int code;
	char msg[512];
};

/* Format into d (if d is non-NULL) and return code, so a failing path can be
 * `return diag_set(d, ERR_FORMAT, "%s: bad dims", name);`. */
int diag_set(struct diag *d, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
