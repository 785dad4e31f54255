/* common/mapfile.h — whole files: map a regular file read-only (model
 * files), or read a small one into memory (configs).
 *
 * mapfile_open checks that path is a regular file of at least min_size bytes
 * and maps it PROT_READ/MAP_PRIVATE; on failure it returns ERR_IO or
 * ERR_FORMAT with a diag naming the file (`what` says what kind of file was
 * expected, e.g. "GGUF"). The mapping belongs to the caller until
 * mapfile_close. Any thread.
 */
#ifndef AORTA_COMMON_MAPFILE_H
#define AORTA_COMMON_MAPFILE_H

#include <stddef.h>

#include "err.h"

int mapfile_open(const char *path, size_t min_size, const char *what, const void **data,
		 size_t *size, struct diag *d);
void mapfile_close(const void *data, size_t size);
/* Read a small file whole (config files, JSON) into a malloc'd buffer,
 * NUL-terminated, that the caller frees: ERR_NOTFOUND when it cannot be
 * opened, ERR_IO when it is not a regular file, ERR_TOO_LARGE past max bytes, ERR_IO, ERR_NOMEM. */
int mapfile_read(const char *path, size_t max, char **out, size_t *len, struct diag *d);

#endif
