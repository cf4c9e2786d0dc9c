"""``robolearn record task=reach episodes=20 out=demos/reach``: scripted-expert demos as a LeRobotDataset v3.

The task's scripted expert (``env.expert_action()``) drives each seeded expert episode; every step is written
with lerobot's own ``LeRobotDataset`` writer (state, images as images, action, reward, done, success),
so lerobot's training scripts and policies load it as they would a teleoperated recording.

For a success classifier (``robolearn reward train``) three more kinds of frames: ``hold_ticks=N`` keeps each
episode going for N ticks of success after the expert succeeds (the expert holds there), and
``near_misses=M`` records M more episodes in which the expert aims ``miss_m`` (a range, m) away from the goal
(tasks with an ``aim_offset``: reach), so they end close to success without it. Every frame's
``next.success`` is the simulator's success after that frame's step: the labels are exact. ``hold_aim_m=r``
(reach) has the expert of the successful episodes aim a random point up to ``r`` from the goal, so the success
frames it holds cover the success region out to near its edge, not only its centre: with near misses just outside
it, the classifier is shown the boundary from both sides. ``wander=W`` records W more episodes in which no expert
drives: the arm is moved about at random (``RandomWalk``), as a person moving it without doing the task would. Its
frames are poses the expert never takes, labelled by the same exact success; without them a classifier has only
seen the expert's way to the goal, and an RL policy rewarded by it finds the poses it never saw and is told yes
there (docs/algorithms.md, "Success classifier (learned reward)"). The walk moves every action element, the gripper's
too, so a gripper the expert never moved varies in these frames and the classifier's training keeps it. A wander
episode runs to the time limit, or until it has had ``hold_ticks`` ticks of success (not necessarily in a row). Only
in simulation: a real arm is never driven at random (record it by teleop).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robolearn.buffer.lerobot_io import lerobot_features, lerobot_frame, save_episode
from robolearn.hardware.task import TaskEnv


@dataclass(frozen=True)
class RandomWalk:
    """Actions that move the arm about at random: a_t = clip(keep * a_{t-1} + step * (high - low) / 2 * n_t, low,
    high), n_t ~ N(0, I), a_0 = clip(0) (shapes: (A,), the action spec's). ``keep`` near 1 makes the motion smooth
    (a hand sweeping the arm, not a tremor); with the twin's joint-delta actions it wanders over the workspace."""

    keep: float = 0.85
    step: float = 0.5

    def actions(self, low: np.ndarray, high: np.ndarray, rng: np.random.Generator) -> Iterator[np.ndarray]:
        action = np.clip(np.zeros_like(low), low, high)
        while True:
            action = np.clip(self.keep * action + self.step * (high - low) / 2 * rng.normal(size=low.shape), low, high)
            yield action.astype(np.float32)


@dataclass
class RecordResult:
    episodes: int
    frames: int
    successes: int
    root: Path


def record(env: TaskEnv, episodes: int, root: Path, repo_id: str, fps: int, seed: int = 0,
           task: str = "", hold_ticks: int = 0, near_misses: int = 0,
           miss_m: tuple[float, float] = (0.04, 0.08), hold_aim_m: float = 0.0, wander: int = 0) -> RecordResult:
    """Record ``episodes`` expert episodes of ``env`` (seeds ``seed``, ``seed + 1``, ...), then ``near_misses``
    more, then ``wander`` episodes of a ``RandomWalk``, into ``root``. Each frame's lerobot ``task`` is the env's
    ``instruction`` when it has one, else ``task``."""
    if not hasattr(env, "expert_action"):
        raise NotImplementedError(f"{type(env).__name__} has no scripted expert to record demos with")
    if (near_misses or hold_aim_m) and not hasattr(env, "aim_offset"):
        raise NotImplementedError(f"near_misses and hold_aim_m: {type(env).__name__}'s expert cannot aim off its goal "
                                  "(no aim_offset)")
    if wander and getattr(env, "scene", env) is None:  # task=real on hardware: no simulated scene under it
        raise NotImplementedError("wander drives the arm at random: only in simulation (the twin), never on hardware")
    if min(hold_ticks, near_misses, hold_aim_m, wander) < 0 or not 0 < miss_m[0] <= miss_m[1]:
        raise ValueError(f"hold_ticks, near_misses, hold_aim_m and wander must be >= 0 and 0 < miss_m[0] <= miss_m[1], "
                         f"got {hold_ticks}, {near_misses}, {hold_aim_m}, {wander}, {miss_m}")
    if root.exists():
        raise FileExistsError(f"{root} already exists; record into a new folder")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(repo_id, fps=fps, features=lerobot_features(env.observation_spec, env.action_spec),
                               root=root, use_videos=False)
    frames = successes = 0
    low, high = env.action_spec.array.low_array(), env.action_spec.array.high_array()
    for ep in range(episodes + near_misses + wander):
        obs, _ = env.reset(seed=seed + ep)
        aim_m = miss_m if ep >= episodes else (0.0, hold_aim_m)  # a near miss aims beside the goal
        rng = np.random.default_rng([seed, ep])  # the episode's own draws: its aim, or its walk
        walk = RandomWalk().actions(low, high, rng) if ep >= episodes + near_misses else None
        if aim_m[1] and walk is None:
            direction = rng.normal(size=3)
            env.aim_offset = direction / np.linalg.norm(direction) * rng.uniform(*aim_m)
        # language-conditioned tasks say what this episode asks for ("pick up the red cube")
        episode_task = getattr(env, "instruction", "") or task
        done, info, held = False, {}, 0
        while not done:
            action = env.expert_action() if walk is None else next(walk)
            next_obs, reward, terminated, truncated, info = env.step(action)
            success = bool(info.get("success"))
            holding = terminated and success and held < hold_ticks  # success frames for a classifier
            held += int(terminated and success)
            done = (terminated or truncated) and not holding
            ds.add_frame(lerobot_frame(env.observation_spec, obs, action, reward, terminated and done, success, False,
                                       episode_task))
            obs = next_obs
            frames += 1
        save_episode(ds)
        successes += int(bool(info.get("success")))
    ds.finalize()
    return RecordResult(episodes + near_misses + wander, frames, successes, root)
