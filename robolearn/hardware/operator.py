"""The person at a real robot, as the run sees them: ``teleop=keyboard``, ``gamepad``, ``so101_leader`` or, on the
sim twin only, ``teleop=scripted``.

A person gives the run four things: labels (success, failure, re-record), "ready" after a reset, the e-stop,
and, while they take over, the robot's command. ``Operator`` reads their keys from a terminal
(``hardware.terminal_keys``: over SSH, without X) and their teleop device, and is at once

- the loop's ``Intervener`` (``actor.episode.TickDriver``): while they take over, ``read()`` returns the task
  action that moves the command toward their target (leader arm: its joint positions; keyboard: a gripper
  tip target solved through the arm's inverse kinematics), and
- the task's reward source and reset partner (``tasks/real.py``): ``take_label()``, ``take_ready()``.

**Bumpless.** Whoever drives, the command moves from where the arm is told to be toward the person's target
by at most ``max_speed`` / ``control_hz`` per tick (``max_gripper_speed`` for the gripper): taking over
with the leader arm 60 degrees away from the follower moves the follower there over a second or so, never
in one jump (lerobot's teleoperation jumps). Handing back is bumpless too: the policy's actions are
bounded changes of the command it finds.

``teleop=gamepad`` (``hardware.gamepad``, evdev): hold the right shoulder to take over (a dead-man: letting go
hands back), the sticks move the tip target, the triggers the gripper, A/B/X label, Start is ready, Select
or the centre button the e-stop (``GAMEPAD_HELP``); the terminal's keys work beside it.

Keys (``KEYS``; ``h`` prints them): ``y`` success, ``n`` failure, ``r`` re-record (each ends the episode),
Enter ready, space takes over / hands back (a terminal has no key-up, so it is a toggle), ``e`` or Esc the
e-stop. ``teleop=keyboard`` moves the tip target by ``step_m`` per key while taking over: ``w``/``s``
(or up/down) +x/-x, ``a``/``d`` (or left/right) +y/-y, ``q``/``z`` up/down, ``o``/``c`` open/close.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from robolearn.hardware.safety import EStop
from robolearn.hardware.teleop import LerobotTeleop, LerobotTeleopConfig, TeleopEvent, TeleopReading
from robolearn.hardware.terminal_keys import TerminalKeys
from robolearn.transport.gui_channel import Command

KEYS = {"y": TeleopEvent.SUCCESS, "n": TeleopEvent.FAILURE, "r": TeleopEvent.RERECORD, "enter": TeleopEvent.READY,
        "space": TeleopEvent.INTERVENTION_ON, "e": TeleopEvent.ESTOP, "esc": TeleopEvent.ESTOP}
LABELS = (TeleopEvent.SUCCESS, TeleopEvent.FAILURE, TeleopEvent.RERECORD)
GUI_LABELS = {"success": TeleopEvent.SUCCESS, "failure": TeleopEvent.FAILURE, "rerecord": TeleopEvent.RERECORD}
TIP_KEYS = {"w": (0, 1), "up": (0, 1), "s": (0, -1), "down": (0, -1), "a": (1, 1), "left": (1, 1),
            "d": (1, -1), "right": (1, -1), "q": (2, 1), "z": (2, -1)}
HELP = ("keys: y success | n failure | r re-record | Enter ready | space take over / hand back | "
        "e or Esc E-STOP | h help")
TIP_HELP = "while taking over: w/s +x/-x | a/d +y/-y | q/z up/down | o/c open/close the gripper"


@dataclass
class PersonConfig:
    """What every ``teleop=...`` option has."""

    name: str = "none"
    tty: str = "auto"                  # the terminal the keys come from; auto: the one robolearn run started in
    max_speed: float = 90.0            # deg/s: the command's change per second while the person drives
    max_gripper_speed: float = 200.0   # gripper units/s

    def __post_init__(self) -> None:
        if self.max_speed <= 0 or self.max_gripper_speed <= 0:
            raise ValueError(f"teleop.max_speed and teleop.max_gripper_speed must be > 0, got {self.max_speed}, "
                             f"{self.max_gripper_speed}")


@dataclass
class KeyboardTeleopConfig(PersonConfig):
    """``teleop=keyboard``: keys drive the gripper tip (inverse kinematics) while taking over."""

    name: str = "keyboard"
    step_m: float = 0.01               # tip target moved per key press (auto-repeat while held)
    gripper_step: float = 20.0         # gripper target per o/c press (0..100 units)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step_m <= 0 or self.gripper_step <= 0:
            raise ValueError("teleop.step_m and teleop.gripper_step must be > 0")


@dataclass
class GamepadTeleopConfig(PersonConfig):
    """``teleop=gamepad``: a gamepad through evdev drives the gripper tip; hold the right shoulder to take over."""

    name: str = "gamepad"
    device: str = ""                   # /dev/input/by-id/...-event-joystick (or /dev/input/eventN)
    tip_speed: float = 0.15            # m/s of the tip target at full stick
    gripper_rate: float = 100.0        # gripper units/s at full trigger
    deadzone: float = 0.15             # stick values below this are 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.device:
            raise ValueError("teleop=gamepad needs teleop.device=/dev/input/by-id/<...>-event-joystick "
                             "(ls that folder)")
        if self.tip_speed <= 0 or self.gripper_rate <= 0 or not 0 <= self.deadzone < 1:
            raise ValueError("teleop.tip_speed and teleop.gripper_rate must be > 0, teleop.deadzone in [0, 1)")


@dataclass
class LeaderTeleopConfig(PersonConfig, LerobotTeleopConfig):
    """``teleop=so101_leader`` (or another lerobot leader arm type): the device gives joint targets."""

    name: str = "so101_leader"
    always_intervening: bool = False   # not used here: the leader drives only while the person has taken over (space)


@dataclass
class NoTeleopConfig:
    """``teleop=none``: no person (sim tasks)."""

    name: str = "none"


class Arm(Protocol):
    """What the person's commands are made against: the task on the robot (``tasks/real.py``)."""

    control_hz: float

    def commanded(self) -> np.ndarray:
        """The joint targets (robot units) the arm is told to hold now."""

    def action_toward(self, joint_target: np.ndarray) -> np.ndarray:
        """The task action that moves the command toward ``joint_target`` (bounded by the task)."""

    def tip_position(self, joints: np.ndarray) -> np.ndarray:
        """Forward kinematics: the gripper tip (m, base frame) at ``joints``."""

    def clip_tip(self, tip: np.ndarray) -> np.ndarray:
        """``tip`` inside the task's workspace box."""

    def joints_for_tip(self, tip: np.ndarray, joints: np.ndarray) -> np.ndarray:
        """Inverse kinematics from ``joints``: arm joints that put the tip at ``tip`` (gripper unchanged)."""


