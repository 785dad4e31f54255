/* common/buf.h — a growable byte buffer.
 *
 * Caller-allocated (`struct buf b; buf_init(&b);`), owns its data until
 * buf_deinit() or buf_take(). The data is always NUL-terminated after a
 * successful append, so it can be used as a C string when it holds text.
 * Not thread-safe; one owner at a time.
 */
#ifndef AORTA_COMMON_BUF_H
#define AORTA_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
	char *data; /* NULL until the first append */
	size_t len; /* bytes used, excluding the terminating NUL */
	size_t cap; /* bytes allocated */
};

void buf_init(struct buf *b);
void buf_deinit(struct buf *b);
/* Make room for at least `extra` more bytes (plus the NUL). */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t n);
int buf_append_str(struct buf *b, const char *s);
int buf_append_char(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap);
/* Forget the contents but keep the allocation. */
void buf_clear(struct buf *b);
/* Drop the first n bytes (n <= len), moving the rest to the front. */
void buf_consume(struct buf *b, size_t n);
/* Hand the data to the caller (free() it); the buffer is left empty.
 * Returns an allocated empty string when nothing was appended (NULL on OOM). */
char *buf_take(struct buf *b, size_t *len_out);

#endif
