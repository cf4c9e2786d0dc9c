"""A queue of tick-tagged actions: each control tick pops exactly the action for that tick.

A chunk computed for ticks t..t+H-1 is pushed with its start tick; how it meets what is already
queued is the splice (``replace_from``, ``blend_from``). ``pop(tick)`` drops anything older than
``tick`` (stale) and returns the action for ``tick`` or None (a stall: the caller holds the last
safe command and counts it; it never blocks). An action is never returned twice or out of order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TimedAction:
    tick: int
    action: np.ndarray      # robot units
    chunk_id: int
    chunk_index: int
    policy_version: int
    delay_ticks: int


class ActionQueue:
    def __init__(self) -> None:
        self._items: dict[int, TimedAction] = {}
        self._last_popped = -1 << 62
        self.dropped_stale = 0

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()
        self._last_popped = -1 << 62

    def clear_from(self, tick: int) -> None:
        """Forget every action queued for ``tick`` and later."""
        for t in [t for t in self._items if t >= tick]:
            del self._items[t]

    def remaining(self, tick: int) -> int:
        """Consecutive queued ticks from ``tick`` on: how long the robot can run without a new chunk."""
        n = 0
        while tick + n in self._items:
            n += 1
        return n

    def actions(self, start: int, count: int) -> list[TimedAction]:
        """The queued actions for ticks start .. start+count-1 that exist, in tick order."""
        return [self._items[t] for t in range(start, start + count) if t in self._items]

    def push_chunk(self, start_tick: int, actions: np.ndarray, chunk_id: int, policy_version: int,
                   delay_ticks: int = 0) -> None:
        """Queue ``actions`` (H, A) for ticks start_tick .. start_tick + H - 1, replacing overlaps."""
        self.replace_from(start_tick, start_tick, actions, chunk_id, policy_version, delay_ticks)

    def replace_from(self, first_tick: int, start_tick: int, actions: np.ndarray, chunk_id: int,
                     policy_version: int, delay_ticks: int) -> int:
        """Take the chunk (for ticks start_tick..) from ``first_tick`` on, replacing what is queued there;
        ticks already executed are skipped. Returns the number of actions queued."""
        n = 0
        for k, a in enumerate(actions):
            t = start_tick + k
            if t >= first_tick and t > self._last_popped:
                self._items[t] = TimedAction(t, a, chunk_id, k, policy_version, delay_ticks)
                n += 1
        return n

    def blend_from(self, first_tick: int, start_tick: int, actions: np.ndarray, old_weight: float, chunk_id: int,
                   policy_version: int, delay_ticks: int) -> int:
        """Like ``replace_from`` but a tick already queued gets ``old_weight * old + (1 - old_weight) * new``
        (lerobot's weighted-average aggregation)."""
        n = 0
        for k, a in enumerate(actions):
            t = start_tick + k
            if t < first_tick or t <= self._last_popped:
                continue
            old = self._items.get(t)
            mixed = a if old is None else (old_weight * old.action + (1 - old_weight) * a).astype(a.dtype)
            self._items[t] = TimedAction(t, mixed, chunk_id, k, policy_version, delay_ticks)
            n += 1
        return n

    def pop(self, tick: int) -> TimedAction | None:
        if tick <= self._last_popped:
            raise ValueError(f"tick {tick} already executed (last was {self._last_popped}): ticks only move forward")
        for t in [t for t in self._items if t < tick]:
            del self._items[t]
            self.dropped_stale += 1
        self._last_popped = tick
        return self._items.pop(tick, None)
