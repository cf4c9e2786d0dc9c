"""``learner.*``: the learner loop's schedule, the same for every algorithm (each algorithm owns only its
losses, ``algo.*``). An algorithm may set its own defaults for these: its config's ``LEARNER_DEFAULTS``."""

from __future__ import annotations

import re
from dataclasses import dataclass

LEARNING_MODES = ("async", "sync")
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device_name(name: str) -> None:
    """ValueError unless ``name`` is a form ``learner.device`` takes (whether that device exists is known only where
    the learner runs: ``learner.device.resolve_device``)."""
    if not DEVICE_PATTERN.fullmatch(name):
        raise ValueError(f"learner.device must be auto, cpu, cuda or cuda:N, got {name!r}")


@dataclass
class LearnerConfig:
    utd_ratio: float = 1.0           # updates per environment step
    learning_starts: int = 0         # environment steps before the first update (and at least one batch)
    batch_size: int = 256
    publish_every: int = 25          # publish weights every this many updates
    checkpoint_every_s: float = 20.0
    prefetch_batches: int = 2        # batches sampled ahead on a background thread (0: inline)
    threads: int = 1                 # torch threads of the learner process
    device: str = "auto"             # auto (a CUDA device when torch sees one, else the CPU) | cpu | cuda | cuda:N
    learning: str = "async"          # async: acting and learning overlap | sync: at each episode end the robot
                                     # waits until the learner has done the updates due (the baseline)
    weights_heartbeat_s: float = 1.0  # a full weight snapshot at least this often (late joiners, missed deltas); a new
                                      # version when none went out for this long and there were updates since
    weights_full_every: int = 20     # and at least every this many versions; in between, sparse deltas
    demos: str = ""                  # a LeRobotDataset v3 folder (robolearn record) imported into the buffer's demo
                                     # partition when the run starts (once: a restart finds them in the buffer)

    def __post_init__(self) -> None:
        if self.utd_ratio <= 0:
            raise ValueError(f"learner.utd_ratio must be > 0, got {self.utd_ratio}")
        for key in ("batch_size", "publish_every", "threads", "weights_full_every"):
            if getattr(self, key) < 1:
                raise ValueError(f"learner.{key} must be >= 1, got {getattr(self, key)}")
        for key in ("learning_starts", "prefetch_batches"):
            if getattr(self, key) < 0:
                raise ValueError(f"learner.{key} must be >= 0, got {getattr(self, key)}")
        if self.checkpoint_every_s <= 0 or self.weights_heartbeat_s <= 0:
            raise ValueError("learner.checkpoint_every_s and learner.weights_heartbeat_s must be > 0")
        check_device_name(self.device)
        if self.learning not in LEARNING_MODES:
            raise ValueError(f"learner.learning must be async or sync, got {self.learning!r}")

    @property
    def learning_start(self) -> int:
        """Env steps before the first update: ``learning_starts``, and at least one batch."""
        return max(self.learning_starts, self.batch_size)
