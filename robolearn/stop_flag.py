"""What every robolearn worker process shares: a stop flag wired to signals and to parent death."""

from __future__ import annotations

import os
import signal


class StopFlag:
    """Set by SIGTERM/SIGINT, or when the parent that started us is gone (no orphans)."""

    def __init__(self) -> None:
        self._stop = False
        self._parent = os.getppid()
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum, frame) -> None:  # noqa: ARG002
        self._stop = True

    def set(self) -> None:
        self._stop = True

    def __bool__(self) -> bool:
        if not self._stop and os.getppid() != self._parent:
            self._stop = True
        return self._stop
