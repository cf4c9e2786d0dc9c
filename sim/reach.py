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

import gymnasium as gym
import mujoco
import numpy as np

from robolearn.registry import register
from robolearn.sim.so101 import SimSO101, SimSO101Config
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec


@dataclass
class ReachConfig:
    """``task=reach``."""

    name: str = "reach"
    episode_ticks: int = 100
    success_radius: float = 0.02  # m
    success_bonus: float = 10.0
    max_delta_deg: float = 6.0    # per tick, arm joints; gripper gets the same in 0..100 units
    target_low: list[float] = field(default_factory=lambda: [0.12, -0.15, 0.06])   # m
    target_high: list[float] = field(default_factory=lambda: [0.28, 0.15, 0.24])   # m
    home_deg: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0, 0.0, 50.0])
    home_noise_deg: float = 5.0
    cameras: list[str] = field(default_factory=list)  # any of "front", "wrist": uint8 images in the observation
    camera_size: int = 96                              # square images, pixels

    def __post_init__(self) -> None:
        unknown = set(self.cameras) - {"front", "wrist"}
        if unknown:
            raise ValueError(f"task.cameras: unknown camera(s) {sorted(unknown)}; available: front, wrist")
        if self.episode_ticks < 1:
            raise ValueError(f"task.episode_ticks must be >= 1, got {self.episode_ticks}")
        if self.success_radius <= 0:
            raise ValueError(f"task.success_radius must be > 0, got {self.success_radius}")
        if self.max_delta_deg <= 0:
            raise ValueError(f"task.max_delta_deg must be > 0, got {self.max_delta_deg}")
        for key in ("target_low", "target_high"):
            if len(getattr(self, key)) != 3:
                raise ValueError(f"task.{key} must have 3 values (x, y, z in m), got {getattr(self, key)}")
        if len(self.home_deg) != 6:
            raise ValueError(f"task.home_deg must have 6 values, got {self.home_deg}")


class ReachEnv(gym.Env):
    """Gymnasium env over the HAL ``SimSO101`` robot (``env.robot``)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, task: ReachConfig | None = None, robot: SimSO101Config | None = None,
                 render_mode: str | None = None) -> None:
        self.task = task or ReachConfig()
        if robot is not None and not isinstance(robot, SimSO101Config):
            raise ValueError(f"task=reach runs in simulation and needs robot=sim_so101, got robot={robot.name} "
                             "(a real-robot reach task needs a target and reward source, not built yet)")
        self.robot = SimSO101(robot or SimSO101Config())
        self.robot.connect()
        m = self.robot.model
        self._tip = m.site("tip").id
        self._target_mocap = m.body_mocapid[m.body("target").id]
        self._target = np.zeros(3)
        self._tick = 0
        self.render_mode = render_mode
        self._renderer: mujoco.Renderer | None = None

        d = self.task.max_delta_deg
        self.action_spec = ActionSpec(ArraySpec(
            (6,), unit="deg/tick (arm), units/tick (gripper)",
            names=tuple(f"{n}.delta" for n in self.robot.action_spec.array.names), low=(-d,) * 6, high=(d,) * 6,
        ))
        rs = self.robot.observation_spec.arrays["state"]
        lo, hi = self.task.target_low, self.task.target_high
        size = self.task.camera_size
        self.observation_spec = ObservationSpec({"state": ArraySpec(
            (18,), unit="deg, deg/s, m, m",
            names=rs.names + ("tip.x", "tip.y", "tip.z", "target.x", "target.y", "target.z"),
            low=rs.low + (-0.45, -0.45, -0.05) + tuple(lo),
            high=rs.high + (0.45, 0.45, 0.5) + tuple(hi),
        ), **{cam: ArraySpec((size, size, 3), dtype="uint8", unit="RGB") for cam in self.task.cameras}})
        self.observation_space = gym.spaces.Dict({
            "state": gym.spaces.Box(-np.inf, np.inf, (18,), np.float32),
            **{cam: gym.spaces.Box(0, 255, (size, size, 3), np.uint8) for cam in self.task.cameras}})
        self.action_space = gym.spaces.Box(-d, d, (6,), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        state = self.robot.get_observation()["state"]
        tip = self.robot.data.site_xpos[self._tip]
        obs = {"state": np.concatenate([state, tip, self._target]).astype(np.float32)}
        for cam in self.task.cameras:
            obs[cam] = self.render(cam)
        return obs

    def expert_action(self) -> np.ndarray:
        """The scripted expert: a damped least-squares step of the tip toward the target (deg per tick),
        from the simulator's own kinematics (privileged state a real robot would not have)."""
        m, d = self.robot.model, self.robot.data
        jac = np.zeros((3, m.nv))
        mujoco.mj_jacSite(m, d, jac, None, self._tip)
        j = jac[:, self.robot.arm_dof_indices]
        dq = j.T @ np.linalg.solve(j @ j.T + 1e-4 * np.eye(3), self._target - d.site_xpos[self._tip])
        return self.action_spec.clip(np.concatenate([np.degrees(dq), [0.0]]).astype(np.float32))

    def tip_distance(self) -> float:
        return float(np.linalg.norm(self.robot.data.site_xpos[self._tip] - self._target))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        home = np.asarray(self.task.home_deg, dtype=np.float64)
        noise = rng.uniform(-self.task.home_noise_deg, self.task.home_noise_deg, 6)
        noise[5] = 0.0
        self.robot.reset_to(home + noise)
        self._target = rng.uniform(self.task.target_low, self.task.target_high)
        self.robot.data.mocap_pos[self._target_mocap] = self._target
        mujoco.mj_forward(self.robot.model, self.robot.data)
        self._tick = 0
        return self._obs(), {"success": False, "distance": self.tip_distance()}

    def step(self, action: np.ndarray):
        delta = self.action_spec.clip(np.asarray(action, dtype=np.float32))
        self.robot.send_action(self.robot.commanded_positions() + delta)
        self._tick += 1
        dist = self.tip_distance()
        success = dist <= self.task.success_radius
        reward = -dist / 0.1 + (self.task.success_bonus if success else 0.0)
        truncated = (not success) and self._tick >= self.task.episode_ticks
        return self._obs(), float(reward), bool(success), bool(truncated), {"success": success, "distance": dist}

    def render(self, camera: str = "front") -> np.ndarray:
        """An RGB frame (camera_size x camera_size, uint8) from the named camera."""
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.robot.model, self.task.camera_size, self.task.camera_size)
        self._renderer.update_scene(self.robot.data, camera=camera)
        return self._renderer.render().copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.robot.disconnect()


register("task", "reach", ReachConfig, ReachEnv)
