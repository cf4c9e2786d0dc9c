"""A gamepad read through Linux evdev (``/dev/input/eventN``): no X, no SDL, works over SSH on the robot PC.

``GamepadReader(path)`` opens the device non-blocking and, on each ``read()``, takes every pending
``struct input_event`` (``llHHi``: time, type, code, value) and keeps the state: buttons held (``EV_KEY``) and
axes (``EV_ABS``) scaled to -1..1 (sticks) or 0..1 (triggers) from the device's own ranges (``EVIOCGABS``),
or the configured ones where the device gives none (a pipe in tests). It returns the buttons pressed since the
last read (press edges), by their kernel names: ``south`` (A / cross), ``east`` (B / circle), ``north``,
``west``, ``tl``, ``tr`` (shoulders), ``select``, ``start``, ``mode``. The mapping to robot commands lives
with the person (``hardware.operator.GamepadDriver``).
"""

from __future__ import annotations

import fcntl
import os
import struct

EVENT = struct.Struct("llHHi")
EV_KEY, EV_ABS = 0x01, 0x03
BUTTONS = {0x130: "south", 0x131: "east", 0x133: "north", 0x134: "west", 0x136: "tl", 0x137: "tr",
           0x13A: "select", 0x13B: "start", 0x13C: "mode"}
STICKS = {0x00: "x", 0x01: "y", 0x03: "rx", 0x04: "ry", 0x10: "hat_x", 0x11: "hat_y"}
TRIGGERS = {0x02: "z", 0x05: "rz"}


def _eviocgabs(axis: int) -> int:
    """The ioctl request that reads an axis's ``input_absinfo`` (six int32: value, min, max, fuzz, flat, res)."""
    return (2 << 30) | (24 << 16) | (ord("E") << 8) | (0x40 + axis)


class GamepadReader:
    def __init__(self, path: str, stick_range: tuple[int, int] = (-32768, 32767),
                 trigger_range: tuple[int, int] = (0, 1023)) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise OSError(f"cannot open the gamepad {path} ({exc.strerror}); is it plugged in, and may this user read "
                          "/dev/input (the 'input' group)?") from None
        self.ranges: dict[int, tuple[int, int]] = {}
        for axis in (*STICKS, *TRIGGERS):
            default = trigger_range if axis in TRIGGERS else (-1, 1) if axis in (0x10, 0x11) else stick_range
            try:
                info = struct.unpack("6i", fcntl.ioctl(self.fd, _eviocgabs(axis), bytes(24)))
                self.ranges[axis] = (info[1], info[2]) if info[2] > info[1] else default
            except OSError:  # not an evdev device (a pipe), or the device lacks the axis
                self.ranges[axis] = default
        self.held: set[str] = set()
        self.axes: dict[str, float] = {name: 0.0 for name in (*STICKS.values(), *TRIGGERS.values())}
        self._pending = b""

    def _scale(self, axis: int, value: int) -> float:
        lo, hi = self.ranges[axis]
        unit = (value - lo) / (hi - lo)
        return unit if axis in TRIGGERS else 2.0 * unit - 1.0

    def read(self) -> list[str]:
        """Take the pending events; the buttons pressed since the last read, in order."""
        chunks = [self._pending]
        while True:
            try:
                chunk = os.read(self.fd, EVENT.size * 64)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        whole = len(data) - len(data) % EVENT.size
        self._pending = data[whole:]
        pressed: list[str] = []
        for _, _, kind, code, value in EVENT.iter_unpack(data[:whole]):
            if kind == EV_KEY and code in BUTTONS:
                name = BUTTONS[code]
                if value:
                    if name not in self.held:
                        pressed.append(name)
                    self.held.add(name)
                else:
                    self.held.discard(name)
            elif kind == EV_ABS and code in self.ranges:
                self.axes[(STICKS | TRIGGERS)[code]] = self._scale(code, value)
        return pressed

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
