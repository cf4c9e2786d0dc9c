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


class RobotSpecs:
    """Shared by drivers: the ``observation_spec`` / ``action_spec`` properties over ``_obs_spec`` /
    ``_action_spec``, which a driver sets in its constructor."""

    _obs_spec: ObservationSpec
    _action_spec: ActionSpec

    @property
    def observation_spec(self) -> ObservationSpec:
        return self._obs_spec

    @property
    def action_spec(self) -> ActionSpec:
        return self._action_spec


def check_max_relative_target(value: float | None) -> None:
    """``robot.max_relative_target`` (both SO-101 configs): None (off) or a positive distance in robot units."""
    if value is not None and not value > 0:
        raise ValueError(f"robot.max_relative_target must be > 0 (or null: off), got {value}")


def safe_action(action: np.ndarray, spec: ActionSpec) -> np.ndarray:
    """The one safety gate every driver applies: reject non-finite, clip to the robot's limits."""
    action = np.asarray(action, dtype=np.float32)
    if action.shape != spec.array.shape:
        raise UnsafeActionError(f"action shape {action.shape} != robot action shape {spec.array.shape}")
    if not np.all(np.isfinite(action)):
        raise UnsafeActionError(f"non-finite action {action.tolist()}")
    return spec.clip(action)


def joint_unit(units: list[str], per_second: bool = False) -> str:
    """One unit string for a joint vector, e.g. 'deg (x5), 0..100 (x1)'; velocities get '/s'."""
    runs: list[list] = []
    for u in units:
        u = f"{u}/s" if per_second else u
        if runs and runs[-1][0] == u:
            runs[-1][1] += 1
        else:
            runs.append([u, 1])
    return ", ".join(f"{u} (x{n})" for u, n in runs)


def joint_specs(joints: list[str], units: list[str], low: list[float], high: list[float],
                max_speed: float = 360.0) -> tuple[ObservationSpec, ActionSpec]:
    """The specs of a position-controlled arm: observation ``state`` = joint positions then velocities,
    action = joint position targets. Real drivers and their sim twins build theirs here, so one policy
    config runs on either."""
    from robolearn.specs import ArraySpec

    n = len(joints)
    action = ActionSpec(ArraySpec((n,), unit=joint_unit(units), names=tuple(f"{j}.pos" for j in joints),
                                  low=tuple(float(x) for x in low), high=tuple(float(x) for x in high)))
    obs = ObservationSpec({"state": ArraySpec(
        (2 * n,), unit=f"{joint_unit(units)}; {joint_unit(units, per_second=True)}",
        names=tuple(f"{j}.pos" for j in joints) + tuple(f"{j}.vel" for j in joints),
        low=tuple(float(x) for x in low) + (-max_speed,) * n, high=tuple(float(x) for x in high) + (max_speed,) * n,
    )})
    return obs, action
