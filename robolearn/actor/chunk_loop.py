"""One episode of a robot driven by a ``ChunkExecutor`` under a clock (real or simulated).

Used by the delay sweep, the control-loop benchmark and the tests; the tick counter runs on across
episodes so every action keeps a unique tick.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from robolearn.actor.chunking import ChunkExecutor


@dataclass
class EpisodeResult:
    success: bool
    ticks: int
    episode_return: float
    stalled_ticks: int
    end_tick: int
    actions: np.ndarray  # (ticks, A) executed, robot units


def hold_action(env) -> np.ndarray:
    """The last safe command: for delta-position tasks, no change (the servos keep their targets)."""
    hold = getattr(env, "hold_action", None)
    return hold() if hold is not None else np.zeros(env.action_spec.dim, np.float32)


def run_chunked_episode(env, executor: ChunkExecutor, clock, seed: int, tick: int = 0) -> EpisodeResult:
    torch.manual_seed(seed)  # the flow policy's noise: same seed, same trajectory
    obs, _ = env.reset(seed=seed)
    executor.start_episode(obs, tick, clock)
    clock.reset()
    stalls0, start = executor.metrics.stalled_ticks, tick
    ret, executed, info = 0.0, [], {}
    while True:
        item = executor.tick(tick, obs)
        action = item.action if item is not None else hold_action(env)
        obs, reward, terminated, truncated, info = env.step(action)
        executed.append(action)
        ret += float(reward)
        tick += 1
        if terminated or truncated:
            break
        clock.wait()
    return EpisodeResult(bool(info.get("success", False)), tick - start, ret,
                         executor.metrics.stalled_ticks - stalls0, tick, np.asarray(executed))
