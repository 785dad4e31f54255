/* common/utf8.c — see utf8.h. The second-byte ranges of RFC 3629's table
 * (E0: A0..BF, ED: 80..9F, F0: 90..BF, F4: 80..8F) are what exclude
 * overlongs, surrogates and code points above U+10FFFF, so one lookup of
 * the lead byte decides the whole rule. */
#include "common/utf8.h"

#include "common/buf.h"
#include "common/err.h"

/* Sequence length a lead byte starts (0: not a lead byte) and the range its
 * second byte must lie in. */
static size_t lead(unsigned c, unsigned *lo, unsigned *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return 2;
	if (c >= 0xE0 && c <= 0xEF) {
		if (c == 0xE0)
			*lo = 0xA0;
		if (c == 0xED)
			*hi = 0x9F;
		return 3;
	}
	if (c >= 0xF0 && c <= 0xF4) {
		if (c == 0xF0)
			*lo = 0x90;
		if (c == 0xF4)
			*hi = 0x8F;
		return 4;
	}
	return 0;
}

size_t utf8_prefix(const char *s, size_t n, bool *complete)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned lo, hi;
	const size_t need = lead(u[0], &lo, &hi);
	*complete = need == 1;
	if (need <= 1)
		return need;
	size_t i = 1;
	for (; i < need && i < n; i++) {
		const unsigned b = u[i];
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
			return i;
	}
	*complete = i == need;
	return i;
}

size_t utf8_len(const char *s, size_t n)
{
	bool complete;
	const size_t k = utf8_prefix(s, n, &complete);
	return complete ? k : 0;
}

bool utf8_valid(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		const size_t k = utf8_len(s + i, n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

bool utf8_incomplete_tail(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t k = 1; k <= 3 && k <= n; k++) {
		if (u[n - k] < 0xC0)
			continue; /* ASCII or a continuation byte: keep looking back */
		bool complete;
		const size_t got = utf8_prefix(s + n - k, k, &complete);
		return got == k && !complete;
	}
	return false;
}

size_t utf8_cut(const char *s, size_t n, size_t r)
{
	const unsigned char *u = (const unsigned char *)s;
	/* r on a continuation byte: step back to its lead (at most 3 bytes) */
	for (int i = 0; i < 3 && r > 0 && r < n && (u[r] & 0xC0) == 0x80; i++)
		r--;
	/* the character ending at r may be incomplete: find its lead byte */
	size_t k = r;
	while (k > 0 && r - k < 3 && (u[k - 1] & 0xC0) == 0x80)
		k--;
	if (k > 0) {
		const size_t at = k - 1;
		unsigned lo, hi;
		size_t len = lead(u[at], &lo, &hi);
		if ((u[at] & 0xC0) == 0xC0 && len > r - at)
			r = at;
	}
	return r;
}

int utf8_lossy(const char *s, size_t n, struct buf *out)
{
	size_t i = 0, run = 0;
	while (i < n) {
		bool complete;
		const size_t k = utf8_prefix(s + i, n - i, &complete);
		if (complete) {
			i += k;
			continue;
		}
		if (buf_append(out, s + run, i - run) || buf_append(out, "\xEF\xBF\xBD", 3))
			return ERR_NOMEM;
		i += k ? k : 1;
		run = i;
	}
	return buf_append(out, s + run, n - run) ? ERR_NOMEM : 0;
}

size_t utf8_encode(uint32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

size_t utf8_decode(const char *s, uint32_t *cp)
{
	const unsigned char *p = (const unsigned char *)s;
	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	if (p[0] < 0xE0) {
		*cp = ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
		return 2;
	}
	if (p[0] < 0xF0) {
		*cp = ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
		return 3;
	}
	*cp = ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
	      ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
	return 4;
}
