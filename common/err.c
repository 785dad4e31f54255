/* common/err.c — err_str() and diag_set(). Tested in tests/unit/test_common.c. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const err_names[ERR__COUNT] = {
	[0] = "ok",
	[-ERR_NOMEM] = "out of memory",
	[-ERR_INVAL] = "invalid argument",
	[-ERR_IO] = "i/o error",
	[-ERR_FORMAT] = "malformed input",
	[-ERR_UNSUPPORTED] = "not supported",
	[-ERR_RANGE] = "value out of range",
	[-ERR_NOTFOUND] = "not found",
	[-ERR_OVERFLOW] = "size overflow",
	[-ERR_FULL] = "resource exhausted",
	[-ERR_CANCELLED] = "cancelled",
	[-ERR_STATE] = "invalid state",
	[-ERR_TOO_LARGE] = "too large",
	[-ERR_INTERNAL] = "internal error",
	[-ERR_DEVICE] = "device error",
};

const char *err_str(int err)
{
	if (err > 0 || err <= -ERR__COUNT)
		return "unknown error";
	return err_names[-err];
}

int diag_set(struct diag *d, int code, const char *fmt, ...)
{
	if (d) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(d->msg, sizeof d->msg, fmt, ap);
		va_end(ap);
		d->code = code;
	}
	return code;
}
