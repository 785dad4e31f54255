/* common/arena.h — a bump allocator for many small allocations that die together.
 *
 * Caller-allocated struct; memory comes in chunks from malloc and is released
 * all at once by arena_deinit() (or recycled by arena_reset()). Pointers are
 * aligned to 16 bytes (or more, with arena_alloc_aligned). Not thread-safe.
 */
#ifndef AORTA_COMMON_ARENA_H
#define AORTA_COMMON_ARENA_H

#include <stddef.h>

struct arena_chunk;

struct arena {
	struct arena_chunk *head; /* newest chunk first */
	size_t chunk_size;        /* default size of a new chunk */
	size_t total;             /* bytes handed out since init/reset */
};

/* chunk_size 0 picks 64 KiB. */
void arena_init(struct arena *a, size_t chunk_size);
void arena_deinit(struct arena *a);
/* Keep the first chunk, free the rest, forget every allocation. */
void arena_reset(struct arena *a);
/* NULL on OOM or overflow; size 0 returns a valid unique pointer. */
void *arena_alloc(struct arena *a, size_t size);
void *arena_alloc_aligned(struct arena *a, size_t size, size_t align);
void *arena_calloc(struct arena *a, size_t n, size_t size);
char *arena_strdup(struct arena *a, const char *s);
char *arena_strndup(struct arena *a, const char *s, size_t n);

#endif
