"""Fake Feetech servos behind a real pseudo-terminal: lerobot's drivers open its path as they would
``/dev/ttyACM0`` (pyserial, the Feetech SDK, lerobot's bus), in any process. Only the servos are fake
(``tests.fake_feetech.FakeServos``); the bytes travel through the kernel's tty layer."""

from __future__ import annotations

import os
import pty
import select
import threading
import tty

from tests.fake_feetech import FakeServos


class PtyServos:
    """Serves ``servos`` on a pseudo-terminal; ``path`` is the device a driver opens."""

    def __init__(self, servos: FakeServos) -> None:
        self.servos = servos
        self.master, self._slave = pty.openpty()
        tty.setraw(self._slave)  # no echo, no line discipline, before any driver opens it
        self.path = os.ttyname(self._slave)
        self.lock = threading.Lock()  # held while the servos answer: a test changes registers under it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"servos-{self.path}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        pending = bytearray()
        while not self._stop.is_set():
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if not ready:
                continue
            try:
                pending += os.read(self.master, 4096)
            except OSError:  # the driver side closed; it may open again
                continue
            while True:
                start = pending.find(b"\xff\xff")
                if start < 0:
                    pending.clear()
                    break
                del pending[:start]
                if len(pending) < 4 or len(pending) < 4 + pending[3]:
                    break
                n = 4 + pending[3]
                packet = bytes(pending[:n])
                del pending[:n]
                with self.lock:
                    answer = self.servos.handle(packet)
                if answer:
                    os.write(self.master, answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        os.close(self.master)
        os.close(self._slave)
