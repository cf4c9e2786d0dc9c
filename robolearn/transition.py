"""The one step-record schema used by the actor, the wire, the buffer and the learner.

A ``TransitionBatch`` is columnar: every field is an array whose first axis is the step. Observation
arrays are stored under ``obs.<key>``; ``final_obs.<key>`` holds the observation after the last step
of an episode, sent only with a batch that ends an episode (next observations are otherwise the
following step's observation, so they are never sent or stored twice).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from robolearn.specs import ActionSpec, ObservationSpec, SpecError


class ActionSource(IntEnum):
    POLICY = 0
    HUMAN = 1
    SCRIPTED = 2


# field name -> dtype; every transition has all of these (shape (N,) unless noted).
SCALAR_FIELDS: dict[str, str] = {
    "action_source": "uint8",   # ActionSource
    "intervention": "bool",
    "reward": "float32",
    "terminated": "bool",
    "truncated": "bool",
    "success": "bool",
    "episode_id": "int64",
    "step": "int32",            # step index within the episode
    "tick": "int64",            # control tick the action executed at
    "t_obs": "float64",         # wall time (s) the observation was taken
    "t_act": "float64",         # wall time (s) the action was sent
    "policy_version": "int64",  # version of the weights that produced the action
    "chunk_id": "int64",
    "chunk_index": "int32",     # index of the action within its chunk
    "delay_ticks": "int32",     # inference delay (ticks) the chunk was computed for
}
_SCALAR_DTYPES = {name: np.dtype(dtype) for name, dtype in SCALAR_FIELDS.items()}
OBS_PREFIX = "obs."
FINAL_OBS_PREFIX = "final_obs."


def validate_batch(arrays: dict[str, np.ndarray], obs_spec: ObservationSpec, action_spec: ActionSpec) -> int:
    """Check a received batch against the schema and the run's specs; return its length.

    Raises ``SpecError`` naming the first offending field.
    """
    if "action" not in arrays:
        raise SpecError("transition batch has no 'action'")
    n = arrays["action"].shape[0] if arrays["action"].ndim else -1
    if n <= 0:
        raise SpecError("transition batch is empty or 'action' has no step axis")
    expected = {f"{OBS_PREFIX}{k}" for k in obs_spec.arrays} | set(SCALAR_FIELDS) | {"action"}
    allowed = expected | {f"{FINAL_OBS_PREFIX}{k}" for k in obs_spec.arrays}
    missing, extra = expected - set(arrays), set(arrays) - allowed
    if missing:
        raise SpecError(f"transition batch is missing field(s) {sorted(missing)}")
    if extra:
        raise SpecError(f"transition batch has unknown field(s) {sorted(extra)}")
    for name, dtype in _SCALAR_DTYPES.items():
        if arrays[name].shape != (n,) or arrays[name].dtype != dtype:
            raise SpecError(f"field '{name}': got {arrays[name].dtype}{arrays[name].shape}, expected {dtype}({n},)")
    act = arrays["action"]
    if act.shape != (n, *action_spec.array.shape) or act.dtype != np.dtype(action_spec.array.dtype):
        raise SpecError(f"field 'action': got {act.dtype}{act.shape}, expected {action_spec.array.dtype}"
                        f"({n}, {', '.join(map(str, action_spec.array.shape))})")
    if not np.all(np.isfinite(act)):
        raise SpecError("field 'action' contains NaN or inf")
    for key, spec in obs_spec.arrays.items():
        obs = arrays[f"{OBS_PREFIX}{key}"]
        if obs.shape != (n, *spec.shape) or obs.dtype != np.dtype(spec.dtype):
            raise SpecError(f"field 'obs.{key}': got {obs.dtype}{obs.shape}, expected {spec.dtype}(n, {spec.shape})")
        final = arrays.get(f"{FINAL_OBS_PREFIX}{key}")
        if final is not None and (final.shape != tuple(spec.shape) or final.dtype != np.dtype(spec.dtype)):
            raise SpecError(f"field 'final_obs.{key}': got {final.dtype}{final.shape}, expected {spec.shape}")
    ends = arrays["terminated"] | arrays["truncated"]
    if ends[:-1].any():
        raise SpecError("an episode may only end at the last step of a batch")
    has_final = all(f"{FINAL_OBS_PREFIX}{k}" in arrays for k in obs_spec.arrays)
    if bool(ends[-1]) != has_final:
        raise SpecError("final_obs must be sent exactly with a batch whose last step ends an episode")
    return n


class TransitionWriter:
    """Accumulates one episode's steps on the actor side and emits columnar batches."""

    def __init__(self, obs_spec: ObservationSpec) -> None:
        self.obs_spec = obs_spec
        self._rows: list[dict] = []

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, obs: dict[str, np.ndarray], action: np.ndarray, **fields) -> None:
        unknown = set(fields) - set(SCALAR_FIELDS)
        if unknown:
            raise SpecError(f"unknown transition field(s) {sorted(unknown)}")
        self._rows.append({"obs": obs, "action": action, **fields})

    def flush(self, final_obs: dict[str, np.ndarray] | None = None, truncate: bool = False) -> dict[str, np.ndarray]:
        """Emit the buffered steps. Pass ``final_obs`` when the last step ends the episode;
        ``truncate=True`` marks it truncated (an episode cut short by a stop)."""
        rows, self._rows = self._rows, []
        if truncate:
            rows[-1]["truncated"] = True
        out: dict[str, np.ndarray] = {
            "action": np.stack([r["action"] for r in rows]).astype(np.float32),
        }
        for key, spec in self.obs_spec.arrays.items():
            out[f"{OBS_PREFIX}{key}"] = np.stack([r["obs"][key] for r in rows]).astype(spec.dtype)
            if final_obs is not None:
                out[f"{FINAL_OBS_PREFIX}{key}"] = np.asarray(final_obs[key], dtype=spec.dtype)
        for name, dtype in SCALAR_FIELDS.items():
            out[name] = np.asarray([r[name] for r in rows], dtype=dtype)
        return out
