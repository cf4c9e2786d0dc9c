"""What an actor asks a policy for and what it gets back, and how both travel on the wire.

A request carries the observation it was taken from and its tick, the committed actions (queued
actions that will execute while the chunk is computed; ARLI state augmentation / the RTC prefix),
and the delay in ticks it was planned for; a two-stage request is completed later by a
mid-inference observation (ARLI, docs/algorithms.md, "Two-stage scheduling"). The response is a chunk for
ticks ``tick .. tick+H-1``
whose first ``prefix_len`` actions equal the committed ones (for prefix-conditioned policies),
tagged with the weight version that computed it.

Wire: ``chunk_request``, ``chunk_mid`` and ``chunk`` messages of ``transport.wire`` (msgpack header + raw
arrays). A two-stage request (``mid_ticks`` > 0) goes out as a ``chunk_request`` that announces its mid observation;
the server runs the policy's trunk on it at once, and the ``chunk_mid`` message (the request's id, the mid
observation and its tick) lets the head finish the chunk, which says the tick it starts at (``chunk_start``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from robolearn.transport.wire import Message, WireError

REQUEST, MID, RESPONSE = "chunk_request", "chunk_mid", "chunk"
OBS_PREFIX = "obs."
# What a mid observation carries: a two-stage policy's light head reads the state alone (docs/algorithms.md,
# "Two-stage scheduling"); the cameras and the instruction would only delay it on the wire, on the critical path
MID_KEYS = ("state",)


def mid_part(observation: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The part of an observation a mid observation carries (``MID_KEYS``)."""
    return {k: observation[k] for k in MID_KEYS if k in observation}


