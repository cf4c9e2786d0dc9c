"""A queue of tick-tagged actions: each control tick pops exactly the action for that tick.

A chunk computed for ticks t..t+H-1 is pushed with its start tick; overlapping ticks are replaced
by the newer chunk. ``pop(tick)`` drops anything older than ``tick`` (stale) and returns the action
for ``tick`` or None (a stall: the caller holds position and counts it, it never blocks).
"""

from __future__ import annotations

from collections import OrderedDict
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
        self._items: OrderedDict[int, TimedAction] = OrderedDict()
        self.dropped_stale = 0

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()

    def has(self, tick: int) -> bool:
        return tick in self._items

    def push_chunk(self, start_tick: int, actions: np.ndarray, chunk_id: int, policy_version: int,
                   delay_ticks: int = 0) -> None:
        """Queue ``actions`` (H, A) for ticks start_tick .. start_tick + H - 1."""
        for k, a in enumerate(actions):
            t = start_tick + k
            self._items[t] = TimedAction(t, a, chunk_id, k, policy_version, delay_ticks)
        self._items = OrderedDict(sorted(self._items.items()))

    def pop(self, tick: int) -> TimedAction | None:
        while self._items:
            first = next(iter(self._items))
            if first >= tick:
                break
            del self._items[first]
            self.dropped_stale += 1
        return self._items.pop(tick, None)
