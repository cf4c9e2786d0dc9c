"""MuJoCo scenes and tasks on the SO-101-layout arm. Importing registers the gymnasium envs."""

import gymnasium as gym

if "robolearn/Reach-v0" not in gym.registry:
    gym.register(id="robolearn/Reach-v0", entry_point="robolearn.sim.reach:ReachEnv")
