"""``robolearn record task=reach episodes=20 out=demos/reach``: scripted-expert demos as a LeRobotDataset v3.

The task's scripted expert (``env.expert_action()``) drives each seeded episode; every step is written
with lerobot's own ``LeRobotDataset`` writer (state, images as images, action, reward, done, success),
so lerobot's training scripts and policies load it as they would a teleoperated recording.

For a success classifier (``robolearn reward train``) two more kinds of frames: ``hold_ticks=N`` keeps each
episode going for N ticks of success after the expert succeeds (the expert holds there), and
``near_misses=M`` records M more episodes in which the expert aims ``miss_m`` (a range, m) away from the goal
(tasks with an ``aim_offset``: reach), so they end close to success without it. Every frame's
``next.success`` is the simulator's success after that frame's step: the labels are exact. ``hold_aim_m=r``
(reach) has the expert of the successful episodes aim a random point up to ``r`` from the goal, so the success
frames it holds cover the success region out to near its edge, not only its centre: with near misses just outside
it, the classifier is shown the boundary from both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robolearn.buffer.lerobot_io import lerobot_features, lerobot_frame, save_episode
from robolearn.hardware.task import TaskEnv


@dataclass
class RecordResult:
    episodes: int
    frames: int
    successes: int
    root: Path


def record(env: TaskEnv, episodes: int, root: Path, repo_id: str, fps: int, seed: int = 0,
           task: str = "", hold_ticks: int = 0, near_misses: int = 0,
           miss_m: tuple[float, float] = (0.04, 0.08), hold_aim_m: float = 0.0) -> RecordResult:
    """Record ``episodes`` expert episodes of ``env`` (seeds ``seed``, ``seed + 1``, ...), then ``near_misses``
    more, into ``root``. Each frame's lerobot ``task`` is the env's ``instruction`` when it has one, else ``task``."""
    if not hasattr(env, "expert_action"):
        raise NotImplementedError(f"{type(env).__name__} has no scripted expert to record demos with")
    if (near_misses or hold_aim_m) and not hasattr(env, "aim_offset"):
        raise NotImplementedError(f"near_misses and hold_aim_m: {type(env).__name__}'s expert cannot aim off its goal "
                                  "(no aim_offset)")
    if hold_ticks < 0 or near_misses < 0 or hold_aim_m < 0 or not 0 < miss_m[0] <= miss_m[1]:
        raise ValueError(f"hold_ticks, near_misses and hold_aim_m must be >= 0 and 0 < miss_m[0] <= miss_m[1], got "
                         f"{hold_ticks}, {near_misses}, {hold_aim_m}, {miss_m}")
    if root.exists():
        raise FileExistsError(f"{root} already exists; record into a new folder")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(repo_id, fps=fps, features=lerobot_features(env.observation_spec, env.action_spec),
                               root=root, use_videos=False)
    frames = successes = 0
    for ep in range(episodes + near_misses):
        obs, _ = env.reset(seed=seed + ep)
        aim_m = miss_m if ep >= episodes else (0.0, hold_aim_m)  # a near miss aims beside the goal
        if aim_m[1]:
            rng = np.random.default_rng([seed, ep])
            direction = rng.normal(size=3)
            env.aim_offset = direction / np.linalg.norm(direction) * rng.uniform(*aim_m)
        # language-conditioned tasks say what this episode asks for ("pick up the red cube")
        episode_task = getattr(env, "instruction", "") or task
        done, info, held = False, {}, 0
        while not done:
            action = env.expert_action()
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
    return RecordResult(episodes + near_misses, frames, successes, root)
