"""``robolearn record task=reach episodes=20 out=demos/reach``: scripted-expert demos as a LeRobotDataset v3.

The task's scripted expert (``env.expert_action()``) drives each seeded episode; every step is written
with lerobot's own ``LeRobotDataset`` writer (state, images as images, action, reward, done, success),
so lerobot's training scripts and policies load it as they would a teleoperated recording.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robolearn.buffer.lerobot_io import lerobot_features, lerobot_frame
from robolearn.hardware.task import TaskEnv


@dataclass
class RecordResult:
    episodes: int
    frames: int
    successes: int
    root: Path


def record(env: TaskEnv, episodes: int, root: Path, repo_id: str, fps: int, seed: int = 0,
           task: str = "") -> RecordResult:
    """Record ``episodes`` expert episodes of ``env`` (seeds ``seed``, ``seed + 1``, ...) into ``root``.
    Each frame's lerobot ``task`` is the env's ``instruction`` when it has one, else ``task``."""
    if not hasattr(env, "expert_action"):
        raise NotImplementedError(f"{type(env).__name__} has no scripted expert to record demos with")
    if root.exists():
        raise FileExistsError(f"{root} already exists; record into a new folder")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(repo_id, fps=fps, features=lerobot_features(env.observation_spec, env.action_spec),
                               root=root, use_videos=False)
    frames = successes = 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        # language-conditioned tasks say what this episode asks for ("pick up the red cube")
        episode_task = getattr(env, "instruction", "") or task
        done, info = False, {}
        while not done:
            action = env.expert_action()
            next_obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            ds.add_frame(lerobot_frame(env.observation_spec, obs, action, reward, terminated,
                                       bool(done and info.get("success")), False, episode_task))
            obs = next_obs
            frames += 1
        ds.save_episode()
        successes += int(bool(info.get("success")))
    ds.finalize()
    return RecordResult(episodes, frames, successes, root)
