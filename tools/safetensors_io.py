"""Minimal safetensors reader/writer (standard library + numpy only), matching core/safetensors.

save(path, tensors, metadata=None): tensors is a dict name -> numpy array (written in dict order) or
    name -> ("BF16", float32 array) to store bfloat16 (numpy has no bf16 type; rounded to nearest even).
load(path) -> (dict name -> numpy array, metadata dict); BF16 tensors come back as float32.
"""
import json
import os
import struct

import numpy as np

_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even, NaN kept quiet."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def save(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, value in tensors.items():
        if isinstance(value, tuple) and value[0] == "BF16":
            dtype, arr = "BF16", np.asarray(value[1])
            raw = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            arr = np.asarray(value)
            dtype = _NAMES[arr.dtype]
            raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # data section 8-byte aligned
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {})
    base, out = 8 + n, {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw, shape = data[base + begin:base + end], info["shape"]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(shape)
        else:
            out[name] = np.frombuffer(raw, dtype=np.dtype(_DTYPES[info["dtype"]]).newbyteorder("<")).reshape(shape)
    return out, metadata
