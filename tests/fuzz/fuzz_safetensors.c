/* tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors
 * header parser (engine/model/safetensors.c): any byte string is either accepted,
 * with every tensor inside the buffer, or refused with a message. Built by
 * tools/fuzz.sh; with -DFUZZ_REPLAY_MAIN it replays files given on the
 * command line (the 'unit' test over the seed corpus).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	if (size)
		memcpy(buf, data, size);
	struct st_file *f;
	struct diag d;
	if (st_open_mem(buf, size, &f, &d) == 0) {
		volatile uint64_t sink = 0;
		for (int64_t i = 0; i < st_n_tensors(f); i++) {
			const struct st_tensor *t = st_tensor_at(f, i);
			const uint8_t *p = t->data;
			if (p < buf || p + t->n_bytes > buf + size || st_find(f, t->name) != t)
				abort();
			if (t->n_bytes)
				sink += p[0] + p[t->n_bytes - 1];
		}
		(void)sink;
		st_close(f);
	}
	free(buf);
	return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int main(int argc, char **argv)
{
	int n = 0;
	for (int i = 1; i < argc; i++) {
		FILE *fp = fopen(argv[i], "rb");
		if (!fp) {
			fprintf(stderr, "%s: cannot open\n", argv[i]);
			return 1;
		}
		static uint8_t data[1 << 20];
		size_t len = fread(data, 1, sizeof data, fp);
		fclose(fp);
		LLVMFuzzerTestOneInput(data, len);
		n++;
	}
	printf("replayed %d inputs\n", n);
	return n > 0 ? 0 : 1;
}
#endif
