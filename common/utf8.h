/* common/utf8.h — UTF-8 as RFC 3629 and Unicode §3.9 define it: validation
 * (no overlong forms, no surrogates, nothing above U+10FFFF), the maximal
 * subpart rule for repairs, encoding and decoding one code point.
 *
 * The one copy of these rules for the whole tree: the model readers (GGUF
 * and safetensors strings), the tokenizer, the API's JSON checks, the stop
 * matcher and the sampler's stop strings all call these. Pure functions;
 * any thread. Tested in tests/unit/test_common.c (and through every caller's
 * suite: test_api_parse, test_tokenizer, test_stop, test_gguf).
 */
#ifndef AORTA_COMMON_UTF8_H
#define AORTA_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;

/* How many bytes of s (n >= 1 available) form a valid prefix of one UTF-8
 * sequence (the "maximal subpart" of Unicode §3.9: 0 for a byte that cannot
 * start one), and whether that sequence is complete. */
size_t utf8_prefix(const char *s, size_t n, bool *complete);
/* Length of the complete, valid sequence at s (1..4), 0 when invalid or
 * truncated (n >= 1). */
size_t utf8_len(const char *s, size_t n);
/* Is s[0, n) valid UTF-8 as a whole? */
bool utf8_valid(const char *s, size_t n);
/* Do the bytes end with the start of a character that more bytes could
 * complete? */
bool utf8_incomplete_tail(const char *s, size_t n);
/* Largest r' <= r such that s[0, r') does not end inside a character (a
 * lead byte whose sequence would reach past r is cut off with it). */
size_t utf8_cut(const char *s, size_t n, size_t r);
/* Append s to out with each maximal invalid subpart replaced by U+FFFD, as
 * Rust's String::from_utf8_lossy and Python's errors="replace". ERR_NOMEM. */
int utf8_lossy(const char *s, size_t n, struct buf *out);
/* Encode cp (<= U+10FFFF) into out; returns its length (1..4). */
size_t utf8_encode(uint32_t cp, char out[4]);
/* Decode the code point at s, which must be valid UTF-8; returns its length. */
size_t utf8_decode(const char *s, uint32_t *cp);

#endif
