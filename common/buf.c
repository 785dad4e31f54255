/* common/buf.c — growable byte buffer. Tested in tests/unit/test_common.c. */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "err.h"

void buf_init(struct buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void buf_deinit(struct buf *b)
{
	free(b->data);
	buf_init(b);
}

int buf_reserve(struct buf *b, size_t extra)
{
	size_t need;
	if (ck_add(b->len, extra, &need) || ck_add(need, 1, &need))
		return ERR_OVERFLOW;
	if (need <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < need) {
		if (ck_mul(cap, 2, &cap))
			return ERR_OVERFLOW;
	}
	char *p = realloc(b->data, cap);
	if (!p)
		return ERR_NOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
	int rc = buf_reserve(b, n);
	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, data, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_append_char(struct buf *b, char c)
{
	return buf_append(b, &c, 1);
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return ERR_INVAL;
	int rc = buf_reserve(b, (size_t)n);
	if (rc)
		return rc;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void buf_clear(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_consume(struct buf *b, size_t n)
{
	if (n >= b->len) {
		buf_clear(b);
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

char *buf_take(struct buf *b, size_t *len_out)
{
	char *p = b->data;
	size_t len = b->len;
	if (!p) {
		p = calloc(1, 1);
		len = 0;
	}
	if (len_out)
		*len_out = len;
	buf_init(b);
	return p;
}
