/* common/mapfile.c — read-only whole-file mappings; see mapfile.h. Used by
 * the GGUF and safetensors readers (tested through tests/models/). */
#include "mapfile.h"

#include "buf.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int mapfile_open(const char *path, size_t min_size, const char *what, const void **data,
		 size_t *size, struct diag *d)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return diag_set(d, ERR_IO, "%s: cannot open", path);
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return diag_set(d, ERR_IO, "%s: not a regular file", path);
	}
	if ((size_t)st.st_size < min_size) {
		close(fd);
		return diag_set(d, ERR_FORMAT, "%s: too small to be a %s file (%lld bytes)", path,
				what, (long long)st.st_size);
	}
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return diag_set(d, ERR_IO, "%s: mmap failed", path);
	*data = p;
	*size = (size_t)st.st_size;
	return 0;
}

void mapfile_close(const void *data, size_t size)
{
	if (data)
		munmap((void *)data, size);
}

int mapfile_read(const char *path, size_t max, char **out, size_t *len, struct diag *d)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return diag_set(d, ERR_NOTFOUND, "%s: cannot open", path);
	struct stat st;
	if (fstat(fileno(fp), &st) || !S_ISREG(st.st_mode)) {
		fclose(fp);
		return diag_set(d, ERR_IO, "%s: not a regular file", path);
	}
	struct buf b;
	buf_init(&b);
	char chunk[65536];
	size_t n;
	int rc = 0;
	while (!rc && (n = fread(chunk, 1, sizeof chunk, fp)) > 0) {
		if (b.len + n > max)
			rc = diag_set(d, ERR_TOO_LARGE, "%s: larger than %zu bytes", path, max);
		else if (buf_append(&b, chunk, n))
			rc = diag_set(d, ERR_NOMEM, "out of memory");
	}
	if (!rc && ferror(fp))
		rc = diag_set(d, ERR_IO, "%s: read failed", path);
	fclose(fp);
	if (rc) {
		buf_deinit(&b);
		return rc;
	}
	*out = buf_take(&b, len);
	return *out ? 0 : diag_set(d, ERR_NOMEM, "out of memory");
}
