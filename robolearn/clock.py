"""Control-loop clocks. All control logic counts in ticks; a clock decides what a tick costs in time.

``RealClock`` sleeps to a fixed period (as hardware runs) and measures how late each tick starts;
``FreeClock`` does not wait at all (a simulation stepped as fast as the learner lets it).
"""

from __future__ import annotations

import time


class RealClock:
    def __init__(self, hz: float) -> None:
        if hz <= 0:
            raise ValueError(f"control rate must be > 0 Hz, got {hz}")
        self.period = 1.0 / hz
        self._next = time.perf_counter() + self.period
        self.missed_deadlines = 0
        self.max_late_s = 0.0

    def wait(self) -> None:
        """Sleep until the next tick; a tick that starts late is counted, the schedule never drifts."""
        now = time.perf_counter()
        if now < self._next:
            time.sleep(self._next - now)
        else:
            late = now - self._next
            self.max_late_s = max(self.max_late_s, late)
            if late > 0.5 * self.period:
                self.missed_deadlines += 1
                self._next = now  # re-anchor instead of bursting to catch up
        self._next += self.period

    def reset(self) -> None:
        self._next = time.perf_counter() + self.period


class FreeClock:
    period = 0.0
    missed_deadlines = 0
    max_late_s = 0.0

    def wait(self) -> None:
        pass

    def reset(self) -> None:
        pass
