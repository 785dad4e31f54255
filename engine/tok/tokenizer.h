/* engine/tok/tokenizer.h — text <-> token ids, reproducing Hugging Face `tokenizers`.
 *
 * Owns: a loaded vocabulary and its pipeline (added tokens, normalizer,
 * pre-tokenizer, BPE model, post-processor, decoder), loaded from a
 * tokenizer.json (+ optional tokenizer_config.json) or from a GGUF file's
 * tokenizer.ggml.* keys. Byte-level BPE (GPT-2 / Llama 3 / Qwen) and
 * SentencePiece-style BPE with byte fallback (Mistral / Llama 2 / Gemma).
 *
 * Threads: a loaded tokenizer is read-only; any number of threads may call
 * tok_encode / tok_decode / tok_stream_* on it at once (all scratch is per call
 * or per stream). A struct tok_stream belongs to one thread at a time.
 *
 * Ownership: tok_load_* return a tokenizer the caller frees with tok_destroy.
 * tok_encode returns an id array the caller free()s. Strings returned by
 * tok_token_text are borrowed from the tokenizer.
 *
 * Input text is bytes. Invalid UTF-8 is defined to encode exactly as its
 * lossy repair (each maximal invalid subsequence replaced by U+FFFD, as Rust's
 * String::from_utf8_lossy does); decode output is always valid UTF-8.
 *
 * Semantics follow the Rust `tokenizers` library (tested against it and the
 * transformers.js reference vectors): added tokens are split out of the raw
 * text before normalization (leftmost-longest; lstrip/rstrip/single_word; an
 * added token whose text the model vocabulary has takes the model's id);
 * TOK_PARSE_SPECIAL off skips only special added tokens (non-special ones such
 * as Qwen's <think> still match, as HF's split_special_tokens does); decode
 * applies clean_up_tokenization_spaces when tokenizer_config.json asks.
 * GGUF: "gpt2" pre names llama-bpe/llama3, qwen2, gpt-2/default map to their
 * regexes (qwen2 also gets the NFC of Qwen's tokenizer.json, llama-bpe the
 * ignore_merges and clean-up of Llama 3's); "llama" uses SentencePiece scores
 * with the HF pipeline (space prefix on every segment between added tokens).
 * normalized=true added tokens are matched in each normalized segment by
 * their normalized text (and, as in HF, decode as that text).
 * Not supported: WordPiece/Unigram/WordLevel models, BPE dropout,
 * continuing_subword_prefix/end_of_word_suffix, normalized added tokens in
 * GGUF export (GGUF has no such notion: they are written as user-defined).
 */
#ifndef AORTA_ENGINE_TOK_TOKENIZER_H
#define AORTA_ENGINE_TOK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

struct tokenizer;
struct model;
struct gguf_file;
struct gguf_writer;

enum {
	TOK_ADD_SPECIAL = 1u << 0,   /* encode: apply the post-processor (BOS etc.) */
	TOK_PARSE_SPECIAL = 1u << 1, /* encode: special-token text in the input becomes
				      * that token (chat templates); without it only
				      * non-special added tokens are matched (user text) */
	TOK_SKIP_SPECIAL = 1u << 2,  /* decode: drop special tokens */
	TOK_KEEP_BYTES = 1u << 3,    /* decode: bytes that are no whole UTF-8
				      * character stay as they are instead of
				      * becoming U+FFFD (a token's own bytes, for
				      * logprobs' "bytes"; the text may then be
				      * invalid UTF-8) */
};

/* tokenizer_config may be NULL (then no clean-up, BOS/EOS from the post-processor). */
int tok_load_json(const char *tokenizer_json, const char *tokenizer_config, struct tokenizer **out,
		  struct diag *d);
int tok_load_gguf(const struct gguf_file *g, struct tokenizer **out, struct diag *d);
/* Picks tokenizer.json from an HF directory model, else the GGUF keys. */
int tok_load_for_model(const struct model *m, struct tokenizer **out, struct diag *d);
void tok_destroy(struct tokenizer *t);

/* Write the vocabulary as llama.cpp's converter does (tokenizer.ggml.*). */
int tok_export_gguf(const struct tokenizer *t, struct gguf_writer *w, struct diag *d);

/* Encode len bytes of text. *ids is malloc'ed (free() it; non-NULL even when
 * *n == 0). Flags: TOK_ADD_SPECIAL | TOK_PARSE_SPECIAL. */
int tok_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids,
	       size_t *n);
/* Decode ids and append the text to out. Flags: TOK_SKIP_SPECIAL, TOK_KEEP_BYTES.
 * Ids outside the vocabulary give ERR_RANGE. */
int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
	       struct buf *out);

/* Vocabulary facts. Ids run 0..tok_vocab_size()-1 (some may be holes). */
int32_t tok_vocab_size(const struct tokenizer *t);
int32_t tok_bos(const struct tokenizer *t); /* -1 when none */
int32_t tok_eos(const struct tokenizer *t); /* -1 when none */
bool tok_add_bos(const struct tokenizer *t); /* the post-processor prepends BOS */
/* The token's piece as stored in the vocabulary ("Ġhello", "<0x0A>", "<|eot_id|>"),
 * or NULL for an id that is out of range or a hole. *len gets its byte length. */
const char *tok_token_text(const struct tokenizer *t, int32_t id, size_t *len);
bool tok_is_special(const struct tokenizer *t, int32_t id);
/* The id of an exact piece (vocab or added token), -1 when absent. */
int32_t tok_piece_id(const struct tokenizer *t, const char *piece, size_t len);

/* Incremental decoding for streaming. Each push appends to `out` only text
 * that later tokens cannot change (never a partial UTF-8 sequence); after
 * tok_stream_finish the concatenation of everything appended equals
 * tok_decode of all pushed ids. */
struct tok_stream {
	const struct tokenizer *t;
	unsigned flags;	  /* TOK_SKIP_SPECIAL */
	int32_t *ids;	  /* ids since the last point where decoding separates */
	size_t n_ids, cap_ids;
	size_t emitted;	  /* bytes of decode(ids) already appended to out */
	bool at_start;	  /* ids begin the sequence (decoders strip there) */
	struct buf scratch;
};

void tok_stream_init(struct tok_stream *s, const struct tokenizer *t, unsigned flags);
int tok_stream_push(struct tok_stream *s, int32_t id, struct buf *out);
/* Append what was held back (a trailing partial character decodes as U+FFFD, as
 * tok_decode does). The stream may then be reused for a new sequence. */
int tok_stream_finish(struct tok_stream *s, struct buf *out);
void tok_stream_deinit(struct tok_stream *s);

#endif
