"""The HAL robot protocol: what an actor needs from any robot, real or simulated.

Units follow lerobot's drivers (so101_follower with ``use_degrees=True``): arm joints in degrees,
gripper in 0..100. A robot's ``action_spec`` bounds are its hard limits: ``send_action`` clips to
them and rejects non-finite values, whatever the caller sent.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from robolearn.specs import ActionSpec, ObservationSpec


class UnsafeActionError(ValueError):
    """An action with NaN or inf: never sent to a motor."""


@runtime_checkable
class Robot(Protocol):
    """A robot as the control loop sees it. Observations and actions are dicts/arrays in robot units."""

    name: str

    @property
    def observation_spec(self) -> ObservationSpec: ...

    @property
    def action_spec(self) -> ActionSpec: ...

    @property
    def is_connected(self) -> bool: ...

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def get_observation(self) -> dict[str, np.ndarray]: ...

    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Command ``action`` (robot units); return what was actually sent after safety clipping."""
        ...


def safe_action(action: np.ndarray, spec: ActionSpec) -> np.ndarray:
    """The one safety gate every driver applies: reject non-finite, clip to the robot's limits."""
    action = np.asarray(action, dtype=np.float32)
    if action.shape != spec.array.shape:
        raise UnsafeActionError(f"action shape {action.shape} != robot action shape {spec.array.shape}")
    if not np.all(np.isfinite(action)):
        raise UnsafeActionError(f"non-finite action {action.tolist()}")
    return spec.clip(action)