class Driver(Protocol):
    """The person's device while they take over: a joint target, given the command now."""

    def start(self, arm: Arm) -> None: ...

    def key(self, key: str) -> None: ...

    def target(self, arm: Arm) -> tuple[np.ndarray | None, set[TeleopEvent]]: ...


class LeaderDriver:
    """A lerobot teleoperator (a leader arm): its joint positions are the target."""

    def __init__(self, teleop: LerobotTeleop) -> None:
        self.teleop = teleop

    def connect(self) -> None:
        self.teleop.connect()

    def disconnect(self) -> None:
        self.teleop.disconnect()

    def start(self, arm: Arm) -> None:  # noqa: ARG002 - the leader is where the person holds it
        """Nothing to set up: the target is wherever the person holds the leader."""

    def key(self, key: str) -> None:  # noqa: ARG002
        """The leader takes no keys."""

    def target(self, arm: Arm) -> tuple[np.ndarray | None, set[TeleopEvent]]:  # noqa: ARG002
        reading = self.teleop.read()
        return reading.action, reading.events - {TeleopEvent.INTERVENTION_ON, TeleopEvent.INTERVENTION_OFF}


class TipTarget:
    """Where a tip-space device (keyboard, gamepad) wants the arm: a tip position (m, inside the workspace, so it
    never winds up past the edge) and a gripper opening; its joints come from inverse kinematics."""

    def __init__(self) -> None:
        self.tip: np.ndarray | None = None
        self.gripper = 0.0

    def start(self, arm: Arm) -> None:
        """From where the arm is told to be, so taking over moves nothing by itself."""
        now = arm.commanded()
        self.tip, self.gripper = arm.tip_position(now), float(now[-1])

    def move(self, arm: Arm, tip: np.ndarray, gripper: float) -> None:
        """Move the target by ``tip`` (m) and ``gripper`` (units)."""
        if self.tip is None:
            self.start(arm)
        self.tip = arm.clip_tip(self.tip + tip)
        self.gripper = float(np.clip(self.gripper + gripper, 0.0, 100.0))

    def joints(self, arm: Arm) -> np.ndarray:
        if self.tip is None:
            self.start(arm)
        joints = arm.joints_for_tip(self.tip, arm.commanded())
        joints[-1] = self.gripper
        return joints


