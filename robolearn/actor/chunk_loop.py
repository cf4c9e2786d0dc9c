"""One episode of a robot driven by a ``ChunkExecutor`` under a clock (real or simulated), optionally
with a teleop that can take over (a person, or ``sim.intervention.ScriptedHuman``) and a
``TransitionWriter`` that records every step with its source.

Used by the benchmarks (delay sweep, control loop, HIL) and the tests; the tick counter runs on across
episodes so every action keeps a unique tick.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from robolearn.actor.chunking import ChunkExecutor
from robolearn.transition import ActionSource, TransitionWriter


@dataclass
class EpisodeResult:
    success: bool
    ticks: int
    episode_return: float
    stalled_ticks: int
    end_tick: int
    actions: np.ndarray  # (ticks, A) executed, robot units
    intervention_ticks: int = 0
    final_obs: dict | None = None


def hold_action(env) -> np.ndarray:
    """The last safe command: for delta-position tasks, no change (the servos keep their targets)."""
    hold = getattr(env, "hold_action", None)
    return hold() if hold is not None else np.zeros(env.action_spec.dim, np.float32)


def source_fields(source: ActionSource, item, policy_version: int) -> dict:
    """The transition fields of one step: who acted, and the chunk action (``TimedAction``) it executed if
    any (a human's step or a stall has none, and carries the actor's current weight version)."""
    return dict(action_source=source, intervention=source == ActionSource.HUMAN,
                policy_version=item.policy_version if item else policy_version,
                chunk_id=item.chunk_id if item else -1, chunk_index=item.chunk_index if item else 0,
                delay_ticks=item.delay_ticks if item else 0)


class TickDriver:
    """Who acts at each tick: the teleop while it intervenes (its action, flagged ``intervention``, source
    HUMAN; the executor's queue is dropped when it takes over), else the chunk executor (a stall holds
    the last safe command). Returns the action and the transition fields that say where it came from."""

    def __init__(self, env, executor: ChunkExecutor, human=None) -> None:
        self.env, self.executor, self.human = env, executor, human
        self._driving = False

    def reset(self) -> None:
        self._driving = False
        if self.human is not None:
            self.human.reset()

    def act(self, tick: int, obs: dict[str, np.ndarray], policy_version: int) -> tuple[np.ndarray, dict, bool]:
        """(action in robot units, transition fields, stalled)."""
        reading = self.human.read() if self.human is not None else None
        driving = reading is not None and reading.intervening
        if driving and not self._driving:
            self.executor.interrupt(tick)
        self._driving = driving
        if driving:
            return reading.action, source_fields(ActionSource.HUMAN, None, policy_version), False
        item = self.executor.tick(tick, obs)
        action = item.action if item is not None else hold_action(self.env)
        return action, source_fields(ActionSource.POLICY, item, policy_version), item is None

    def executed(self, action: np.ndarray) -> None:
        if self.human is not None:
            self.human.observe(action)


def run_chunked_episode(env, executor: ChunkExecutor, clock, seed: int, tick: int = 0, human=None,
                        writer: TransitionWriter | None = None, episode_id: int = 0,
                        policy_version: int = 0) -> EpisodeResult:
    """``human``: a teleop with ``read()`` / ``observe(action)`` / ``reset()`` that may take over
    (``TickDriver``); ``writer`` records every step with its source."""
    torch.manual_seed(seed)  # the flow policy's noise: same seed, same trajectory
    obs, _ = env.reset(seed=seed)
    driver = TickDriver(env, executor, human)
    driver.reset()
    executor.start_episode(obs, tick, clock)
    clock.reset()
    stalls0, start = executor.metrics.stalled_ticks, tick
    ret, executed, info, human_ticks = 0.0, [], {}, 0
    while True:
        action, fields, _ = driver.act(tick, obs, policy_version)
        human_ticks += int(fields["intervention"])
        t_act = time.time()
        next_obs, reward, terminated, truncated, info = env.step(action)
        driver.executed(action)
        if writer is not None:
            writer.add(obs, action, reward=reward, terminated=terminated, truncated=truncated,
                       success=bool(info.get("success", False)), episode_id=episode_id, step=tick - start,
                       tick=tick, t_obs=t_act, t_act=t_act, **fields)
        obs = next_obs
        executed.append(action)
        ret += float(reward)
        tick += 1
        if terminated or truncated:
            break
        clock.wait()
    return EpisodeResult(bool(info.get("success", False)), tick - start, ret,
                         executor.metrics.stalled_ticks - stalls0, tick, np.asarray(executed), human_ticks, obs)
