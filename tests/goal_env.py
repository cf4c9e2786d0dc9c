"""A goal-conditioned gymnasium env that lives in the test suite, registered when this module is imported
(``task.env_id=tests.goal_env:GoalPoint-v0``): a point in the plane must reach a goal drawn at each reset.

    observation    Dict: observation (position, 2, unbounded), achieved_goal (position, 2, unbounded),
                   desired_goal (goal, 2, in [-1, 1])
    action         velocity (2) in [-1, 1], 0.1 per step
    reward         -|position - goal|;  success (info ``is_success``): within 0.1 of the goal
    episode        30 steps (truncated), never terminated

The goal is only in ``desired_goal``: a policy that does not see it cannot do better than chance.
With ``IMPORT_LOG`` set, each importing process appends its pid and ``sys.argv`` to that file, so a test can
tell which processes imported the module.
"""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np

ENV_ID = "GoalPoint-v0"
IMPORT_LOG = "ROBOLEARN_TEST_IMPORT_LOG"


class GoalPointEnv(gym.Env):
    metadata = {"render_fps": 50}

    def __init__(self) -> None:
        unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({
            "observation": unbounded, "achieved_goal": unbounded,
            "desired_goal": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._pos = np.zeros(2, np.float32)
        self._goal = np.zeros(2, np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self._pos.copy(), "achieved_goal": self._pos.copy(), "desired_goal": self._goal.copy()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._goal = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._steps = 0
        return self._obs(), {"is_success": False}

    def step(self, action):
        self._pos = (self._pos + 0.1 * np.clip(np.asarray(action, np.float32), -1, 1)).astype(np.float32)
        self._steps += 1
        distance = float(np.linalg.norm(self._pos - self._goal))
        return self._obs(), -distance, False, self._steps >= 30, {"is_success": distance < 0.1}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=GoalPointEnv)
if os.environ.get(IMPORT_LOG):
    with open(os.environ[IMPORT_LOG], "a") as log:
        log.write(f"{os.getpid()} {' '.join(sys.argv)}\n")
