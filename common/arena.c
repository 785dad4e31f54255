/* common/arena.c — chunked bump allocator. Tested in tests/unit/test_common.c. */
#include "arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"

struct arena_chunk {
	struct arena_chunk *next;
	size_t size; /* usable bytes in data[] */
	size_t used;
	_Alignas(16) unsigned char data[];
};

void arena_init(struct arena *a, size_t chunk_size)
{
	a->head = NULL;
	a->chunk_size = chunk_size ? chunk_size : 64 * 1024;
	a->total = 0;
}

void arena_deinit(struct arena *a)
{
	struct arena_chunk *c = a->head;
	while (c) {
		struct arena_chunk *next = c->next;
		free(c);
		c = next;
	}
	a->head = NULL;
	a->total = 0;
}

void arena_reset(struct arena *a)
{
	struct arena_chunk *c = a->head;
	if (!c)
		return;
	/* keep the oldest chunk (the last in the list): it is usually the default size */
	struct arena_chunk *keep = c;
	while (keep->next)
		keep = keep->next;
	while (c != keep) {
		struct arena_chunk *next = c->next;
		free(c);
		c = next;
	}
	keep->used = 0;
	a->head = keep;
	a->total = 0;
}

static void *chunk_take(struct arena_chunk *c, size_t size, size_t align)
{
	uintptr_t base = (uintptr_t)c->data;
	uintptr_t p = base + c->used;
	uintptr_t aligned = (p + (align - 1)) & ~(uintptr_t)(align - 1);
	size_t off = (size_t)(aligned - base);
	if (off > c->size || c->size - off < size)
		return NULL;
	c->used = off + size;
	return (void *)aligned;
}

void *arena_alloc_aligned(struct arena *a, size_t size, size_t align)
{
	if (align < 16)
		align = 16;
	if (align & (align - 1))
		return NULL;
	if (size == 0)
		size = 1;
	if (a->head) {
		void *p = chunk_take(a->head, size, align);
		if (p) {
			a->total += size;
			return p;
		}
	}
	size_t need;
	if (ck_add(size, align, &need))
		return NULL;
	size_t csize = need > a->chunk_size ? need : a->chunk_size;
	size_t bytes;
	if (ck_add(sizeof(struct arena_chunk), csize, &bytes))
		return NULL;
	struct arena_chunk *c = malloc(bytes);
	if (!c)
		return NULL;
	c->size = csize;
	c->used = 0;
	c->next = a->head;
	a->head = c;
	void *p = chunk_take(c, size, align);
	a->total += size;
	return p;
}

void *arena_alloc(struct arena *a, size_t size)
{
	return arena_alloc_aligned(a, size, 16);
}

void *arena_calloc(struct arena *a, size_t n, size_t size)
{
	size_t bytes;
	if (ck_mul(n, size, &bytes))
		return NULL;
	void *p = arena_alloc(a, bytes);
	if (p)
		memset(p, 0, bytes);
	return p;
}

char *arena_strndup(struct arena *a, const char *s, size_t n)
{
	size_t bytes;
	if (ck_add(n, 1, &bytes))
		return NULL;
	char *p = arena_alloc(a, bytes);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *arena_strdup(struct arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}
