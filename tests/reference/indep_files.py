"""tests/reference/indep_files.py — a GGUF v3 and a safetensors writer written
from the formats' specifications (ggml's docs/gguf.md; huggingface/safetensors
README), not from aorta's writer, so that a file aorta loads is not only ever
one aorta wrote. Also a tiny Q8_0 quantizer (ggml's block_q8_0: an F16 scale
d = absmax/127 and 32 int8 q = round(x/d)) and its dequantizer.

GGUF v3, little-endian:
  magic "GGUF", u32 version 3, u64 tensor_count, u64 metadata_kv_count;
  KV pairs: gguf_string key (u64 length + UTF-8 bytes), u32 value type, value
    (arrays: u32 element type, u64 count, elements);
  tensor infos: name, u32 n_dims, u64 ne[n_dims] (innermost first), u32 ggml
    type, u64 offset into the data section (a multiple of the alignment);
  padding to general.alignment (default 32), then the data section.
safetensors: u64 header length N, N bytes of JSON {name: {dtype, shape,
  data_offsets [begin, end)} , "__metadata__": {str: str}}, then the bytes.
"""
import json
import struct

import numpy as np

# GGUF metadata value types
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30


def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(t, v):
    if t == U32:
        return struct.pack("<I", v)
    if t == I32:
        return struct.pack("<i", v)
    if t == F32:
        return struct.pack("<f", v)
    if t == BOOL:
        return struct.pack("<?", v)
    if t == STRING:
        return _str(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_value(et, x) for x in items)
    raise ValueError("type %d" % t)


def q8_0_quantize(x):
    """(rows, cols) float32 -> (bytes of the blocks, the dequantized values)."""
    blocks = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = (amax / 127.0).astype(np.float16)
    df = d.astype(np.float32)
    q = np.where(df > 0, np.rint(blocks / np.where(df > 0, df, 1)), 0)
    q = np.clip(q, -127, 127).astype(np.int8)
    raw = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    raw[:, :2] = d.view(np.uint8).reshape(-1, 2)
    raw[:, 2:] = q.view(np.uint8)
    return raw.tobytes(), (q.astype(np.float32) * df).reshape(x.shape)


def encode(a, dtype):
    """float32 array -> (ggml type, bytes, the values the file holds as float32)."""
    if dtype == "f32":
        a = a.astype(np.float32)
        return GGML_F32, a.tobytes(), a
    if dtype == "f16":
        h = a.astype(np.float16)
        return GGML_F16, h.tobytes(), h.astype(np.float32)
    if dtype == "bf16":
        u = a.astype(np.float32).view(np.uint32)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
        return GGML_BF16, u.tobytes(), (u.astype(np.uint32) << 16).view(np.float32)
    if dtype == "q8_0":
        raw, back = q8_0_quantize(a)
        return GGML_Q8_0, raw, back
    raise ValueError(dtype)


def write_gguf(path, kv, tensors, alignment=32):
    """kv: [(key, type, value)]; tensors: [(name, shape outermost-first,
    ggml type, bytes)]. Writes general.alignment when it is not 32."""
    if alignment != 32:
        kv = kv + [("general.alignment", U32, alignment)]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for key, t, v in kv:
        out += _str(key) + struct.pack("<I", t) + _value(t, v)
    off = 0
    offsets = []
    for name, shape, gt, data in tensors:
        offsets.append(off)
        ne = list(reversed(shape))
        out += _str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
        out += struct.pack("<IQ", gt, off)
        off += len(data)
        off += -off % alignment
    out += b"\0" * (-len(out) % alignment)
    base = len(out)
    for (name, shape, gt, data), o in zip(tensors, offsets):
        out += b"\0" * (base + o - len(out))
        out += data
    with open(path, "wb") as f:
        f.write(out)


ST_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}


def write_safetensors(path, tensors, dtype):
    """tensors: [(name, float32 array)] -> file; returns {name: values held}."""
    header, blobs, held, off = {}, [], {}, 0
    for name, a in tensors:
        _, data, back = encode(a, dtype)
        header[name] = {"dtype": ST_DTYPES[dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        held[name] = back
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    return held
