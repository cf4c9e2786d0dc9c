"""Deterministic transition batches for buffer tests: every value is a function of (episode, step)."""

from __future__ import annotations

import numpy as np

from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec
from robolearn.transition import TransitionWriter

OBS = ObservationSpec({
    "state": ArraySpec((3,), low=(-1e6,) * 3, high=(1e6,) * 3),
    "front": ArraySpec((8, 8, 3), dtype="uint8"),
})
ACT = ActionSpec(ArraySpec((2,), names=("a.pos", "b.pos"), low=(-1e6, -1e6), high=(1e6, 1e6)))


def obs_at(episode: int, step: int) -> dict[str, np.ndarray]:
    img = np.full((8, 8, 3), (7 * episode + 3 * step) % 256, np.uint8)  # flat, like a rendered background
    img[episode % 8, step % 8] = (episode % 256, step % 256, 255)
    return {"state": np.array([episode, step, episode * 0.5 + step], np.float32), "front": img}


def batch(episode: int, start: int, n: int, end: str | None = None, version: int = 1, intervention: bool = False,
          success: bool = False, reward: float | None = None) -> dict[str, np.ndarray]:
    """Steps start..start+n-1 of ``episode``; ``end`` = "terminated" | "truncated" ends it after the last."""
    w = TransitionWriter(OBS)
    for s in range(start, start + n):
        last = s == start + n - 1
        w.add(obs_at(episode, s), np.array([s, -s], np.float32), action_source=1 if intervention else 0,
              intervention=intervention, reward=float(s + 1) if reward is None else reward,
              terminated=bool(last and end == "terminated"), truncated=bool(last and end == "truncated"),
              success=bool(last and success), episode_id=episode, step=s, tick=1000 * episode + s, t_obs=0.5 * s,
              t_act=0.5 * s + 0.01, policy_version=version, chunk_id=s, chunk_index=0, delay_ticks=0)
    return w.flush(final_obs=obs_at(episode, start + n) if end else None)
