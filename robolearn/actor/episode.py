"""The one episode loop: every place that acts on a robot (the production actor, ``robolearn eval``, the
acting benchmarks) runs an episode through ``EpisodeLoop``.

One tick, in the shape of openpi's runtime step:

    observe    the observation from the last step (or the reset)
    act        ``TickDriver``: the human's action while a teleop intervenes, else the chunk executor's
               (splice arrived chunks, ask for the next one, pop the action for this tick; a stall holds
               the last safe command)
    apply      every subscriber's ``on_apply(episode_id, step)`` (the step is begun), then ``env.step(action)``
    notify     every subscriber's ``on_step(StepRecord)``, in the order given; then ``clock.wait()`` paces

Who does what around that is attached, not written into the loop: ``gate(tick)`` is asked before each
tick and may hold the robot (pacing, throttling) or stop the episode (stop flag, budget, lost lease);
subscribers record transitions, write status, poll weights. The tick counter runs on across episodes,
so every action a robot executes keeps a unique tick.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from robolearn.actor.chunking import ChunkExecutor
from robolearn.clock import Clock
from robolearn.hardware.task import TaskEnv
from robolearn.hardware.teleop import Intervener
from robolearn.transition import ActionSource


def hold_action(env: TaskEnv) -> np.ndarray:
    """The last safe command: for delta-position tasks, no change (the servos keep their targets)."""
    hold = getattr(env, "hold_action", None)
    return hold() if hold is not None else np.zeros(env.action_spec.dim, np.float32)


def source_fields(source: ActionSource, item, policy_version: int) -> dict[str, Any]:
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

    def __init__(self, env: TaskEnv, executor: ChunkExecutor, human: Intervener | None = None) -> None:
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


@dataclass(frozen=True)
class StepRecord:
    """One executed tick, as subscribers see it. ``obs`` is what the action was chosen on, ``next_obs``
    what followed; ``fields`` are the transition fields of its source (``source_fields``)."""

    episode_id: int
    step: int                    # within the episode, from 0
    tick: int                    # the robot's tick counter (unique across episodes)
    obs: dict[str, np.ndarray]
    action: np.ndarray           # (A,) executed, robot units
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    next_obs: dict[str, np.ndarray]
    fields: dict[str, Any]
    stalled: bool
    t_obs: float                 # wall time the observation was taken (time.time())
    t_act: float                 # wall time the action was applied

    @property
    def success(self) -> bool:
        return bool(self.info.get("success", False))

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


@dataclass
class EpisodeResult:
    episode_id: int
    success: bool
    ticks: int
    episode_return: float
    stalled_ticks: int
    end_tick: int                # the tick counter after the episode (the next episode's first tick)
    actions: np.ndarray          # (ticks, A) executed, robot units
    intervention_ticks: int = 0
    final_obs: dict[str, np.ndarray] = field(default_factory=dict)
    stopped: bool = False        # the gate ended it before the env did (stop, budget, lost lease)


class EpisodeSubscriber(Protocol):
    """Told about each episode as it runs. Every method is optional: ``EpisodeLoop`` calls what exists."""

    def on_episode_start(self, episode_id: int, seed: int, obs: dict[str, np.ndarray]) -> None:
        """After the reset, before the first request for a chunk."""

    def on_apply(self, episode_id: int, step: int) -> None:
        """Just before ``env.step``: the robot is about to execute this step's action."""

    def on_step(self, step: StepRecord) -> None: ...

    def on_episode_end(self, result: EpisodeResult) -> None: ...


class SeedTorch:
    """Seeds torch with each episode's seed before its first chunk request, so a stochastic policy (the flow
    policy's noise) takes the same trajectory from the same seed: benchmarks compare modes episode by episode."""

    def on_episode_start(self, episode_id: int, seed: int, obs: dict[str, np.ndarray]) -> None:  # noqa: ARG002
        torch.manual_seed(seed)


Gate = Callable[[int], bool]  # asked before each tick with its number; False ends the episode now


class EpisodeLoop:
    """Runs episodes of ``env`` with ``executor`` under ``clock`` (a ``RealClock`` paces the robot, a
    ``SimClock`` makes inference take simulated ticks). ``policy_version()`` is the weight version a step
    that executed no chunk action (a stall, the human) is tagged with."""

    def __init__(self, env: TaskEnv, executor: ChunkExecutor, clock: Clock, human: Intervener | None = None,
                 subscribers: Sequence[EpisodeSubscriber] = (), gate: Gate | None = None,
                 policy_version: Callable[[], int] = lambda: 0) -> None:
        self.env, self.executor, self.clock = env, executor, clock
        self.driver = TickDriver(env, executor, human)
        self.subscribers = list(subscribers)
        self.gate = gate
        self.policy_version = policy_version
        self.tick = 0

    def _notify(self, event: str, *args: Any) -> None:
        for sub in self.subscribers:
            method = getattr(sub, event, None)
            if method is not None:
                method(*args)

    def run(self, seed: int, episode_id: int = 0) -> EpisodeResult:
        """One episode from ``env.reset(seed=seed)`` until the env ends it or the gate stops it."""
        obs, _ = self.env.reset(seed=seed)
        t_obs = time.time()
        self.driver.reset()
        self._notify("on_episode_start", episode_id, seed, obs)
        self.executor.start_episode(obs, self.tick, self.clock)
        self.clock.reset()
        stalls_before, start = self.executor.metrics.stalled_ticks, self.tick
        ret, executed, human_ticks, success, stopped = 0.0, [], 0, False, False
        for step in itertools.count():
            if self.gate is not None and not self.gate(self.tick):
                stopped = True
                break
            action, fields, stalled = self.driver.act(self.tick, obs, self.policy_version())
            self._notify("on_apply", episode_id, step)
            t_act = time.time()
            next_obs, reward, terminated, truncated, info = self.env.step(action)
            if info.get("executed_action") is not None:  # clipped or held on its way: record what the robot did
                action = np.asarray(info["executed_action"], np.float32)
            self.driver.executed(action)
            record = StepRecord(episode_id, step, self.tick, obs, action, float(reward), bool(terminated),
                                bool(truncated), info, next_obs, fields, stalled, t_obs, t_act)
            obs, t_obs = next_obs, time.time()
            self.tick += 1
            executed.append(action)
            ret += record.reward
            human_ticks += int(fields["intervention"])
            success = record.success
            self._notify("on_step", record)
            if record.done:
                break
            self.clock.wait()
        result = EpisodeResult(episode_id, success and not stopped, self.tick - start, ret,
                               self.executor.metrics.stalled_ticks - stalls_before, self.tick,
                               np.asarray(executed), human_ticks, obs, stopped)
        self._notify("on_episode_end", result)
        return result
