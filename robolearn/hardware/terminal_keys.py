"""Key presses read from a terminal: the person's keyboard over SSH, in a container, without X.

``TerminalKeys(path)`` opens a terminal device (``/dev/tty``, the launcher's ``/dev/pts/N``, or a
pseudo-terminal in a test), puts it in cbreak mode (each key arrives at once, unechoed; Ctrl-C still
interrupts) and restores its mode on ``close``. ``read()`` never blocks: it returns the keys pressed since
the last call, in order, as names: printable characters as themselves (``"y"``), and ``"enter"``,
``"space"``, ``"esc"``, ``"up"``, ``"down"``, ``"left"``, ``"right"``, ``"backspace"``, ``"tab"``. An
escape sequence the terminal sends for a key this module does not name is dropped whole, never read as
separate letters. A terminal has no key-up events, so "held" keys are the terminal's auto-repeat.
"""

from __future__ import annotations

import os
import termios
import tty

_SEQUENCES = {b"[A": "up", b"[B": "down", b"[C": "right", b"[D": "left", b"OA": "up", b"OB": "down",
              b"OC": "right", b"OD": "left"}
_CONTROL = {b"\r": "enter", b"\n": "enter", b" ": "space", b"\t": "tab", b"\x7f": "backspace", b"\x08": "backspace"}


def parse_keys(data: bytes) -> list[str]:
    """The key names in a chunk of terminal input (see the module docstring)."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        b = data[i:i + 1]
        if b == b"\x1b":
            if i + 1 >= len(data) or data[i + 1:i + 2] not in (b"[", b"O"):
                keys.append("esc")  # a lone escape: the key itself, not the start of a sequence
                i += 1
                continue
            j = i + 2  # CSI / SS3: parameters, then one final byte in @..~
            while j < len(data) and not 0x40 <= data[j] <= 0x7E:
                j += 1
            name = _SEQUENCES.get(data[i + 1:j + 1])
            if name:
                keys.append(name)
            i = j + 1
            continue
        if b in _CONTROL:
            keys.append(_CONTROL[b])
        elif 0x21 <= data[i] <= 0x7E:
            keys.append(b.decode())
        i += 1
    return keys


class TerminalKeys:
    """Non-blocking key presses from the terminal device at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            raise OSError(f"cannot open the terminal {path} for the person's keys ({exc.strerror}); "
                          "name one with teleop.tty=/dev/pts/N") from None
        if not os.isatty(self.fd):
            os.close(self.fd)
            raise OSError(f"{path} is not a terminal; the person's keys need one (teleop.tty=/dev/pts/N)")
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd, termios.TCSANOW)

    def read(self) -> list[str]:
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, 1024)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return parse_keys(b"".join(chunks))

    def close(self) -> None:
        if self.fd < 0:
            return
        termios.tcsetattr(self.fd, termios.TCSANOW, self._saved)  # the terminal echoes and edits lines again
        os.close(self.fd)
        self.fd = -1