class KeyboardDriver:
    """Keys move a ``TipTarget`` by ``step_m`` (and the gripper by ``gripper_step``) per press."""

    def __init__(self, config: KeyboardTeleopConfig) -> None:
        self.config = config
        self.goal = TipTarget()
        self._pending: list[str] = []

    def start(self, arm: Arm) -> None:
        self.goal.start(arm)
        self._pending = []

    def key(self, key: str) -> None:
        self._pending.append(key)

    def target(self, arm: Arm) -> tuple[np.ndarray | None, set[TeleopEvent]]:
        for key in self._pending:
            if key in TIP_KEYS:
                axis, sign = TIP_KEYS[key]
                self.goal.move(arm, np.eye(3)[axis] * sign * self.config.step_m, 0.0)
            elif key in ("o", "c"):
                self.goal.move(arm, np.zeros(3), (1 if key == "o" else -1) * self.config.gripper_step)
        self._pending = []
        return self.goal.joints(arm), set()


# pads disagree on which of north / west their X is (xpad reports X as BTN_NORTH): both re-record
GAMEPAD_BUTTONS = {"south": TeleopEvent.SUCCESS, "east": TeleopEvent.FAILURE, "west": TeleopEvent.RERECORD,
                   "north": TeleopEvent.RERECORD, "start": TeleopEvent.READY, "select": TeleopEvent.ESTOP,
                   "mode": TeleopEvent.ESTOP}
GAMEPAD_HELP = ("gamepad: hold the right shoulder to take over (let go: the policy again) | left stick x/y, right "
                "stick up/down | right / left trigger close / open | A success | B failure | X or Y re-record | "
                "Start ready | Select or the centre button E-STOP")