def check_mid_timeout(seconds: float, name: str = "mid_timeout_s") -> float:
    """``seconds``, the longest a two-stage request waits for its mid observation, if it is a number > 0."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{name} must be a number > 0, got {seconds}")
    return seconds


@dataclass
class ChunkRequest:
    request_id: int
    tick: int                       # the observation's tick; the chunk starts at this tick
    observation: dict[str, np.ndarray]
    prefix: np.ndarray              # (d, A) committed actions, normalised to [-1, 1]
    planned_delay: int = 0          # ticks the scheduler expects the inference to take
    robot_id: str = ""
    # two-stage (ARLI late binding): mid_ticks > 0 announces a mid-inference observation, taken
    # mid_ticks before the chunk is due; the client attaches it (mid_observation, its tick mid_tick)
    mid_ticks: int = 0
    mid_observation: dict[str, np.ndarray] | None = None
    mid_tick: int | None = None

    @property
    def prefix_len(self) -> int:
        return int(self.prefix.shape[0])


@dataclass
class ChunkResponse:
    request_id: int
    tick: int                       # start tick of the chunk (= the request's tick)
    actions: np.ndarray             # (H, A) normalised
    policy_version: int
    prefix_len: int = 0
    compute_ms: float = 0.0
    # two-stage: the answer was held back waiting for the mid observation (the delay it shows is then
    # the executor's own timing, not the policy's)
    waited_for_mid: bool = False
    # two-stage: the chunk starts at the mid observation's tick (and prefix_len counts from there)
    chunk_start: int | None = None


@dataclass(frozen=True)
class MidObservation:
    """The mid-inference observation of two-stage request ``request_id``, taken at ``tick`` (on the wire, its
    ``MID_KEYS`` alone)."""

    request_id: int
    tick: int
    observation: dict[str, np.ndarray]
    robot_id: str = ""


def request_to_wire(req: ChunkRequest) -> tuple[dict, dict[str, np.ndarray]]:
    meta = {"request_id": req.request_id, "tick": req.tick, "planned_delay": req.planned_delay,
            "mid_ticks": req.mid_ticks}
    arrays = {f"{OBS_PREFIX}{k}": v for k, v in req.observation.items()}
    arrays["prefix"] = np.asarray(req.prefix, np.float32)
    return meta, arrays


def request_from_wire(msg: Message) -> ChunkRequest:
    meta = msg.meta
    for key in ("request_id", "tick", "planned_delay"):
        if not isinstance(meta.get(key), int):
            raise WireError(f"chunk_request field '{key}' missing or not an int")
    prefix = msg.arrays.get("prefix")
    if prefix is None or prefix.ndim != 2 or prefix.dtype != np.float32:
        raise WireError("chunk_request needs a float32 'prefix' of shape (d, A)")
    mid_ticks = meta.get("mid_ticks", 0)
    if type(mid_ticks) is not int or mid_ticks < 0:
        raise WireError(f"chunk_request field 'mid_ticks' must be an int >= 0, got {mid_ticks!r}")
    return ChunkRequest(meta["request_id"], meta["tick"], _observation(msg), prefix, meta["planned_delay"],
                        msg.sender, mid_ticks=mid_ticks)


def _observation(msg: Message) -> dict[str, np.ndarray]:
    return {k.removeprefix(OBS_PREFIX): v for k, v in msg.arrays.items() if k.startswith(OBS_PREFIX)}


def mid_to_wire(mid: MidObservation) -> tuple[dict, dict[str, np.ndarray]]:
    return ({"request_id": mid.request_id, "tick": mid.tick},
            {f"{OBS_PREFIX}{k}": v for k, v in mid_part(mid.observation).items()})


def mid_from_wire(msg: Message) -> MidObservation:
    for key in ("request_id", "tick"):
        if type(msg.meta.get(key)) is not int:
            raise WireError(f"chunk_mid field '{key}' missing or not an int")
    return MidObservation(msg.meta["request_id"], msg.meta["tick"], _observation(msg), msg.sender)


def response_to_wire(resp: ChunkResponse) -> tuple[dict, dict[str, np.ndarray]]:
    meta = {"request_id": resp.request_id, "tick": resp.tick, "version": resp.policy_version,
            "prefix_len": resp.prefix_len, "compute_ms": resp.compute_ms, "waited_for_mid": resp.waited_for_mid}
    if resp.chunk_start is not None:
        meta["chunk_start"] = resp.chunk_start
    return meta, {"actions": np.asarray(resp.actions, np.float32)}


def response_from_wire(msg: Message, horizon: int, action_dim: int) -> ChunkResponse:
    """A chunk as the client expects it, or ``WireError`` naming what is off: ``actions`` float32 of exactly
    (``horizon``, ``action_dim``) (a (H, 1) array must not broadcast to every joint) and finite, integer ids,
    a ``prefix_len`` inside the chunk, and a finite non-negative ``compute_ms``."""
    meta = msg.meta
    for key in ("request_id", "tick", "version", "prefix_len"):
        if type(meta.get(key)) is not int:
            raise WireError(f"chunk field '{key}' missing or not an int")
    actions = msg.arrays.get("actions")
    if actions is None or actions.dtype != np.float32 or actions.shape != (horizon, action_dim):
        got = "none" if actions is None else f"{actions.dtype} {tuple(actions.shape)}"
        raise WireError(f"chunk 'actions' must be float32 of shape ({horizon}, {action_dim}), got {got}")
    if not np.all(np.isfinite(actions)):
        raise WireError("chunk 'actions' holds non-finite values")
    if not 0 <= meta["prefix_len"] < horizon:
        raise WireError(f"chunk 'prefix_len' {meta['prefix_len']} outside the chunk of {horizon}")
    compute_ms = meta.get("compute_ms", 0.0)
    if type(compute_ms) not in (int, float) or not math.isfinite(compute_ms) or compute_ms < 0:
        raise WireError(f"chunk 'compute_ms' must be a finite number >= 0, got {compute_ms!r}")
    chunk_start = meta.get("chunk_start")
    if chunk_start is not None and (type(chunk_start) is not int or
                                    not meta["tick"] <= chunk_start < meta["tick"] + horizon):
        raise WireError(f"chunk 'chunk_start' must be an int in [tick, tick + {horizon}), got {chunk_start!r}")
    waited = meta.get("waited_for_mid", False)
    if type(waited) is not bool:
        raise WireError(f"chunk 'waited_for_mid' must be a bool, got {waited!r}")
    return ChunkResponse(meta["request_id"], meta["tick"], actions, meta["version"], meta["prefix_len"],
                         float(compute_ms), waited_for_mid=waited, chunk_start=chunk_start)
