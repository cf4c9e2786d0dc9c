"""The wire format: a msgpack header plus raw array frames. No pickle, ever.

A message is a zmq multipart ``[header, frame_0, frame_1, ...]``. The header is a msgpack map::

    {"type": str, "schema": int, "sender": str, "seq": int, "meta": {...},
     "arrays": [{"name": str, "dtype": str, "shape": [int, ...]}, ...]}

and frame ``i`` holds the raw C-order bytes of array ``i``. Everything is bounded and checked before
use: header size, msgpack nesting and lengths, array count, dtype (an allowlist, so no object
arrays), shape against frame length, total size. ``decode`` raises ``WireError`` on anything off;
receivers drop and count such messages and keep running (``RejectCounter``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgpack
import numpy as np

SCHEMA_VERSION = 1
MAX_HEADER_BYTES = 256 * 1024
MAX_ARRAYS = 256
MAX_MESSAGE_BYTES = 512 * 1024 * 1024
ALLOWED_DTYPES = frozenset(
    ["bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
     "float64"]
)
_DTYPES = {name: np.dtype(name) for name in ALLOWED_DTYPES}
_NAMES = {dt: name for name, dt in _DTYPES.items()}  # dtype.name is slow enough to matter per message


class WireError(ValueError):
    """A message that is malformed, oversized or of the wrong schema; it is dropped, never executed."""


@dataclass
class Message:
    type: str
    sender: str
    seq: int
    meta: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def encode(msg_type: str, sender: str, seq: int, meta: dict | None = None,
           arrays: dict[str, np.ndarray] | None = None) -> list[bytes | memoryview]:
    """Build the multipart frames of one message (arrays are sent zero-copy where contiguous)."""
    arrays = arrays or {}
    specs, frames = [], []
    for name, arr in arrays.items():
        arr = np.require(arr, requirements="C")  # not ascontiguousarray: that turns a 0-d array into shape (1,)
        dtype = _NAMES.get(arr.dtype)
        if dtype is None:
            raise WireError(f"array '{name}' has dtype {arr.dtype}, not one of the wire dtypes")
        specs.append({"name": name, "dtype": dtype, "shape": list(arr.shape)})
        frames.append(memoryview(arr).cast("B") if arr.size else b"")
    header = msgpack.packb(
        {"type": msg_type, "schema": SCHEMA_VERSION, "sender": sender, "seq": int(seq), "meta": meta or {},
         "arrays": specs},
        use_bin_type=True,
    )
    if len(header) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(header)} bytes exceeds {MAX_HEADER_BYTES}")
    return [header, *frames]


def decode(frames: list[bytes], expected_types: frozenset[str] | None = None) -> Message:
    """Parse and validate a multipart message. Raises ``WireError``; never evaluates anything."""
    if not frames:
        raise WireError("empty message")
    header_bytes = frames[0]
    if len(header_bytes) > MAX_HEADER_BYTES:
        raise WireError(f"header of {len(header_bytes)} bytes exceeds {MAX_HEADER_BYTES}")
    total = sum(len(f) for f in frames)
    if total > MAX_MESSAGE_BYTES:
        raise WireError(f"message of {total} bytes exceeds {MAX_MESSAGE_BYTES}")
    try:
        header = msgpack.unpackb(
            header_bytes, raw=False, strict_map_key=True, max_str_len=MAX_HEADER_BYTES,
            max_bin_len=MAX_HEADER_BYTES, max_array_len=4096, max_map_len=4096, max_ext_len=0,
        )
    except Exception as exc:  # msgpack raises several types; all mean "not our format"
        raise WireError(f"header is not valid msgpack: {type(exc).__name__}: {exc}") from None
    if not isinstance(header, dict):
        raise WireError(f"header is a {type(header).__name__}, expected a map")
    for key, typ in (("type", str), ("schema", int), ("sender", str), ("seq", int), ("meta", dict),
                     ("arrays", list)):
        if not isinstance(header.get(key), typ):
            raise WireError(f"header field '{key}' missing or not a {typ.__name__}")
    if header["schema"] != SCHEMA_VERSION:
        raise WireError(f"schema version {header['schema']} != {SCHEMA_VERSION}")
    if expected_types is not None and header["type"] not in expected_types:
        raise WireError(f"unexpected message type '{header['type']}' (expected one of {sorted(expected_types)})")
    specs = header["arrays"]
    if len(specs) > MAX_ARRAYS:
        raise WireError(f"{len(specs)} arrays exceed {MAX_ARRAYS}")
    if len(specs) != len(frames) - 1:
        raise WireError(f"header names {len(specs)} arrays but {len(frames) - 1} frames follow")
    arrays: dict[str, np.ndarray] = {}
    for spec, frame in zip(specs, frames[1:]):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise WireError("array spec without a name")
        name, dtype, shape = spec["name"], spec.get("dtype"), spec.get("shape")
        if dtype not in ALLOWED_DTYPES:
            raise WireError(f"array '{name}': dtype {dtype!r} not allowed")
        if not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape) or len(shape) > 8:
            raise WireError(f"array '{name}': bad shape {shape!r}")
        expected = math.prod(shape) * _DTYPES[dtype].itemsize
        if expected != len(frame):
            raise WireError(f"array '{name}': {len(frame)} bytes for shape {shape} of {dtype} ({expected} expected)")
        if name in arrays:
            raise WireError(f"array '{name}' appears twice")
        arrays[name] = np.frombuffer(frame, dtype=_DTYPES[dtype]).reshape(shape)
    return Message(header["type"], header["sender"], header["seq"], header["meta"], arrays)


@dataclass
class RejectCounter:
    """Counts dropped messages by reason, so a misbehaving peer is visible and never fatal."""

    total: int = 0
    last_reason: str = ""

    def reject(self, reason: str) -> None:
        self.total += 1
        self.last_reason = reason[:200]
