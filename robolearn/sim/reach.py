"""``task=reach``: move the SO-101 gripper tip to a random target.

Observation ``state`` (18,): joint positions (deg, gripper 0..100), joint velocities, the tip
position (m, forward kinematics, as a real arm computes it from its encoders) and the target
position (m). Action (6,): bounded joint-position deltas (deg per tick) added to the currently
commanded servo targets, clipped to the joint limits by the robot. Reward: ``-distance / 0.1 m``
per tick (dense), ``+success_bonus`` on success. Success: tip within ``success_radius`` (2 cm) of
the target, which ends the episode (terminated); otherwise it is truncated after
``episode_ticks`` ticks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from robolearn.sim.arm_task import ArmTaskConfig, ArmTaskEnv
from robolearn.sim.so101 import SimSO101Config, arm_rate_units


@dataclass
class ReachConfig(ArmTaskConfig):
    """``task=reach``."""

    name: str = "reach"
    success_radius: float = 0.02  # m
    target_low: list[float] = field(default_factory=lambda: [0.12, -0.15, 0.06])   # m
    target_high: list[float] = field(default_factory=lambda: [0.28, 0.15, 0.24])   # m

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.success_radius <= 0:
            raise ValueError(f"task.success_radius must be > 0, got {self.success_radius}")
        for key in ("target_low", "target_high"):
            if len(getattr(self, key)) != 3:
                raise ValueError(f"task.{key} must have 3 values (x, y, z in m), got {getattr(self, key)}")


class ReachEnv(ArmTaskEnv):
    """Reach a random target with the gripper tip."""

    def __init__(self, task: ReachConfig | None = None, robot: SimSO101Config | None = None) -> None:
        task = task or ReachConfig()
        super().__init__(task, robot, None, ("tip.x", "tip.y", "tip.z", "target.x", "target.y", "target.z"),
                         (-0.45, -0.45, -0.05) + tuple(task.target_low), (0.45, 0.45, 0.5) + tuple(task.target_high),
                         "m, m")
        m = self.robot.model
        self._tip = m.site("tip").id
        self._target_mocap = m.body_mocapid[m.body("target").id]
        self._target = np.zeros(3)
        self.aim_offset = np.zeros(3)  # the expert aims here off the target (recording near misses); 0 each reset

    def _state_extra(self) -> np.ndarray:
        return np.concatenate([self.robot.data.site_xpos[self._tip], self._target])

    def expert_action(self) -> np.ndarray:
        """The scripted expert: a damped least-squares step of the tip toward the target (deg per tick),
        from the simulator's own kinematics (privileged state a real robot would not have)."""
        m, d = self.robot.model, self.robot.data
        jac = np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jac, None, self._tip)
        j = jac[:, self.robot.arm_dof_indices]
        aim = self._target + self.aim_offset
        dq = j.T @ np.linalg.solve(j @ j.T + 1e-4 * np.eye(3), aim - d.site_xpos[self._tip])
        return self.action_spec.clip(np.concatenate([arm_rate_units(dq), [0.0]]).astype(np.float32))

    def success(self) -> bool:
        """The sim's own success signal: the tip within ``success_radius`` of the target."""
        return self.tip_distance() <= self.task.success_radius

    def tip_distance(self) -> float:
        return float(np.linalg.norm(self.robot.data.site_xpos[self._tip] - self._target))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._reset_arm()
        self._target = self.np_random.uniform(self.task.target_low, self.task.target_high)
        self.aim_offset = np.zeros(3)
        self.robot.data.mocap_pos[self._target_mocap] = self._target
        mujoco.mj_forward(self.robot.model, self.robot.data)
        return self._obs(), {"success": False, "distance": self.tip_distance()}

    def step(self, action: np.ndarray):
        executed = self._apply_delta(action)
        dist = self.tip_distance()
        success = self.success()
        reward = -dist / 0.1 + (self.task.success_bonus if success else 0.0)
        truncated = (not success) and self._tick >= self.task.episode_ticks
        return self._obs(), float(reward), bool(success), bool(truncated), {"success": success, "distance": dist,
                                                                            "executed_action": executed}
