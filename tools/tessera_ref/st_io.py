"""Minimal safetensors reader/writer on numpy (no dependency on the safetensors package).

File layout: 8-byte little-endian header length N, N bytes of JSON header
({name: {"dtype", "shape", "data_offsets": [begin, end]}, optional "__metadata__": {str: str}}),
then the raw little-endian tensor bytes; offsets are relative to the end of the header.

Supported dtypes: F32, F16, BF16, I32, I64. BF16 has no numpy type: it is read as float32 (the 16 bits
become the upper half of a float32) and written from float32 with round-to-nearest-even.

Writing is deterministic: tensors are laid out sorted by name, the JSON is compact with sorted keys, and
the header is padded with spaces to a multiple of 8 bytes, so equal inputs give byte-identical files.
"""

import json
import struct

import numpy as np

_NP_FROM_ST = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
}
_ST_FROM_NP = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
               np.dtype(np.int32): "I32", np.dtype(np.int64): "I64"}


def bf16_bits_from_f32(x):
    """float32 array -> uint16 array of bfloat16 bits, round to nearest even (NaN stays NaN)."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded = np.where(nan, (u >> 16) | 0x40, rounded)
    return rounded.astype("<u2")


def f32_from_bf16_bits(bits):
    """uint16 array of bfloat16 bits -> float32 array (exact)."""
    return (np.asarray(bits, dtype="<u2").astype("<u4") << 16).view("<f4")


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw_len = f.read(8)
        if len(raw_len) != 8:
            raise ValueError(f"{path}: file shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw_len)
        header = json.loads(f.read(n).decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


def load(path):
    """Reads every tensor; returns (dict name -> np.ndarray, metadata dict). BF16 comes back as float32."""
    header, meta, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        blob = f.read()
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt, shape = info["dtype"], tuple(info["shape"])
        if dt == "BF16":
            arr = f32_from_bf16_bits(np.frombuffer(blob[b:e], dtype="<u2"))
        elif dt in _NP_FROM_ST:
            arr = np.frombuffer(blob[b:e], dtype=_NP_FROM_ST[dt]).copy()
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        out[name] = arr.reshape(shape)
    return out, meta


def save(path, tensors, dtypes=None, metadata=None):
    """Writes tensors (dict name -> np.ndarray of float32/float16/int32/int64).

    dtypes: optional dict name -> "BF16" / "F16" / "F32" / "I32" / "I64" to convert on write
    (float32 -> BF16 rounds to nearest even). metadata: optional dict str -> str.
    """
    dtypes = dtypes or {}
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        want = dtypes.get(name)
        if want == "BF16":
            data = bf16_bits_from_f32(arr.astype(np.float32)).tobytes()
            st = "BF16"
        else:
            if want is not None:
                arr = arr.astype(_NP_FROM_ST[want])
            st = _ST_FROM_NP.get(arr.dtype)
            if st is None:
                raise ValueError(f"tensor {name}: unsupported numpy dtype {arr.dtype}")
            data = np.ascontiguousarray(arr, dtype=_NP_FROM_ST[st]).tobytes()
        header[name] = {"dtype": st, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    js = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    js += b" " * ((8 - len(js) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(js)))
        f.write(js)
        for c in chunks:
            f.write(c)


def save_torch_state_dict(path, state_dict, metadata=None):
    """Saves a torch state dict as F32 (int tensors keep their type)."""
    arrays = {k: v.detach().cpu().contiguous().numpy() for k, v in state_dict.items()}
    save(path, arrays, metadata=metadata)


def shapes(path):
    """dict name -> shape tuple, read from the header only."""
    header, _, _ = read_header(path)
    return {k: tuple(v["shape"]) for k, v in header.items()}
