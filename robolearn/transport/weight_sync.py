"""Versioned weight publication with sparse deltas (docs/architecture.md, "Weights channel").

The publisher compares each tensor with the previous version bit for bit and, when that is smaller,
sends only the changed elements: their flat indices, delta-encoded (the first index, then gaps) in
the narrowest unsigned type that holds the largest gap, and their new values. A full snapshot goes
out instead when the patch would not be smaller, on the first publication, and every
``full_every`` versions (so a subscriber that missed a version, or joined late, catches up). Each
message carries a SHA-256 of the complete weights; the receiver checks it after applying a patch, so
a reconstruction is bit-exact or rejected. A version names one set of weights: ``repeat`` (a heartbeat)
re-sends the last version exactly as it went out, never weights changed since under its number, so a
subscriber that already holds it (and skips it) and the publisher's next delta still share their base.

Wire (a ``weights`` message of ``transport.wire``): meta ``{"version", "kind": "full" | "delta",
"base_version", "sha256"}``; arrays: ``<name>`` for a full tensor, ``<name>/idx`` and ``<name>/val``
for a patched one (a tensor absent from a delta did not change).
"""

from __future__ import annotations

import hashlib

import numpy as np

IDX, VAL = "/idx", "/val"


def weights_digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(str(a.dtype).encode())
        h.update(np.asarray(a.shape, np.int64).tobytes())
        h.update(a.tobytes())
    return h.hexdigest()


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of ``a`` as unsigned integers of the same width (so -0.0 != 0.0 and NaNs compare)."""
    return np.ascontiguousarray(a).reshape(-1).view(f"u{a.dtype.itemsize}")


def _nbytes(arrays: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in arrays.values())


def _encode_gaps(idx: np.ndarray) -> np.ndarray:
    gaps = np.diff(idx, prepend=0)
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if gaps.size == 0 or gaps.max() <= np.iinfo(dtype).max:
            return gaps.astype(dtype)
    raise AssertionError("unreachable")


class DeltaPublisher:
    """Turns successive weight versions into the messages to publish."""

    def __init__(self, full_every: int = 20) -> None:
        if full_every < 1:
            raise ValueError(f"full_every must be >= 1, got {full_every}")
        self.full_every = full_every
        self._last: dict[str, np.ndarray] | None = None
        self._last_version = 0
        self._last_digest = ""
        self._since_full = 0
        self.bytes_sent = 0
        self.bytes_full = 0  # what full snapshots of every version would have cost

    def encode(self, version: int, weights: dict[str, np.ndarray],
               force_full: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
        weights = {k: np.array(v, copy=True) for k, v in weights.items()}
        full_bytes = _nbytes(weights)
        meta = {"version": int(version), "sha256": weights_digest(weights), "base_version": self._last_version}
        arrays: dict[str, np.ndarray] = {}
        use_delta = (not force_full and self._last is not None and self._since_full + 1 < self.full_every
                     and set(self._last) == set(weights)
                     and all(self._last[k].shape == v.shape and self._last[k].dtype == v.dtype
                             for k, v in weights.items()))
        if use_delta:
            for name, a in weights.items():
                changed = np.flatnonzero(_bits(a) != _bits(self._last[name]))
                if changed.size:
                    arrays[name + IDX] = _encode_gaps(changed)
                    arrays[name + VAL] = a.reshape(-1)[changed]
            if _nbytes(arrays) >= full_bytes:
                use_delta = False
        if use_delta:
            meta["kind"] = "delta"
            self._since_full += 1
        else:
            meta["kind"], arrays = "full", weights
            self._since_full = 0
        self._last, self._last_version, self._last_digest = weights, int(version), meta["sha256"]
        self.bytes_sent += _nbytes(arrays)
        self.bytes_full += full_bytes
        return meta, arrays

    def repeat(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The last version again as a full snapshot, the weights it was published with (a heartbeat: a late
        subscriber catches up). RuntimeError before the first ``encode``."""
        if self._last is None:
            raise RuntimeError("no version published yet: nothing to repeat")
        full_bytes = _nbytes(self._last)
        self.bytes_sent += full_bytes
        self.bytes_full += full_bytes
        return ({"version": self._last_version, "sha256": self._last_digest, "base_version": self._last_version,
                 "kind": "full"}, self._last)


class DeltaSubscriber:
    """Rebuilds the publisher's weights from its messages. ``apply`` returns the full weights of the new
    version, or raises ``ValueError`` (missed base version, bad patch, hash mismatch): the caller counts
    it and waits for the next full snapshot."""

    def __init__(self, expected: dict[str, tuple[tuple[int, ...], str]]) -> None:
        self.expected = expected  # name -> (shape, dtype)
        self.current: dict[str, np.ndarray] | None = None
        self.version = 0

    def apply(self, meta: dict, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kind, version = meta.get("kind", "full"), meta.get("version")
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"weights without a valid version: {version!r}")
        if kind == "full":
            new = {k: np.array(v, copy=True) for k, v in arrays.items()}
            self._check_layout(new)
        elif kind == "delta":
            if self.current is None or meta.get("base_version") != self.version:
                raise ValueError(f"delta for base v{meta.get('base_version')} but this receiver holds "
                                 f"v{self.version}: waiting for a full snapshot")
            new = {k: v.copy() for k, v in self.current.items()}
            for key, value in arrays.items():
                name = key.removesuffix(IDX).removesuffix(VAL)
                if name not in new or not (key.endswith(IDX) or key.endswith(VAL)):
                    raise ValueError(f"delta names unknown array {key!r}")
                if key.endswith(IDX):
                    vals = arrays.get(name + VAL)
                    if vals is None or vals.shape != value.shape or vals.dtype != new[name].dtype:
                        raise ValueError(f"delta for {name!r}: values missing or not matching the indices")
                    idx = np.cumsum(value.astype(np.int64))
                    flat = new[name].reshape(-1)
                    if idx.size and (idx[-1] >= flat.size or np.any(np.diff(idx) <= 0) and idx.size > 1):
                        raise ValueError(f"delta for {name!r}: indices out of range or not increasing")
                    flat[idx] = vals
        else:
            raise ValueError(f"unknown weights kind {kind!r}")
        digest = weights_digest(new)
        if digest != meta.get("sha256"):
            raise ValueError(f"weights v{version}: hash mismatch after {kind} (reconstruction not bit-exact)")
        self.current, self.version = new, version
        return new

    def _check_layout(self, arrays: dict[str, np.ndarray]) -> None:
        if set(arrays) != set(self.expected):
            diff = sorted(set(arrays) ^ set(self.expected))
            raise ValueError(f"weights do not match the policy's parameters: {diff}")
        for name, arr in arrays.items():
            shape, dtype = self.expected[name]
            if tuple(arr.shape) != shape or arr.dtype != np.dtype(dtype):
                raise ValueError(f"weights '{name}': {arr.dtype}{tuple(arr.shape)} != {dtype}{shape}")
