"""What stands between every command and the motors: limits, non-finite rejection, a watchdog, the e-stop.

``GuardedRobot`` wraps any HAL ``Robot`` (a real driver or its sim twin) and is itself one; the actor drives
its leased robot only through it. Each ``send_action(command)`` (joint position targets, robot units):

    e-stop latched          -> hold, the command ignored (counted)
    loop late (watchdog)    -> hold (counted), until the loop has been on time for ``watchdog_recover_ticks``
    NaN / inf in it         -> hold, the command rejected (counted); never an exception that ends the loop
    outside the joint range -> clipped to the robot's limits (counted)
    faster than allowed     -> each joint moved at most its speed limit / control_hz from the last command, or
                               for the first one from where the robot is (counted): one tick's worth,
                               however late the tick. ``max_speed`` for the arm's joints,
                               ``max_gripper_speed`` for a joint named ``gripper...``

Holding means commanding again the last command that was sent (position-controlled servos then stay where
they are); before any, the robot's measured joint positions (the first entries of its ``state``, as
``hardware.robot.joint_specs`` lays them out).

The watchdog has two triggers. ``watchdog_late_ticks`` commands in a row later than 1.5 control periods after the
one before (the loop is missing its deadlines: what it sends was planned for a moment that has passed; watched
only when the loop runs in wall time, ``watch_time``) hold the robot until the loop has been on time for
``watchdog_recover_ticks``. ``watchdog_stall_ticks`` ticks in a row without a policy action (``note_stalled``:
the policy stopped answering) trip it too, counted and said; the robot already holds on each stalled tick (the
episode loop sends the task's ``hold_action``), and the first tick with an action again releases it. It guards a
late loop or a silent policy, not a person: it lets go by itself. A move the task paces itself between episodes (a
reset's line to its pose, the person's teleop reset, the hold while they set the scene up: ``send_paced``) passes
every other check but is never held for lateness: each of its commands is one beat's step from the last one sent,
so a late beat only makes it slower, and holding it would leave the arm short of the pose the next episode starts
from. Its on-time beats still count toward letting a tripped watchdog go.

The e-stop (``EStop``) is a latch in a file of the run directory, so a key, a teleop button, the browser or
``robolearn estop`` from another shell can press it, and it survives every restart: a new actor process, a
reconnect or a reloaded page finds it latched. Only ``rearm`` (a person's explicit act) releases it; nothing
in this module ever does. (A run directory on a network file system may show a new latch file late: keep it on
a local disk.)
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

    max_speed: float = 360.0           # per arm joint, deg/s (the sim tasks move at most 150 at 25 Hz)
    max_gripper_speed: float = 1000.0  # the gripper, 0..100 units per second (the cube tasks: 375 at 25 Hz)
    watchdog_late_ticks: int = 5       # commands in a row later than 1.5 periods: hold
    watchdog_stall_ticks: int = 50     # ticks in a row without a policy action: hold (the policy stopped answering)
    watchdog_recover_ticks: int = 10   # on-time commands (with an action) before the watchdog lets go

    def __post_init__(self) -> None:
        if self.max_speed <= 0 or self.max_gripper_speed <= 0:
            raise ValueError(f"actor.safety.max_speed and max_gripper_speed must be > 0, got {self.max_speed}, "
                             f"{self.max_gripper_speed}")
        if min(self.watchdog_late_ticks, self.watchdog_stall_ticks, self.watchdog_recover_ticks) < 1:
            raise ValueError("actor.safety.watchdog_late_ticks, watchdog_stall_ticks and watchdog_recover_ticks "
                             "must be >= 1")


@dataclass
class SafetyCounts:
    """What the guard did, for the actor's status (``safety``)."""

    commands: int = 0
    clipped_to_limits: int = 0
    clipped_speed: int = 0
    clamped_by_driver: int = 0     # the driver sent less than asked (robot.max_relative_target: near the joints)
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


