"""How old a real robot's camera frames are when its observation is complete, and a bound on it.

lerobot's robots read the motor bus, then take each camera's latest frame from its capture thread
(``read_latest``), which refuses only frames older than 500 ms: at 25 Hz that is twelve control periods between
the state and the image the policy sees with it (the MuJoCo twin renders both at the same instant). A camera that
stalls (a USB hiccup, a loaded host) would go unnoticed until then.

Contract:
- ``before()`` is called just before the robot's observation is read, ``check(raw)`` just after, with lerobot's
  observation dict; ``check`` returns each camera's frame age in ms and raises ``TimeoutError`` naming the camera
  when one is older than ``max_age_ms`` (``LerobotRobot`` reads again, as for any failed read).
- The age is ``now - capture time`` (the camera thread's ``latest_timestamp``, ``time.perf_counter``). When the
  thread captured a newer frame after the read, the frame read is not the one stamped, and its age is bounded
  from above by the stamp taken in ``before()`` (the frame read was the latest when read, after that stamp).
- ``summary()`` gives the ages' p50 and max per camera over the last ``window`` observations (the actor's status).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np


def check_frame_timestamps(cameras: dict[str, Any]) -> None:
    """ValueError naming a camera whose lerobot class does not stamp its frames (no ``latest_timestamp``)."""
    for key, cam in cameras.items():
        if not (hasattr(cam, "latest_timestamp") and hasattr(cam, "frame_lock")):
            raise ValueError(f"robot.cameras.{key}: lerobot's {type(cam).__name__} does not stamp its frames "
                             "(no latest_timestamp), so robot.max_frame_age_ms cannot be checked; set "
                             "robot.max_frame_age_ms=null to rely on lerobot's own 500 ms")


class FrameAges:
    """Frame ages of ``cameras`` (lerobot camera objects by observation key), bounded by ``max_age_ms``."""

    def __init__(self, cameras: dict[str, Any], max_age_ms: float, window: int = 1000) -> None:
        check_frame_timestamps(cameras)
        self.cameras = cameras
        self.max_age_ms = max_age_ms
        self.too_old = 0  # frames refused for their age
        self._stamps: dict[str, float | None] = {}
        self._ages: dict[str, deque[float]] = {key: deque(maxlen=window) for key in cameras}

    def _latest(self, key: str) -> tuple[Any, float | None]:
        cam = self.cameras[key]
        with cam.frame_lock:
            return cam.latest_frame, cam.latest_timestamp

    def before(self) -> None:
        self._stamps = {key: self._latest(key)[1] for key in self.cameras}

    def check(self, raw: dict[str, Any]) -> dict[str, float]:
        now = time.perf_counter()
        ages = {}
        for key in self.cameras:
            latest, stamp = self._latest(key)
            if latest is not raw.get(key) and self._stamps.get(key) is not None:
                stamp = self._stamps[key]  # a newer frame came after the read: bound the one read from above
            if stamp is None:
                raise TimeoutError(f"camera {key}: no frame captured yet")
            ages[key] = (now - stamp) * 1e3
            self._ages[key].append(ages[key])
        old = {key: age for key, age in ages.items() if age > self.max_age_ms}
        if old:
            self.too_old += 1
            raise TimeoutError("; ".join(f"camera {key}: frame {age:.0f} ms old" for key, age in old.items())
                               + f", over robot.max_frame_age_ms={self.max_age_ms:g}")
        return ages

    def summary(self) -> dict[str, dict[str, float]]:
        return {key: {"p50": round(float(np.median(ages)), 1), "max": round(max(ages), 1)}
                for key, ages in self._ages.items() if ages}
