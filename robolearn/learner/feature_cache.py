"""A frozen encoder's features, computed once per stored observation (docs/algorithms.md, "DSRL").

    cache(obs, ids) -> e(obs) (B, E)     obs: the batch's observations (a dict of (B, ...) tensors), ids (B,) int64

``ids`` are the replay buffer's observation ids (``buffer.samplers``, "Observation ids"): the same every time an
observation is drawn, never reused while the buffer is open. Rows whose id the cache holds are looked up; the others
are encoded (each distinct id once, however often it occurs in the batch) and kept. This is exact only because the
encoder never changes (a frozen base in eval mode: no dropout, no augmentation): the cached row is what encoding the
observation again would give. When holding the new rows would pass ``capacity`` the cache starts again empty (a
long run's early steps are rarely drawn again once the ring has moved on). It lives in the learner's memory only
(not in checkpoints): after a restart rows are encoded again, equal to float rounding. ``encoded`` counts the rows
encoded so far, ``lookups`` the rows asked for.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

Observation = dict[str, torch.Tensor]


class FeatureCache:
    def __init__(self, encode: Callable[[Observation], torch.Tensor], capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a feature cache holds at least one row, got capacity {capacity}")
        self.encode = encode
        self.capacity = capacity
        self._row: dict[int, int] = {}   # observation id -> row of _store
        self._store: torch.Tensor | None = None
        self.encoded = 0
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._row)

    @torch.no_grad()
    def __call__(self, obs: Observation, ids: torch.Tensor) -> torch.Tensor:
        """e(obs) (B, E) for the batch's observations ``obs`` with buffer ids ``ids`` (B,)."""
        keys = ids.cpu().numpy()
        self.lookups += len(keys)
        missing = np.fromiter((k not in self._row for k in keys.tolist()), bool, len(keys))
        if missing.any():
            new, first = np.unique(keys[missing], return_index=True)
            if len(self._row) + len(new) > self.capacity:
                self._row.clear()  # start again, before the lookup: this batch's rows are all encoded now
                missing[:] = True
                new, first = np.unique(keys, return_index=True)
            at = torch.as_tensor(np.flatnonzero(missing)[first], device=ids.device)
            self._keep(new, self.encode({k: v[at] for k, v in obs.items()}))
        rows = torch.as_tensor([self._row[k] for k in keys.tolist()], device=self._store.device)
        return self._store[rows]

    def _keep(self, ids: np.ndarray, features: torch.Tensor) -> None:
        start = len(self._row)
        need = start + len(ids)
        if self._store is None or need > len(self._store):  # grow by doubling, up to the capacity
            size = min(max(need, 2 * (0 if self._store is None else len(self._store)), 1024), max(self.capacity, need))
            grown = features.new_empty((size, features.shape[1]))
            if self._store is not None and start:
                grown[:start] = self._store[:start]
            self._store = grown
        self._store[start:need] = features
        self._row.update(zip(ids.tolist(), range(start, need)))
        self.encoded += len(ids)
