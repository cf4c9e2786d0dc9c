"""``teleop=gui``: the person at the GUI page (``apps/gui``) takes over the robot from the browser.

The page sends, while the person holds the space bar, a gamepad trigger or the on-screen button, a ``hold``
command about every 50 ms with the axes they push (keys or gamepad sticks: tip velocity x, y, z and the
gripper, each in [-1, 1]). ``BrowserDriver`` is a hold-to-intervene device like the gamepad: it counts as held
only while those commands keep arriving (``transport.gui_channel.HOLD_TIMEOUT_S``, 150 ms), so letting go,
losing focus, closing the page or losing the websocket hands control back by itself. While held, the axes move
a tip target (``operator.TipTarget``: inverse kinematics, inside the workspace) at up to ``tip_speed`` m/s; the
operator bounds the joint command's change per tick as for every device (bumpless).

Labels and "ready" from the page are the person's word as from the keys. The e-stop never comes this way: the
GUI presses the run's latch file itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from robolearn.hardware.operator import GUI_LABELS, Arm, Operator, PersonConfig, TipTarget
from robolearn.hardware.teleop import TeleopEvent
from robolearn.transport.gui_channel import HOLD_TIMEOUT_S, Command


@dataclass
class GuiTeleopConfig(PersonConfig):
    """``teleop=gui`` (needs ``gui.enabled``): the browser page is the person's device."""

    name: str = "gui"
    tty: str = "none"                  # the terminal's keys too (auto, or /dev/pts/N); none: the page only
    tip_speed: float = 0.15            # m/s of the tip target at full axis
    gripper_rate: float = 100.0        # gripper units/s at full axis

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tip_speed <= 0 or self.gripper_rate <= 0:
            raise ValueError("teleop.tip_speed and teleop.gripper_rate must be > 0")


class BrowserDriver:
    """The page as a device (see the module docstring). ``command`` is fed by the actor's GUI link."""

    def __init__(self, config: GuiTeleopConfig, clock=time.monotonic) -> None:
        self.config, self.clock = config, clock
        self.goal = TipTarget()
        self.axes = np.zeros(4)
        self._held_until = 0.0
        self._events: list[TeleopEvent] = []

    def command(self, command: Command) -> None:
        if command.kind == "hold" and time.time() - command.t_sent > HOLD_TIMEOUT_S:
            return  # held up on the way (the robot was busy): it says nothing about holding now
        if command.kind == "hold":
            self._held_until = self.clock() + HOLD_TIMEOUT_S
            self.axes = np.zeros(4)
            self.axes[:len(command.axes)] = command.axes
        elif command.kind == "release":
            self._held_until = 0.0
            self.axes = np.zeros(4)
        elif command.kind == "label":
            self._events.append(GUI_LABELS[command.label])
        elif command.kind == "ready":
            self._events.append(TeleopEvent.READY)

    @property
    def held(self) -> bool:
        return self.clock() < self._held_until

    # --- the operator's device protocol (as the gamepad's)
    def poll(self) -> tuple[list[TeleopEvent], bool]:
        events, self._events = self._events, []
        return events, self.held

    def start(self, arm: Arm) -> None:
        self.goal.start(arm)

    def key(self, key: str) -> None:  # noqa: ARG002 - the page sends axes, not keys
        return

    def target(self, arm: Arm) -> tuple[np.ndarray | None, set[TeleopEvent]]:
        axes = self.axes if self.held else np.zeros(4)
        hz = arm.control_hz
        self.goal.move(arm, axes[:3] * self.config.tip_speed / hz, float(axes[3]) * self.config.gripper_rate / hz)
        return self.goal.joints(arm), set()


def make_gui_operator(config: GuiTeleopConfig, env) -> Operator:  # noqa: ARG001 - as every teleop factory
    """``teleop=gui``: the person with the page as their device (and the terminal's keys with ``teleop.tty``)."""
    return Operator(config, BrowserDriver(config))
