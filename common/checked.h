/* common/checked.h — overflow-checked size arithmetic.
 *
 * Every size computed from untrusted input (file headers, request bodies)
 * goes through these. Each returns 0 and writes *out, or ERR_OVERFLOW and
 * leaves *out untouched.
 */
#ifndef AORTA_COMMON_CHECKED_H
#define AORTA_COMMON_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

static inline int ck_add(size_t a, size_t b, size_t *out)
{
	size_t r;
	if (__builtin_add_overflow(a, b, &r))
		return ERR_OVERFLOW;
	*out = r;
	return 0;
}

static inline int ck_mul(size_t a, size_t b, size_t *out)
{
	size_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return ERR_OVERFLOW;
	*out = r;
	return 0;
}

static inline int ck_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	uint64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return ERR_OVERFLOW;
	*out = r;
	return 0;
}

static inline int ck_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	uint64_t r;
	if (__builtin_mul_overflow(a, b, &r))
		return ERR_OVERFLOW;
	*out = r;
	return 0;
}

/* Round a up to a multiple of align (align a power of two, or any positive). */
static inline int ck_align_up(size_t a, size_t align, size_t *out)
{
	if (align == 0)
		return ERR_INVAL;
	size_t rem = a % align;
	if (rem == 0) {
		*out = a;
		return 0;
	}
	return ck_add(a, align - rem, out);
}

#endif
