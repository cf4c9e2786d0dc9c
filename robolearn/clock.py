"""Control-loop clocks. All control logic counts in ticks; a clock decides what a tick costs in time.

``RealClock`` sleeps to a fixed period (as hardware runs) and measures each tick's period error;
``SimClock`` does not wait at all (a simulation stepped as fast as the learner lets it), and pairs with
a ``DelaySampler`` that says how many ticks an inference takes, so runs under delay are deterministic
for a seed and faster than real time. Both are a ``Clock``.
"""

from __future__ import annotations

import time
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


# The last part of a period is spun, not slept: sleep() overshoots (0.16 ms median, 0.3 ms p99 on an idle 2-core
# machine here), and a loop that shares its cores with a learner wakes later still. Tried at 0.5 ms: the tick period
# error p99 of one 50 Hz robot beside its learner rose from 1.1 to 2.4 ms (bench-fleet, N = 1), and 8 robots on 2
# cores gained nothing measurable, so the spin stays at 1.5 ms (7.5% of a core per robot at 50 Hz).
SPIN_S = 0.0015


class RealClock:
    """Ticks at ``hz``. ``wait()`` returns at the start of the next tick; the schedule is absolute (no
    drift), a late tick is counted and re-anchors the schedule instead of bursting to catch up."""

    def __init__(self, hz: float) -> None:
        if hz <= 0:
            raise ValueError(f"control rate must be > 0 Hz, got {hz}")
        self.period = 1.0 / hz
        self.missed_deadlines = 0
        self.max_late_s = 0.0
        self.period_errors = ErrorHistogram()  # |measured tick period - nominal| of every tick
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
        self.period_errors.add(abs((now - self._last) - self.period))
        self._last = now
        self._next += self.period

    def reset(self) -> None:
        """Start a fresh schedule now (after a pause such as an episode reset)."""
        self._last = time.perf_counter()
        self._next = self._last + self.period

    def period_error_ms(self, q: float) -> float:
        return self.period_errors.quantile(q) * 1e3


class ErrorHistogram:
    """Counts of non-negative durations in ``resolution_s`` bins up to ``limit_s`` (one more for anything longer),
    and the exact maximum. ``add`` costs the same on the first tick and the millionth, and ``quantile`` reads
    the counts, never the values: the control loop asks for quantiles while it runs (its status file), and a
    quantile over a list of every period grew to more than a whole 20 ms tick within half an hour.

    ``quantile(q)`` is the upper edge of the bin that holds it, so it never reads below the true value and at
    most ``resolution_s`` above it; the maximum (q = 1) is exact."""

    def __init__(self, resolution_s: float = 1e-5, limit_s: float = 0.2) -> None:
        self.resolution_s = resolution_s
        self.counts = np.zeros(int(round(limit_s / resolution_s)) + 1, dtype=np.int64)
        self.total = 0
        self.max_s = 0.0

    def add(self, value_s: float) -> None:
        self.counts[min(int(value_s / self.resolution_s), len(self.counts) - 1)] += 1
        self.total += 1
        self.max_s = max(self.max_s, value_s)

    def quantile(self, q: float) -> float:
        """The q-quantile in seconds (0.0 before anything was added)."""
        if not self.total:
            return 0.0
        if q >= 1.0:
            return self.max_s
        # the first bin whose running count reaches q of the total (numpy's quantile's rank, rounded up)
        rank = max(1, int(np.ceil(q * (self.total - 1))) + 1)
        b = int(np.searchsorted(np.cumsum(self.counts), rank))
        if b == len(self.counts) - 1:  # past the bins' range: the largest value is the only bound known
            return self.max_s
        return min((b + 1) * self.resolution_s, self.max_s)


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