class GamepadDriver:
    """A gamepad (``hardware.gamepad``): the sticks move a tip target at ``tip_speed`` (m/s at full stick), the
    triggers the gripper; the right shoulder is held to take over (a dead-man: letting go hands back)."""

    def __init__(self, config: GamepadTeleopConfig, reader=None) -> None:
        self.config, self.reader = config, reader  # reader injected in tests; else opened at connect
        self.goal = TipTarget()

    def connect(self) -> None:
        if self.reader is None:
            from robolearn.hardware.gamepad import GamepadReader

            self.reader = GamepadReader(self.config.device)
        print(GAMEPAD_HELP, flush=True)

    def disconnect(self) -> None:
        if self.reader is not None:
            self.reader.close()

    def poll(self) -> tuple[list[TeleopEvent], bool]:
        """The buttons pressed since the last poll as events, and whether the take-over button is held."""
        pressed = self.reader.read()
        return [GAMEPAD_BUTTONS[b] for b in pressed if b in GAMEPAD_BUTTONS], "tr" in self.reader.held

    def start(self, arm: Arm) -> None:
        self.goal.start(arm)

    def key(self, key: str) -> None:  # noqa: ARG002
        """The gamepad takes no terminal keys (the terminal's still label and stop)."""

    def target(self, arm: Arm) -> tuple[np.ndarray | None, set[TeleopEvent]]:
        axes, dt, dz = self.reader.axes, 1.0 / arm.control_hz, self.config.deadzone

        def stick(name: str) -> float:
            v = axes[name]
            return 0.0 if abs(v) < dz else v

        step = self.config.tip_speed * dt  # stick up (negative y) is forward (+x), stick left is +y
        self.goal.move(arm, np.array([-stick("y"), -stick("x"), -stick("ry")]) * step,
                       (axes["z"] - axes["rz"]) * self.config.gripper_rate * dt)
        return self.goal.joints(arm), set()


PERSON_TTY = "ROBOLEARN_PERSON_TTY"  # set by robolearn run / join: the terminal they run in (teleop.tty=auto)


def name_person_terminal(tty: str) -> bool:
    """``teleop.tty=auto`` in a process started in a terminal (``robolearn run``, ``join``): name that terminal in
    ``$ROBOLEARN_PERSON_TTY`` for its workers. False where there is none to name."""
    if tty != "auto" or not sys.stdin.isatty():
        return False
    os.environ[PERSON_TTY] = os.ttyname(sys.stdin.fileno())
    return True


def person_terminal(tty: str) -> str:
    """The terminal the person's keys come from: ``teleop.tty``, or for ``auto`` the one ``robolearn run`` (or
    ``join``) was started in, which it names in ``$ROBOLEARN_PERSON_TTY`` for its workers (they have none)."""
    if tty != "auto":
        return tty
    named = os.environ.get(PERSON_TTY)
    if not named:
        raise OSError("teleop.tty=auto: this process was not started by robolearn run or join in a terminal; name the "
                      "person's terminal with teleop.tty=/dev/pts/N")
    return named


