"""A gamepad through evdev: ``struct input_event`` records written into a pipe stand in for the kernel's device
(the reader and the person's mapping are the real ones); hold-to-intervene, the sticks through IK, the buttons."""

from __future__ import annotations

import os
import struct
import time

import numpy as np
import pytest

from robolearn.hardware.gamepad import GamepadReader
from robolearn.hardware.operator import GamepadDriver, GamepadTeleopConfig, Operator
from robolearn.hardware.safety import EStop, GuardedRobot, SafetyConfig
from robolearn.hardware.teleop import TeleopEvent
from robolearn.tasks.real import RealTaskConfig, RealTaskEnv
from tests.scripted_keys import ScriptedKeys

EV_KEY, EV_ABS = 1, 3
BTN = {"south": 0x130, "east": 0x131, "tr": 0x137, "select": 0x13A, "start": 0x13B}


class FakeDevice:
    """The write end of a pipe a ``GamepadReader`` reads as its device."""

    def __init__(self, tmp_path) -> None:
        self.path = str(tmp_path / "event-joystick")
        os.mkfifo(self.path)
        self.reader = GamepadReader(self.path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)

    def send(self, kind: int, code: int, value: int) -> None:
        os.write(self.fd, struct.pack("llHHi", int(time.time()), 0, kind, code, value))

    def button(self, name: str, down: bool) -> None:
        self.send(EV_KEY, BTN[name], int(down))

    def close(self) -> None:
        os.close(self.fd)
        self.reader.close()


def test_the_reader_keeps_held_buttons_and_scaled_axes(tmp_path):
    dev = FakeDevice(tmp_path)
    try:
        dev.button("tr", True)
        dev.send(EV_ABS, 0x01, -32768)  # left stick fully up
        dev.send(EV_ABS, 0x05, 1023)    # right trigger fully in
        os.write(dev.fd, struct.pack("llHHi", 0, 0, EV_KEY, BTN["south"], 1)[:10])  # half an event: kept for later
        assert dev.reader.read() == ["tr"]
        assert dev.reader.held == {"tr"} and dev.reader.axes["y"] == pytest.approx(-1.0) and dev.reader.axes["rz"] == 1
        os.write(dev.fd, struct.pack("llHHi", 0, 0, EV_KEY, BTN["south"], 1)[10:])
        assert dev.reader.read() == ["south"] and dev.reader.read() == []  # a press is an edge
        dev.button("tr", False)
        dev.reader.read()
        assert dev.reader.held == {"south"}
    finally:
        dev.close()
    with pytest.raises(OSError, match="cannot open the gamepad"):
        GamepadReader(str(tmp_path / "unplugged"))


def test_hold_to_take_over_drives_the_tip_and_the_buttons_label_and_stop(tmp_path):
    dev = FakeDevice(tmp_path)
    config = GamepadTeleopConfig(device=dev.path, tip_speed=0.1)
    keys = ScriptedKeys(auto_ready=True)
    operator = Operator(config, GamepadDriver(config, reader=dev.reader), keys=keys)
    env = RealTaskEnv(RealTaskConfig())
    env.robot.connect()
    env.robot = GuardedRobot(env.robot, SafetyConfig(), EStop(tmp_path / "estop.json"), env.control_hz,
                             watch_time=False)
    operator.estop = env.robot.estop
    env.attach_operator(operator)
    keys.env = env
    try:
        env.reset(seed=0)  # ready from the terminal
        tip0 = env.tip_position(env.commanded())
        assert not operator.read().intervening
        dev.button("tr", True)
        dev.send(EV_ABS, 0x01, -32768)  # full forward
        for _ in range(10):
            reading = operator.read()
            assert reading.intervening
            env.step(reading.action)
        dev.send(EV_ABS, 0x01, 0)
        for _ in range(15):
            env.step(operator.read().action)
        moved = env.tip_position(env.commanded()) - tip0
        np.testing.assert_allclose(moved, [0.1 * 10 / env.control_hz, 0, 0], atol=0.006)
        dev.button("tr", False)  # let go: the policy has the robot again
        assert not operator.read().intervening
        dev.button("south", True)
        _, r, term, _, info = env.step(np.zeros(6, np.float32))
        assert term and r == 1.0 and info["label"] == TeleopEvent.SUCCESS
        dev.button("select", True)
        operator.poll()
        assert env.robot.estop.latched
    finally:
        dev.close()
    with pytest.raises(ValueError, match="teleop.device"):
        GamepadTeleopConfig()
