"""Recent weights an actor acted with, kept on its own disk (``<spool>/weights.npz``), so a replacement actor
(after a crash, or a robot PC that restarts while the learner is away) acts at once with them instead of
waiting for the learner: a real robot's control loop does not stall on the network.

Written at most every ``every_s``, so they may be a few versions behind (renamed into place: whole or
absent; the write, an uncompressed ``np.savez`` of the state dict, runs between chunks on the control thread:
well under a millisecond for an MLP, more for a large image policy); read with ``allow_pickle=False`` and
checked name by name against the policy's parameters, so a stale, torn or foreign file is ignored, loudly.
"""

from __future__ import annotations

import os
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from robolearn.transport.weights import weights_arrays

_VERSION = "__version__"


class WeightsCache:
    def __init__(self, path: Path, every_s: float = 5.0) -> None:
        self.path, self.every_s = path, every_s
        self._saved_at = -1e9

    def save(self, version: int, policy: torch.nn.Module) -> None:
        """Keep ``policy``'s weights as ``version``, unless that was done less than ``every_s`` ago."""
        if time.monotonic() - self._saved_at < self.every_s:
            return
        tmp = self.path.with_suffix(".tmp")  # a spool removes *.tmp a crash left at its start
        with open(tmp, "wb") as f:
            np.savez(f, **{_VERSION: np.array(version, np.int64)}, **weights_arrays(policy))
        os.replace(tmp, self.path)
        self._saved_at = time.monotonic()

    def load(self, policy: torch.nn.Module) -> int | None:
        """Load the kept weights into ``policy``; their version, or None when there are none that fit."""
        if not self.path.exists():
            return None
        expected = weights_arrays(policy)
        try:
            with np.load(self.path, allow_pickle=False) as data:
                arrays = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            print(f"[actor] ignoring the kept weights {self.path}: {exc}", file=sys.stderr, flush=True)
            return None
        version = arrays.pop(_VERSION, None)
        if version is None or arrays.keys() != expected.keys() or any(
                arrays[k].shape != v.shape or arrays[k].dtype != v.dtype for k, v in expected.items()):
            print(f"[actor] ignoring the kept weights {self.path}: they do not fit this policy", file=sys.stderr,
                  flush=True)
            return None
        policy.load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()})
        return int(version)