class Operator:
    """A person with a terminal and, optionally, a device (see the module docstring)."""

    name = "operator"

    def __init__(self, config: PersonConfig, driver: Driver | None,
                 keys: Callable[[], list[str]] | None = None) -> None:
        self.config, self.driver = config, driver
        self._keys_reader = keys           # injected in tests; else a TerminalKeys opened at connect
        self._terminal: TerminalKeys | None = None
        self.arm: Arm | None = None        # set by the task it is attached to
        self.estop: EStop | None = None    # set by the actor: the e-stop key presses it
        self.prompt = ""                   # what the run waits for from the person, for the status and console
        self.intervening = False
        self._resetting = False            # the person drives during a reset by teleop
        self._labels: deque[TeleopEvent] = deque()
        self._ready = False
        self._events: set[TeleopEvent] = set()

    # --- connection (the actor's, after its lease)
    def connect(self) -> None:
        if self._keys_reader is None and self.config.tty != "none":
            self._terminal = TerminalKeys(person_terminal(self.config.tty))
            self._keys_reader = self._terminal.read
        if hasattr(self.driver, "connect"):
            self.driver.connect()
        print(HELP + (f"\n{TIP_HELP}" if isinstance(self.driver, KeyboardDriver) else ""), flush=True)

    def disconnect(self) -> None:
        if hasattr(self.driver, "disconnect"):
            self.driver.disconnect()
        if self._terminal is not None:
            self._terminal.close()
            self._terminal, self._keys_reader = None, None

    # --- the keys
    def poll(self) -> set[TeleopEvent]:
        """Read the keys pressed since the last poll: labels and "ready" are kept for the task, the e-stop is
        pressed at once, space toggles taking over. Returns the events (INTERVENTION_ON/OFF as edges)."""
        events: set[TeleopEvent] = set()
        held = None
        inputs: list[tuple[str, TeleopEvent | None]] = [
            (key, KEYS.get(key)) for key in (self._keys_reader() if self._keys_reader is not None else [])]
        if hasattr(self.driver, "poll"):  # a device with buttons (a gamepad): its events, and its take-over button
            device_events, held = self.driver.poll()
            inputs += [("", event) for event in device_events]
        for key, event in inputs:
            if event == TeleopEvent.ESTOP:
                self.press_estop(f"key {key!r}")
                events.add(event)
            elif event == TeleopEvent.INTERVENTION_ON:
                if hasattr(self.driver, "poll"):  # a gamepad: its shoulder button is held to take over
                    continue
                self.intervening = not self.intervening
                if self.intervening and self.driver is not None and self.arm is not None:
                    self.driver.start(self.arm)
                events.add(TeleopEvent.INTERVENTION_ON if self.intervening else TeleopEvent.INTERVENTION_OFF)
            elif event in LABELS:
                self._labels.append(event)
                events.add(event)
            elif event == TeleopEvent.READY:
                self._ready = True
                events.add(event)
            elif key == "h":
                print(HELP, flush=True)
            elif self.driver is not None and key and (self.intervening or self._resetting):
                self.driver.key(key)  # moves while the person drives; pressed while they do not, nothing
        if held is not None and held != self.intervening:  # hold-to-intervene: letting go hands back
            self.intervening = held
            if held and self.arm is not None:
                self.driver.start(self.arm)
            events.add(TeleopEvent.INTERVENTION_ON if held else TeleopEvent.INTERVENTION_OFF)
        self._events |= events
        return events

    def gui_command(self, command: Command) -> bool:
        """An act of the person at the GUI page. Labels and "ready" count as their keys; taking over from the page
        needs the page as the device (``teleop=gui``): False (ignored) with another device."""
        if hasattr(self.driver, "command"):
            self.driver.command(command)
            return True
        if command.kind == "label":
            self._labels.append(GUI_LABELS[command.label])
        elif command.kind == "ready":
            self._ready = True
        else:
            return False
        return True

    def press_estop(self, why: str) -> None:
        if self.estop is None:
            raise RuntimeError("the e-stop was pressed but this operator has no e-stop attached")
        self.estop.press(by=self.name, reason=why)
        print(f"E-STOP latched ({why}); re-arm with robolearn rearm", file=sys.stderr, flush=True)

    def take_label(self) -> TeleopEvent | None:
        """The oldest label not yet used (polls first)."""
        self.poll()
        return self._labels.popleft() if self._labels else None

    def take_ready(self) -> bool:
        self.poll()
        ready, self._ready = self._ready, False
        return ready

    def drop_pending(self) -> None:
        """Labels and "ready" pressed before now belong to nothing: read and dropped (a reset's start, the start of
        the wait for ready, an episode's start)."""
        self.poll()
        self._labels.clear()
        self._ready = False

    def begin_drive(self) -> None:
        """A reset by teleop: the person drives from where the arm is now."""
        self._resetting = True
        if self.driver is not None and self.arm is not None:
            self.driver.start(self.arm)

    def end_drive(self) -> None:
        self._resetting = False

    def drive_target(self) -> np.ndarray | None:
        """The person's joint target now, bounded to one tick's move from the command (None: no device)."""
        if self.driver is None or self.arm is None:
            return None
        target, events = self.driver.target(self.arm)
        for event in events:  # a device's own buttons (lerobot teleop events)
            if event in LABELS:
                self._labels.append(event)
            elif event == TeleopEvent.ESTOP:
                self.press_estop("teleop button")
        if target is None:
            return None
        now = self.arm.commanded()
        step = self.step_limit(len(now))
        return (now + np.clip(np.asarray(target, np.float32) - now, -step, step)).astype(np.float32)

    def step_limit(self, n: int) -> np.ndarray:
        """The most the person's command changes per tick, per joint (robot units)."""
        speeds = np.full(n, self.config.max_speed, np.float32)
        speeds[-1] = self.config.max_gripper_speed
        return speeds / self.arm.control_hz

    # --- the Intervener protocol
    def reset(self) -> None:
        """An episode starts with the policy in control."""
        self.intervening = False

    def read(self) -> TeleopReading:
        events = self.poll() | self._events
        self._events = set()
        if not self.intervening:
            return TeleopReading(None, events, False)
        target = self.drive_target()
        action = self.arm.action_toward(target if target is not None else self.arm.commanded())
        return TeleopReading(action, events, True)

    def observe(self, executed: np.ndarray) -> None:
        """Nothing to learn from: a person watches the robot itself."""


