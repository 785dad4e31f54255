/* engine/tok_gguf.c — tokenizers from / into GGUF tokenizer.ggml.* keys.
 * (work in progress: not yet implemented) */
#include "engine/tok_internal.h"

int tok_load_gguf(const struct gguf_file *g, struct tokenizer **out, struct diag *d)
{
	(void)g;
	(void)out;
	return diag_set(d, ERR_UNSUPPORTED, "tokenizer from GGUF: not implemented yet");
}
