"""What stands between every command and the motors: limits, non-finite rejection, a watchdog, the e-stop.

``GuardedRobot`` wraps any HAL ``Robot`` (a real driver or its sim twin) and is itself one; the actor drives
its leased robot only through it. Each ``send_action(command)`` (joint position targets, robot units):

    e-stop latched          -> hold, the command ignored (counted)
    watchdog tripped        -> hold (counted), until the loop has been on time for ``watchdog_recover_ticks``
    NaN / inf in it         -> hold, the command rejected (counted); never an exception that ends the loop
    outside the joint range -> clipped to the robot's limits (counted)
    faster than allowed     -> each joint moved at most ``max_speed`` / control_hz from the last command, or
                               for the first one from where the robot is (counted): one tick's worth,
                               however late the tick

Holding means commanding again the last command that was sent (position-controlled servos then stay where
they are); before any, the robot's measured joint positions (the first entries of its ``state``, as
``hardware.robot.joint_specs`` lays them out).

The watchdog trips when ``watchdog_late_ticks`` commands in a row come later than 1.5 control periods after
the one before (the loop is missing its deadlines: what it sends was planned for a moment that has passed;
watched only when the loop runs in wall time, ``watch_time``) or when ``note_stalled`` was told of
``watchdog_stall_ticks`` stalled ticks in a row (the policy stopped answering). It releases by itself once the
loop is on time again: it guards a late loop, not a person.

The e-stop (``EStop``) is a latch in a file of the run directory, so a key, a teleop button, the browser or
``robolearn estop`` from another shell can press it, and it survives every restart: a new actor process, a
reconnect or a reloaded page finds it latched. Only ``rearm`` (a person's explicit act) releases it; nothing
in this module ever does.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.hardware.robot import Robot
from robolearn.specs import ActionSpec, ObservationSpec


@dataclass
class SafetyConfig:
    """``actor.safety.*``."""

    max_speed: float = 360.0           # per joint, robot units per second (deg/s; gripper 0..100 per s)
    watchdog_late_ticks: int = 5       # commands in a row later than 1.5 periods: hold
    watchdog_stall_ticks: int = 50     # ticks in a row without a policy action: hold (the policy stopped answering)
    watchdog_recover_ticks: int = 10   # on-time commands (with an action) before the watchdog lets go

    def __post_init__(self) -> None:
        if self.max_speed <= 0:
            raise ValueError(f"actor.safety.max_speed must be > 0, got {self.max_speed}")
        if min(self.watchdog_late_ticks, self.watchdog_stall_ticks, self.watchdog_recover_ticks) < 1:
            raise ValueError("actor.safety.watchdog_late_ticks, watchdog_stall_ticks and watchdog_recover_ticks "
                             "must be >= 1")


@dataclass
class SafetyCounts:
    """What the guard did, for the actor's status and the run summary."""

    commands: int = 0
    clipped_to_limits: int = 0
    clipped_speed: int = 0
    rejected_non_finite: int = 0
    held_for_estop: int = 0
    held_for_watchdog: int = 0
    watchdog_trips: int = 0
    reasons: list[str] = field(default_factory=list)  # the last few trips and rejections, newest last

    def note(self, reason: str) -> None:
        self.reasons = [*self.reasons[-9:], reason]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EStopState:
    latched: bool
    by: str = ""
    reason: str = ""
    at: float = 0.0  # time.time() it was pressed


class EStop:
    """The latch: pressed by writing ``path``, released only by ``rearm`` removing it. ``also``: latches
    that hold this robot too (the run's ``all``), which its own ``rearm`` does not release."""

    def __init__(self, path: Path, also: tuple[Path, ...] = ()) -> None:
        self.path, self.also = path, also

    def press(self, by: str, reason: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"by": by, "reason": reason, "at": time.time()}))
        tmp.replace(self.path)

    def rearm(self, by: str) -> EStopState:  # noqa: ARG002  (who re-armed goes to the caller's log)
        """A person's explicit act: release the latch; returns the state it released."""
        state = self.state()
        self.path.unlink(missing_ok=True)
        return state

    def state(self) -> EStopState:
        try:
            data = json.loads(self.path.read_text() or "{}")
        except FileNotFoundError:
            return EStopState(False)
        except json.JSONDecodeError:  # being written, or torn: a latch that cannot be read is a latch
            return EStopState(True, reason="unreadable e-stop file")
        return EStopState(True, str(data.get("by", "")), str(data.get("reason", "")), float(data.get("at", 0.0)))

    @property
    def latched(self) -> bool:
        return self.path.exists() or any(p.exists() for p in self.also)