@dataclass
class ScriptedPersonConfig:
    """``teleop=scripted`` (robot=sim_so101 only)."""

    name: str = "scripted"
    reaction_ticks: int = 2            # says success this many ticks after the scene succeeds
    labels: bool = True                # false: only says "ready" (the reward is a classifier's alone)

    def __post_init__(self) -> None:
        if self.reaction_ticks < 0:
            raise ValueError(f"teleop.reaction_ticks must be >= 0, got {self.reaction_ticks}")


class ScriptedPerson:
    """``teleop=scripted``, the sim twin only: a person who sees the scene (the twin's hidden success) and says
    success ``reaction_ticks`` ticks after it holds, "ready" at once, and never takes over. The stand-in for a
    labelling person in tests and benchmarks of ``reward=human``."""

    name = "scripted_person"

    def __init__(self, config: ScriptedPersonConfig, scene) -> None:
        self.config, self.scene = config, scene
        self.arm: Arm | None = None
        self.estop: EStop | None = None
        self.prompt = ""
        self.intervening = False
        self._seen = 0

    def connect(self) -> None:
        """Nothing to open: the person lives in the simulator."""

    def disconnect(self) -> None:
        """Nothing to release."""

    def poll(self) -> set[TeleopEvent]:
        return set()

    def take_label(self) -> TeleopEvent | None:
        if not self.config.labels:
            return None
        self._seen = self._seen + 1 if self.scene.success() else 0
        return TeleopEvent.SUCCESS if self._seen > self.config.reaction_ticks else None

    def take_ready(self) -> bool:
        return True

    def drop_pending(self) -> None:
        self._seen = 0

    def begin_drive(self) -> None:
        """It never drives."""

    def end_drive(self) -> None:
        """It never drove."""

    def drive_target(self) -> np.ndarray | None:
        return None

    def reset(self) -> None:
        self._seen = 0

    def read(self) -> TeleopReading:
        return TeleopReading(None, set(), False)

    def observe(self, executed: np.ndarray) -> None:
        """It judges the scene, not the actions."""


def make_operator(config, env) -> Operator | ScriptedPerson:
    """The person of ``teleop=...`` for the task ``env`` (``tasks/real.py``'s ``RealTaskEnv``)."""
    if isinstance(config, ScriptedPersonConfig):
        if getattr(env, "scene", None) is None:
            raise ValueError("teleop=scripted judges the sim twin's scene; it needs robot=sim_so101")
        return ScriptedPerson(config, env.scene)
    if isinstance(config, KeyboardTeleopConfig):
        return Operator(config, KeyboardDriver(config))
    if isinstance(config, GamepadTeleopConfig):
        return Operator(config, GamepadDriver(config))
    if isinstance(config, LeaderTeleopConfig):
        return Operator(config, LeaderDriver(LerobotTeleop(config, list(env.joints))))
    raise ValueError(f"teleop={config.name} is not a person at the robot")

