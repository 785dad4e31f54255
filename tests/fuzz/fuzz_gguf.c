/* tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader
 * (engine/model/gguf.c): any byte string must be either accepted, with every
 * tensor inside the buffer and every metadata getter safe, or refused with a
 * message. Accepted files also go through the model config reader
 * (engine/model/model_config.c), which must accept or refuse them cleanly. Built by tools/fuzz.sh (clang -fsanitize=fuzzer,address,undefined);
 * with -DFUZZ_REPLAY_MAIN it is a plain program that replays files given on
 * the command line (the 'unit' test that runs the seed corpus under gcc).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"
#include "engine/model/model_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Copy into an 8-aligned buffer the way an mmap would be aligned. */
	uint8_t *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	if (size)
		memcpy(buf, data, size);
	struct gguf_file *f;
	struct diag d;
	if (gguf_open_mem(buf, size, &f, &d) == 0) {
		volatile uint64_t sink = 0;
		for (int64_t i = 0; i < gguf_n_kv(f); i++) {
			const char *key = gguf_kv_key(f, i);
			sink += strlen(key);
			uint32_t u;
			int32_t s32;
			uint64_t u64;
			float fl;
			bool b;
			const char *s;
			size_t len;
			enum gguf_type et;
			uint64_t n;
			if (!gguf_get_u32(f, key, &u)) sink += u;
			if (!gguf_get_i32(f, key, &s32)) sink += (uint64_t)s32;
			if (!gguf_get_u64(f, key, &u64)) sink += u64;
			if (!gguf_get_f32(f, key, &fl)) sink += (uint64_t)(fl == fl);
			if (!gguf_get_bool(f, key, &b)) sink += b;
			if (!gguf_get_str(f, key, &s, &len) && len) sink += (uint8_t)s[len - 1];
			if (!gguf_get_arr(f, key, &et, &n) && n < (1u << 20)) {
				for (uint64_t k = 0; k < n && et == GGUF_TYPE_STRING; k++)
					if (!gguf_arr_str(f, key, k, &s, &len) && len)
						sink += (uint8_t)s[len - 1];
				int32_t *iv = malloc((size_t)(n ? n : 1) * 4);
				float *fv = malloc((size_t)(n ? n : 1) * 4);
				if (iv && fv) {
					if (!gguf_arr_read_i32(f, key, iv, n) && n) sink += (uint64_t)iv[n - 1];
					if (!gguf_arr_read_f32(f, key, fv, n) && n) sink += (uint64_t)(fv[0] == fv[0]);
				}
				free(iv);
				free(fv);
			}
			if (gguf_find_key(f, key) < 0)
				abort(); /* every listed key must be found again */
		}
		for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
			const struct gguf_tensor_info *t = gguf_tensor(f, i);
			const uint8_t *p = t->data;
			if (p < buf || p + t->n_bytes > buf + size || gguf_find_tensor(f, t->name) != t)
				abort();
			if (t->n_bytes)
				sink += p[0] + p[t->n_bytes - 1];
		}
		struct model_config cfg;
		if (model_config_from_gguf(f, &cfg, &d) == 0) {
			(void)model_config_validate(&cfg, &d);
			free(cfg.chat_template);
		}
		(void)sink;
		gguf_close(f);
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