class GuardedRobot:
    """A ``Robot`` whose every command passes the checks above. Other attributes reach the wrapped robot
    (a sim twin's ``reset_to``, ``commanded_positions``, ...)."""

    def __init__(self, robot: Robot, config: SafetyConfig, estop: EStop, control_hz: float,
                 watch_time: bool = True) -> None:
        self.robot, self.safety, self.estop = robot, config, estop
        self.name = robot.name
        self.period = 1.0 / control_hz
        self.watch_time = watch_time  # False under a simulated clock: wall time says nothing about its ticks
        self.counts = SafetyCounts()
        self._last: np.ndarray | None = None   # the last command sent
        self._t_last: float | None = None
        self._late = self._stalled = self._on_time = 0
        self.watchdog_tripped = False

    def __getattr__(self, name: str) -> Any:  # only called for what this class does not have
        return getattr(self.robot, name)

    # --- the Robot protocol
    @property
    def observation_spec(self) -> ObservationSpec:
        return self.robot.observation_spec

    @property
    def action_spec(self) -> ActionSpec:
        return self.robot.action_spec

    @property
    def is_connected(self) -> bool:
        return self.robot.is_connected

    def connect(self) -> None:
        self.robot.connect()

    def disconnect(self) -> None:
        self.robot.disconnect()

    def get_observation(self) -> dict[str, np.ndarray]:
        return self.robot.get_observation()

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self.counts.commands += 1
        now = time.monotonic()
        self._watch(now)
        self._t_last = now
        if self.estop.latched:
            self.counts.held_for_estop += 1
            return self._send(self._hold())
        action = np.asarray(action, dtype=np.float32)
        if action.shape != self.action_spec.array.shape or not np.all(np.isfinite(action)):
            self.counts.rejected_non_finite += 1
            self.counts.note(f"rejected command {action.tolist()} (shape {action.shape}); holding")
            return self._send(self._hold())
        if self.watchdog_tripped:
            self.counts.held_for_watchdog += 1
            return self._send(self._hold())
        command = self.action_spec.clip(action)
        if not np.array_equal(command, action):
            self.counts.clipped_to_limits += 1
        reference = self._hold()  # the first command too: from where the robot is
        step = self.safety.max_speed * self.period
        limited = np.clip(command, reference - step, reference + step).astype(np.float32)
        if not np.array_equal(limited, command):
            self.counts.clipped_speed += 1
        return self._send(limited)

    def reset_to(self, joint_positions: np.ndarray) -> None:
        """A simulator's reset places the arm without a command: the next command's speed is measured from
        there, not from the last command before it. (A real robot has no such call: its reset is a motion
        through ``send_action``.)"""
        self.robot.reset_to(joint_positions)
        self._last = self.action_spec.clip(np.asarray(joint_positions, np.float32))

    # --- the watchdog
    def note_stalled(self, stalled: bool) -> None:
        """Told each tick whether the policy had an action for it."""
        self._stalled = self._stalled + 1 if stalled else 0
        if self._stalled >= self.safety.watchdog_stall_ticks:
            self._trip(f"the policy gave no action for {self._stalled} ticks in a row")

    def _watch(self, now: float) -> None:
        late = self.watch_time and self._t_last is not None and now - self._t_last > 1.5 * self.period
        self._late = self._late + 1 if late else 0
        if self._late >= self.safety.watchdog_late_ticks:
            self._trip(f"{self._late} commands in a row came late (the loop is missing its deadlines)")
        if self.watchdog_tripped:
            self._on_time = self._on_time + 1 if not late and self._stalled == 0 else 0
            if self._on_time >= self.safety.watchdog_recover_ticks:
                self.watchdog_tripped = False
                self.counts.note(f"watchdog released after {self._on_time} on-time ticks")

    def _trip(self, reason: str) -> None:
        if not self.watchdog_tripped:
            self.watchdog_tripped, self._on_time = True, 0
            self.counts.watchdog_trips += 1
            self.counts.note(f"watchdog: {reason}; holding")

    # --- holding
    def _hold(self) -> np.ndarray:
        if self._last is not None:
            return self._last
        measured = self.robot.get_observation()["state"][: self.action_spec.dim]
        return self.action_spec.clip(np.asarray(measured, np.float32))

    def _send(self, command: np.ndarray) -> np.ndarray:
        sent = self.robot.send_action(command)
        self._last = np.asarray(command, np.float32).copy()
        return sent
