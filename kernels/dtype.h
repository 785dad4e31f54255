/* kernels/dtype.h — element types of weights, activations and KV, and scalar
 * conversions between them. Stateless; any thread.
 *
 * Block-quantized types store rows as consecutive blocks: Q8_0 is llama.cpp's
 * block of 32 int8 values preceded by one F16 scale (34 bytes). I8 and F8_E4M3
 * store one byte per value; their scales live beside the tensor (see
 * engine/model/model.h, struct tensor: per output row or per tensor).
 */
#ifndef AORTA_KERNELS_DTYPE_H
#define AORTA_KERNELS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dtype {
	DT_F32 = 0,
	DT_F16,
	DT_BF16,
	DT_Q8_0,
	DT_I8,
	DT_F8_E4M3,
	DT_I32,
	DT__COUNT
};

#define Q8_0_BLOCK 32
struct q8_0_block {
	uint16_t d; /* F16 scale */
	int8_t qs[Q8_0_BLOCK];
};

/* "f32", "f16", "bf16", "q8_0", "i8", "f8_e4m3", "i32"; "?" when out of range. */
const char *dtype_name(enum dtype t);
/* Parse a name above (case-insensitive); 0 or ERR_INVAL. */
int dtype_parse(const char *s, enum dtype *out);
/* Values per storage block (32 for Q8_0, 1 otherwise) and bytes per block. */
size_t dtype_block_elems(enum dtype t);
size_t dtype_block_bytes(enum dtype t);
/* Bytes of a row of n values; 0 with ERR_INVAL/ERR_OVERFLOW when n is not a
 * multiple of the block or the size overflows. */
int dtype_row_bytes(enum dtype t, uint64_t n, uint64_t *bytes_out);

/* IEEE binary16 <-> float (round to nearest even; NaN/Inf preserved). */
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
/* bfloat16 <-> float (round to nearest even). */
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
/* OCP FP8 E4M3 (the "fn" variant: no Inf, 0x7F/0xFF are NaN, max 448). The
 * conversion from float saturates to +-448 and rounds to nearest even. */
float f8e4m3_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3(float f);

#endif
