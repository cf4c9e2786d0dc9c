"""Control-loop clocks. All control logic counts in ticks; a clock decides what a tick costs in time.

``RealClock`` sleeps to a fixed period (as hardware runs) and measures each tick's period error;
``SimClock`` does not wait at all (a simulation stepped as fast as the learner lets it), and pairs with
a ``DelaySampler`` that says how many ticks an inference takes, so runs under delay are deterministic
for a seed and faster than real time. Both are a ``Clock``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


class Clock(Protocol):
    """What the control loop needs of a clock. ``period`` is 0 for simulated time."""

    period: float
    missed_deadlines: int

    def wait(self) -> None:
        """Return at the start of the next tick."""

    def reset(self) -> None:
        """Start a fresh schedule now (after a pause such as an episode reset)."""


SPIN_S = 0.0015  # the last part of a period is spun, not slept: sleep() overshoots by ~0.1-1 ms


class RealClock:
    """Ticks at ``hz``. ``wait()`` returns at the start of the next tick; the schedule is absolute (no
    drift), a late tick is counted and re-anchors the schedule instead of bursting to catch up."""

    def __init__(self, hz: float) -> None:
        if hz <= 0:
            raise ValueError(f"control rate must be > 0 Hz, got {hz}")
        self.period = 1.0 / hz
        self.missed_deadlines = 0
        self.max_late_s = 0.0
        # |measured tick period - nominal| of the most recent ticks (about 33 min at 50 Hz)
        self.period_errors_s: deque[float] = deque(maxlen=100_000)
        self.reset()

    def wait(self) -> None:
        now = time.perf_counter()
        if now < self._next:
            if self._next - now > SPIN_S:
                time.sleep(self._next - now - SPIN_S)
            while time.perf_counter() < self._next:
                pass
            now = time.perf_counter()
        late = now - self._next
        self.max_late_s = max(self.max_late_s, late)
        if late > 0.5 * self.period:
            self.missed_deadlines += 1
            self._next = now  # re-anchor
        self.period_errors_s.append(abs((now - self._last) - self.period))
        self._last = now
        self._next += self.period

    def reset(self) -> None:
        """Start a fresh schedule now (after a pause such as an episode reset)."""
        self._last = time.perf_counter()
        self._next = self._last + self.period

    def period_error_ms(self, q: float) -> float:
        return float(np.quantile(self.period_errors_s, q) * 1e3) if self.period_errors_s else 0.0


@dataclass
class DelaySampler:
    """Inference delay in ticks, drawn per request from a seeded distribution.

    ``kind``: ``fixed`` (always ``ticks``), ``uniform`` (integers in [low, high]), or ``choice``
    (one of ``values`` with probabilities ``probs``)."""

    kind: str = "fixed"
    ticks: int = 0
    low: int = 0
    high: int = 0
    values: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "choice"):
            raise ValueError(f"delay kind must be fixed, uniform or choice, got {self.kind!r}")
        if self.kind == "fixed" and self.ticks < 0:
            raise ValueError(f"delay ticks must be >= 0, got {self.ticks}")
        if self.kind == "uniform" and not 0 <= self.low <= self.high:
            raise ValueError(f"uniform delay needs 0 <= low <= high, got [{self.low}, {self.high}]")
        if self.kind == "choice" and (not self.values or len(self.values) != len(self.probs) or min(self.values) < 0):
            raise ValueError("choice delay needs non-negative values and one probability per value")
        self.rng = np.random.default_rng(self.seed)

    def sample(self) -> int:
        if self.kind == "fixed":
            return self.ticks
        if self.kind == "uniform":
            return int(self.rng.integers(self.low, self.high + 1))
        return int(self.rng.choice(self.values, p=np.asarray(self.probs) / np.sum(self.probs)))


class SimClock:
    """Simulated time: a tick costs nothing and an inference costs ``delay.sample()`` ticks. The policy
    is evaluated at once and its answer is held back until that many ticks have passed
    (``inference.client.SimulatedLatencyClient``)."""

    period = 0.0
    missed_deadlines = 0

    def __init__(self, delay: DelaySampler | None = None) -> None:
        self.delay = delay or DelaySampler()

    def wait(self) -> None:
        pass  # a simulated tick takes no time

    def reset(self) -> None:
        pass

    def inference_ticks(self) -> int:
        return self.delay.sample()
