"""Observation and action specs: names, shapes, units and bounds shared by robots, policies and buffers.

A spec is the contract at every boundary. Robots publish one, policies are built from one, the
buffer stores arrays that match one. ``validate`` fails loudly with a message that names the key and
the mismatch, so a wrong robot/policy pairing dies at start-up instead of training on garbage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class SpecError(ValueError):
    """An array or a dict of arrays does not match its spec; the message names the key."""


@dataclass(frozen=True)
class ArraySpec:
    """One named array: shape, dtype, physical unit and (optional) elementwise bounds.

    ``names`` labels each element of a 1-D array (e.g. ``shoulder_pan.pos``), as lerobot does.
    ``low``/``high`` are in ``unit``; they drive normalisation in policies and clipping in actors.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    unit: str = ""
    names: tuple[str, ...] = ()
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.names and (len(self.shape) != 1 or len(self.names) != self.shape[0]):
            raise SpecError(f"{len(self.names)} names given for an array of shape {self.shape}")
        for bound_name, bound in (("low", self.low), ("high", self.high)):
            if bound is not None and len(bound) != int(np.prod(self.shape)):
                raise SpecError(f"{bound_name} has {len(bound)} values for shape {self.shape}")
        if self.low is not None and self.high is not None and np.any(np.array(self.low) > np.array(self.high)):
            raise SpecError(f"low > high in {self.low} / {self.high}")

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def low_array(self) -> np.ndarray:
        return np.asarray(self.low, dtype=np.float32).reshape(self.shape)

    def high_array(self) -> np.ndarray:
        return np.asarray(self.high, dtype=np.float32).reshape(self.shape)

    def validate(self, key: str, value: np.ndarray) -> None:
        if not isinstance(value, np.ndarray):
            raise SpecError(f"'{key}': expected a numpy array, got {type(value).__name__}")
        if tuple(value.shape) != tuple(self.shape):
            raise SpecError(f"'{key}': shape {tuple(value.shape)} does not match spec {tuple(self.shape)}")
        if value.dtype != np.dtype(self.dtype):
            raise SpecError(f"'{key}': dtype {value.dtype} does not match spec {self.dtype}")


TEXT_UNIT = "utf-8"  # a uint8 (N,) observation with this unit is a sentence: its UTF-8 bytes, zero-padded


def text_spec(size: int) -> ArraySpec:
    """The spec of a text observation (an instruction) of at most ``size`` UTF-8 bytes."""
    return ArraySpec((size,), dtype="uint8", unit=TEXT_UNIT)


def is_text(spec: ArraySpec) -> bool:
    return spec.unit == TEXT_UNIT and spec.dtype == "uint8" and len(spec.shape) == 1


def encode_text(text: str, size: int) -> np.ndarray:
    """``text`` -> its UTF-8 bytes as uint8 (size,), zero-padded; a sentence that does not fit is an error (a cut
    instruction would silently mean something else)."""
    raw = text.encode("utf-8")
    if len(raw) > size or b"\0" in raw:
        raise SpecError(f"text {text!r} is {len(raw)} UTF-8 bytes (or holds a NUL); a text observation holds {size}")
    out = np.zeros(size, np.uint8)
    out[:len(raw)] = np.frombuffer(raw, np.uint8)
    return out


def decode_text(array: np.ndarray) -> str:
    """uint8 (N,) -> the sentence (the bytes before the first zero). Undecodable bytes are an error."""
    raw = bytes(np.asarray(array, np.uint8).tobytes()).split(b"\0", 1)[0]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"a text observation is not UTF-8: {exc}") from None


@dataclass(frozen=True)
class ObservationSpec:
    """A dict of named arrays, e.g. ``{"state": ArraySpec((15,), unit="deg|deg/s|m")}``."""

    arrays: dict[str, ArraySpec] = field(default_factory=dict)

    def select(self, keys: tuple[str, ...]) -> ObservationSpec:
        """The spec of ``keys`` alone (those this spec has)."""
        return ObservationSpec({k: v for k, v in self.arrays.items() if k in keys})

    def validate(self, obs: dict[str, np.ndarray]) -> None:
        missing = set(self.arrays) - set(obs)
        extra = set(obs) - set(self.arrays)
        if missing:
            raise SpecError(f"observation is missing key(s) {sorted(missing)}")
        if extra:
            raise SpecError(f"observation has unexpected key(s) {sorted(extra)}")
        for key, spec in self.arrays.items():
            spec.validate(f"observation.{key}", obs[key])


@dataclass(frozen=True)
class ActionSpec:
    """The action of one control tick, and the chunk horizon a policy emits per request.

    ``array.low``/``high`` are the hard limits the actor clips to (safety); policies work in
    [-1, 1] and map through ``to_robot``/``to_normalised``.
    """

    array: ArraySpec
    chunk_horizon: int = 1

    def __post_init__(self) -> None:
        if self.chunk_horizon < 1:
            raise SpecError(f"chunk_horizon must be >= 1, got {self.chunk_horizon}")
        if self.array.low is None or self.array.high is None:
            raise SpecError("an ActionSpec needs low and high bounds")

    @property
    def dim(self) -> int:
        return self.array.size

    def to_robot(self, normalised: np.ndarray) -> np.ndarray:
        """Map [-1, 1] actions (any leading shape) to robot units."""
        low, high = self.array.low_array(), self.array.high_array()
        return (low + (np.clip(normalised, -1.0, 1.0) + 1.0) * 0.5 * (high - low)).astype(np.float32)

    def to_normalised(self, action: np.ndarray) -> np.ndarray:
        low, high = self.array.low_array(), self.array.high_array()
        return (2.0 * (action - low) / (high - low) - 1.0).astype(np.float32)

    def clip(self, action: np.ndarray) -> np.ndarray:
        return np.clip(action, self.array.low_array(), self.array.high_array()).astype(np.float32)
