"""MuJoCo scenes and tasks on the SO-101-layout arm. Importing registers the gymnasium envs."""

import os

# headless by default (CI, servers): MuJoCo reads this when it is first imported
os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym  # noqa: E402

for _id, _entry, _kwargs in [
    ("robolearn/Reach-v0", "robolearn.sim.reach:ReachEnv", {}),
    ("robolearn/PushCube-v0", "robolearn.sim.cube_tasks:PushCubeEnv", {}),
    ("robolearn/PickCube-v0", "robolearn.sim.cube_tasks:PickCubeEnv", {}),
]:
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=_entry, kwargs=_kwargs)