def _read_state(path: Path) -> EStopState:
    try:
        data = json.loads(path.read_text() or "{}")
    except FileNotFoundError:  # re-armed an instant ago
        return EStopState(False)
    except json.JSONDecodeError:  # a latch that cannot be read is a latch
        return EStopState(True, reason=f"unreadable e-stop file {path.name}")
    return EStopState(True, str(data.get("by", "")), str(data.get("reason", "")), float(data.get("at", 0.0)))


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

    def rearm(self) -> EStopState:
        """A person's explicit act: release this latch (not ``also``); returns the state it released. The file is
        taken away by one rename before it is read, so a press landing meanwhile is a new latch, not erased."""
        taken = self.path.with_suffix(f".rearmed.{os.getpid()}")
        try:
            os.replace(self.path, taken)
        except FileNotFoundError:
            return EStopState(False)
        state = _read_state(taken)
        taken.unlink()
        return state

    def state(self) -> EStopState:
        """The first latch that holds this robot (its own, then ``also``)."""
        for path in (self.path, *self.also):
            if path.exists():
                return _read_state(path)
        return EStopState(False)

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
        self._t_last: float | None = None      # the loop's last command
        self._t_paced: float | None = None     # the last paced command since the loop's last one (send_paced)
        self._late = self._stalled = self._on_time = 0
        self._late_trip = self._stall_trip = False
        names = robot.action_spec.array.names
        self._speed = np.array([config.max_gripper_speed if n.startswith("gripper") else config.max_speed
                                for n in names] if names else config.max_speed, np.float32)

    @property
    def watchdog_tripped(self) -> bool:
        return self._late_trip or self._stall_trip

    def __getattr__(self, name: str) -> Any:  # only called for what this class does not have
        if name == "robot" or name.startswith("__"):  # not yet set (copy, pickle): no recursion into itself
            raise AttributeError(name)
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
        now = time.monotonic()
        self._watch(now)
        self._t_last, self._t_paced = now, None
        return self._checked(action, watched=True)

    def send_paced(self, action: np.ndarray) -> np.ndarray:
        """A command of a move the task paces itself between episodes (``RealTaskEnv``'s reset and its waits): the
        e-stop, the limits, non-finite rejection and the speed limit as for ``send_action``; the lateness watchdog
        neither counts it late nor holds it, but while tripped its on-time beats count toward letting go, as the
        loop's do (so a trip late in an episode need not hold the next one's first ticks). The control loop's next
        command is not judged late against it."""
        now = time.monotonic()
        if self._late_trip:
            self._recovering(self._came_late(now, self._t_paced))
        self._t_last, self._t_paced = None, now
        return self._checked(action, watched=False)

    def _checked(self, action: np.ndarray, watched: bool) -> np.ndarray:
        self.counts.commands += 1
        if self.estop.latched:
            self.counts.held_for_estop += 1
            return self._send(self._hold())
        action = np.asarray(action, dtype=np.float32)
        if action.shape != self.action_spec.array.shape or not np.all(np.isfinite(action)):
            self.counts.rejected_non_finite += 1
            self.counts.note(f"rejected command {action.tolist()} (shape {action.shape}); holding")
            return self._send(self._hold())
        if self._late_trip and watched:
            self.counts.held_for_watchdog += 1
            return self._send(self._hold())
        command = self.action_spec.clip(action)
        if not np.array_equal(command, action):
            self.counts.clipped_to_limits += 1
        reference = self._hold()  # the first command too: from where the robot is
        step = self._speed * self.period
        limited = np.clip(command, reference - step, reference + step).astype(np.float32)
        if not np.array_equal(limited, command):
            self.counts.clipped_speed += 1
        return self._send(limited)

    def hold(self) -> np.ndarray:
        """Send the hold command (the last one again) between episodes, as while the e-stop is latched: a real
        arm's servos keep it there, a simulated one goes on being simulated there (it settles, as the real one
        does, instead of freezing mid-motion). Not a tick of the control loop: the watchdog does not see it."""
        if not getattr(self.robot, "holds_position", True):  # a gym env's "robot": its action steps the env
            return self._hold()
        if self.estop.latched:
            self.counts.held_for_estop += 1
        return self._send(self._hold())

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
        if self._stalled >= self.safety.watchdog_stall_ticks and not self._stall_trip:
            self._stall_trip = True
            self._count_trip(f"the policy gave no action for {self._stalled} ticks in a row; the robot holds")
        elif not stalled and self._stall_trip:
            self._stall_trip = False
            self.counts.note("the policy answers again")

    def _came_late(self, now: float, before: float | None) -> bool:
        return self.watch_time and before is not None and now - before > 1.5 * self.period

    def _watch(self, now: float) -> None:
        late = self._came_late(now, self._t_last)
        self._late = self._late + 1 if late else 0
        if self._late >= self.safety.watchdog_late_ticks and not self._late_trip:
            self._late_trip, self._on_time = True, 0
            self._count_trip(f"{self._late} commands in a row came late (the loop is missing its deadlines); holding")
        elif self._late_trip:
            self._recovering(late)

    def _recovering(self, late: bool) -> None:
        """One more command while tripped: on time, a step toward letting go; late, back to the start."""
        self._on_time = 0 if late else self._on_time + 1
        if self._on_time >= self.safety.watchdog_recover_ticks:
            self._late_trip = False
            self.counts.note(f"watchdog released after {self._on_time} on-time ticks")

    def _count_trip(self, reason: str) -> None:
        self.counts.watchdog_trips += 1
        self.counts.note(f"watchdog: {reason}")

    # --- holding
    def _hold(self) -> np.ndarray:
        if self._last is not None:
            return self._last
        measured = self.robot.get_observation()["state"][: self.action_spec.dim]
        return self.action_spec.clip(np.asarray(measured, np.float32))

    def _send(self, command: np.ndarray) -> np.ndarray:
        sent = np.asarray(self.robot.send_action(command), np.float32)
        # what the driver reports it sent (after its own clamp) is where the servos are told to be
        self._last = sent.copy() if sent.shape == command.shape else np.asarray(command, np.float32).copy()
        if sent.shape == command.shape and np.abs(sent - command).max(initial=0.0) > 1e-3:
            self.counts.clamped_by_driver += 1
        return sent
