/* kernels/dtype.c — dtype table and scalar conversions.
 * Tested in tests/unit/test_dtype.c (exhaustive round trips for F16/BF16/FP8). */
#include "dtype.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "common/checked.h"
#include "common/err.h"

static const struct {
	const char *name;
	size_t block_elems;
	size_t block_bytes;
} dtype_info[DT__COUNT] = {
	[DT_F32] = { "f32", 1, 4 },	    [DT_F16] = { "f16", 1, 2 },
	[DT_BF16] = { "bf16", 1, 2 },	    [DT_Q8_0] = { "q8_0", Q8_0_BLOCK, sizeof(struct q8_0_block) },
	[DT_I8] = { "i8", 1, 1 },	    [DT_F8_E4M3] = { "f8_e4m3", 1, 1 },
	[DT_I32] = { "i32", 1, 4 },
};

_Static_assert(sizeof(struct q8_0_block) == 34, "q8_0 block must be 34 bytes");

const char *dtype_name(enum dtype t)
{
	return (unsigned)t < DT__COUNT ? dtype_info[t].name : "?";
}

int dtype_parse(const char *s, enum dtype *out)
{
	for (int t = 0; t < DT__COUNT; t++) {
		if (strcasecmp(s, dtype_info[t].name) == 0) {
			*out = (enum dtype)t;
			return 0;
		}
	}
	return ERR_INVAL;
}

size_t dtype_block_elems(enum dtype t)
{
	return (unsigned)t < DT__COUNT ? dtype_info[t].block_elems : 0;
}

size_t dtype_block_bytes(enum dtype t)
{
	return (unsigned)t < DT__COUNT ? dtype_info[t].block_bytes : 0;
}

int dtype_row_bytes(enum dtype t, uint64_t n, uint64_t *bytes_out)
{
	if ((unsigned)t >= DT__COUNT)
		return ERR_INVAL;
	uint64_t be = dtype_info[t].block_elems;
	if (n % be)
		return ERR_INVAL;
	return ck_mul_u64(n / be, dtype_info[t].block_bytes, bytes_out);
}

static inline uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;
	if (exp == 0) {
		/* zero or subnormal: man * 2^-24 */
		float v = (float)man * 0x1p-24f;
		return sign ? -v : v;
	}
	if (exp == 31)
		return bits_f32(sign | 0x7f800000u | (man << 13));
	return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t abs = u & 0x7fffffffu;
	if (abs >= 0x7f800000u) /* Inf or NaN */
		return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
	if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
		return (uint16_t)(sign | 0x7c00);
	if (abs < 0x38800000u) {
		/* subnormal half (or zero): value / 2^-24, rounded to nearest even */
		float v = bits_f32(abs) * 0x1p24f;
		uint32_t m = (uint32_t)v;
		float frac = v - (float)m;
		if (frac > 0.5f || (frac == 0.5f && (m & 1)))
			m++;
		return (uint16_t)(sign | m);
	}
	uint32_t exp = (abs >> 23) - 112;
	uint32_t man = abs & 0x7fffff;
	uint32_t half = (exp << 10) | (man >> 13);
	uint32_t rest = man & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
		half++; /* may carry into the exponent, which is right */
	return (uint16_t)(sign | half);
}

float bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
		return (uint16_t)((u >> 16) | 0x40);
	uint32_t lsb = (u >> 16) & 1;
	u += 0x7fff + lsb;
	return (uint16_t)(u >> 16);
}

float f8e4m3_to_f32(uint8_t v)
{
	uint32_t sign = v & 0x80;
	uint32_t exp = (v >> 3) & 0xf;
	uint32_t man = v & 0x7;
	float r;
	if (exp == 0xf && man == 0x7)
		return NAN;
	if (exp == 0)
		r = (float)man * 0x1p-9f; /* subnormal: man/8 * 2^-6 */
	else
		r = bits_f32(((exp + 120) << 23) | (man << 20));
	return sign ? -r : r;
}

uint8_t f32_to_f8e4m3(float f)
{
	if (isnan(f))
		return 0x7f;
	uint8_t sign = signbit(f) ? 0x80 : 0;
	float a = fabsf(f);
	if (a >= 448.0f)
		return sign | 0x7e; /* saturate to the largest finite value */
	if (a < 0x1p-6f) {
		/* subnormal range: steps of 2^-9 */
		float v = a * 0x1p9f;
		uint32_t m = (uint32_t)v;
		float frac = v - (float)m;
		if (frac > 0.5f || (frac == 0.5f && (m & 1)))
			m++;
		return (uint8_t)(sign | m); /* m == 8 becomes the smallest normal, as it should */
	}
	uint32_t u = f32_bits(a);
	uint32_t exp = (u >> 23) - 120;
	uint32_t man = u & 0x7fffff;
	uint32_t q = (exp << 3) | (man >> 20);
	uint32_t rest = man & 0xfffff;
	if (rest > 0x80000 || (rest == 0x80000 && (q & 1)))
		q++;
	if (q > 0x7e)
		q = 0x7e;
	return (uint8_t)(sign | q);
}
