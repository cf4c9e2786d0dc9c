"""MuJoCo scenes and tasks on the SO-101-layout arm. Importing registers the gymnasium envs."""

import os

# headless by default (CI, servers): MuJoCo reads this when it is first imported
os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402

if "robolearn/Reach-v0" not in gym.registry:
    gym.register(id="robolearn/Reach-v0", entry_point="robolearn.sim.reach:ReachEnv")
