"""The HAL task protocol: what the control loop drives, a robot inside a task with reward and episode ends.

The sim tasks (``robolearn.sim``), any gymnasium env (``hardware.gym_adapter``) and, later, tasks on a
real arm all present this interface. Observations and actions are dicts/arrays in the task's units
(``observation_spec`` / ``action_spec``); ``robot`` is the HAL robot the actor leases, connects after
its lease is granted and disconnects before releasing it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from robolearn.hardware.robot import Robot
from robolearn.specs import ActionSpec, ObservationSpec


@runtime_checkable
class TaskEnv(Protocol):
    observation_spec: ObservationSpec
    action_spec: ActionSpec
    robot: Robot

    def reset(self, *, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]: ...

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        """(next observation, reward, terminated, truncated, info with ``success``). Where the robot did not
        execute ``action`` as given (clipped at a joint limit or by the safety guard, held), info carries
        ``executed_action``: what it did execute, in the task's action units; that is what gets recorded."""
        ...

    def close(self) -> None: ...
