"""What every SO-101 sim task shares: the robot, delta joint actions, cameras, rendering.

A task's action (6,) is a bounded joint-position delta per tick (deg for the arm, 0..100 units for the
gripper) added to the servos' current targets and clipped to the joint limits by the robot. Its
observation is a ``state`` vector the task defines plus the uint8 images of the cameras it asks for.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import gymnasium as gym
import mujoco
import numpy as np

from robolearn.sim.so101 import LEVEL_ARM, SimSO101, SimSO101Config
from robolearn.sim.view import camera_frame, camera_option
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

CAMERAS = ("front", "wrist")


@dataclass
class ArmTaskConfig:
    """Fields every arm task has (``task.<field>=...`` on the command line)."""

    name: str = ""
    episode_ticks: int = 100
    success_bonus: float = 10.0
    max_delta_deg: float = 6.0        # per tick, arm joints
    gripper_max_delta: float = 6.0    # per tick, gripper (0..100 units)
    home_deg: list[float] = field(default_factory=lambda: list(LEVEL_ARM))  # robot units
    home_noise_deg: float = 5.0
    cameras: list[str] = field(default_factory=list)  # any of "front", "wrist": uint8 images in the observation
    camera_size: int = 96                              # square images, pixels
    camera_shadows: bool = True                        # false: no shadows or reflections in the camera images,
                                                       # ~12x cheaper in software rendering (sim.view.plain_scene)

    def __post_init__(self) -> None:
        unknown = set(self.cameras) - set(CAMERAS)
        if unknown:
            raise ValueError(f"task.cameras: unknown camera(s) {sorted(unknown)}; available: {', '.join(CAMERAS)}")
        if self.episode_ticks < 1:
            raise ValueError(f"task.episode_ticks must be >= 1, got {self.episode_ticks}")
        for key in ("max_delta_deg", "gripper_max_delta", "camera_size"):
            if getattr(self, key) <= 0:
                raise ValueError(f"task.{key} must be > 0, got {getattr(self, key)}")
        if len(self.home_deg) != 6:
            raise ValueError(f"task.home_deg must have 6 values, got {self.home_deg}")


class ArmTaskEnv(gym.Env):
    """Gymnasium env over the HAL ``SimSO101`` robot (``env.robot``). Subclasses set ``state_names``,
    ``state_low``/``state_high`` and implement ``_state_extra`` (task features after the robot state)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, task: ArmTaskConfig, robot: SimSO101Config | None, model: mujoco.MjModel | None,
                 extra_names: tuple[str, ...], extra_low: tuple[float, ...], extra_high: tuple[float, ...],
                 extra_unit: str) -> None:
        if robot is not None and not isinstance(robot, SimSO101Config):
            raise ValueError(f"task={task.name} runs in simulation and needs robot=sim_so101, got robot={robot.name} "
                             "(on hardware: task=real robot=so101)")
        self.task = task
        self.robot = SimSO101(robot or SimSO101Config(), model=model)  # connected by whoever leases it
        self._tick = 0
        self.render_mode = "rgb_array"
        self._renderer: mujoco.Renderer | None = None
        self._camera_option = camera_option()  # built once, not per frame
        self._kinematics: mujoco.MjData | None = None  # tip_position's

        d, g = task.max_delta_deg, task.gripper_max_delta
        self.action_spec = ActionSpec(ArraySpec(
            (6,), unit="deg/tick (arm), units/tick (gripper)",
            names=tuple(f"{n}.delta" for n in self.robot.action_spec.array.names),
            low=(-d,) * 5 + (-g,), high=(d,) * 5 + (g,),
        ))
        rs = self.robot.observation_spec.arrays["state"]
        n = len(rs.names) + len(extra_names)
        size = task.camera_size
        self.observation_spec = ObservationSpec({"state": ArraySpec(
            (n,), unit=f"deg, deg/s, {extra_unit}", names=rs.names + extra_names,
            low=rs.low + extra_low, high=rs.high + extra_high,
        ), **{cam: ArraySpec((size, size, 3), dtype="uint8", unit="RGB") for cam in task.cameras}})
        self.observation_space = gym.spaces.Dict({
            "state": gym.spaces.Box(-np.inf, np.inf, (n,), np.float32),
            **{cam: gym.spaces.Box(0, 255, (size, size, 3), np.uint8) for cam in task.cameras}})
        self.action_space = gym.spaces.Box(np.array(self.action_spec.array.low, np.float32),
                                           np.array(self.action_spec.array.high, np.float32))

    # --- for subclasses ----------------------------------------------------------------------------
    def _state_extra(self) -> np.ndarray:
        raise NotImplementedError

    def success(self) -> bool:
        """The sim's own success signal now (privileged: ``task=real`` on the twin hides it from the learner)."""
        raise NotImplementedError

    def _obs(self) -> dict[str, np.ndarray]:
        state = self.robot.get_observation()["state"]
        obs = {"state": np.concatenate([state, self._state_extra()]).astype(np.float32)}
        for cam in self.task.cameras:
            obs[cam] = self.render(cam)
        return obs

    def _reset_arm(self) -> None:
        """Home pose plus uniform noise on the five arm joints (the gripper starts at its home opening)."""
        home = np.asarray(self.task.home_deg, dtype=np.float64)
        noise = self.np_random.uniform(-self.task.home_noise_deg, self.task.home_noise_deg, 6)
        noise[5] = 0.0
        self.robot.reset_to(home + noise)
        self._tick = 0

    def _apply_delta(self, action: np.ndarray) -> np.ndarray:
        """Move the servo targets by ``action``; returns the change they really made (the robot clips at its
        joint limits, a safety guard may clip or hold): the executed action, in this task's units."""
        delta = self.action_spec.clip(np.asarray(action, dtype=np.float32))
        before = self.robot.commanded_positions()
        self.robot.send_action(before + delta)
        self._tick += 1
        return (self.robot.commanded_positions() - before).astype(np.float32)

    @contextmanager
    def scene_kept(self) -> Iterator[None]:
        """Whatever the block does to the simulated scene (ticks stepped, servos commanded) is undone after it: the
        MuJoCo state (contacts too) and the tick counter are put back as they were. A look ahead, such as the
        scripted expert's next actions from here (DAgger's oracle), without the episode seeing it."""
        kept = mujoco.MjData(self.robot.model)
        mujoco.mj_copyData(kept, self.robot.model, self.robot.data)
        tick = self._tick
        try:
            yield
        finally:
            mujoco.mj_copyData(self.robot.data, self.robot.model, kept)
            self._tick = tick

    def commanded(self) -> np.ndarray:
        """Where the servos are told to be (robot units): what a chunk of delta actions adds up from."""
        return self.robot.commanded_positions()

    def tip_position(self, joints: np.ndarray) -> np.ndarray:
        """The gripper tip (m, world frame) with the arm at ``joints`` (robot units): forward kinematics on a data
        of its own, so the scene is not touched."""
        if self._kinematics is None:
            self._kinematics = mujoco.MjData(self.robot.model)
        self._kinematics.qpos[self.robot.qpos_indices] = self.robot.to_radians(np.asarray(joints, np.float64))
        mujoco.mj_kinematics(self.robot.model, self._kinematics)
        return self._kinematics.site_xpos[self.robot.model.site("tip").id].copy()

    def hold_action(self) -> np.ndarray:
        """The command that keeps the arm where it is told to be: no change to the servo targets."""
        return np.zeros(6, np.float32)

    def _delta_toward(self, joint_target: np.ndarray) -> np.ndarray:
        """The bounded action (6,) that moves the servo targets toward ``joint_target`` (robot units)."""
        return self.action_spec.clip((joint_target - self.robot.commanded_positions()).astype(np.float32))

    # --- gymnasium -----------------------------------------------------------------------------------
    def render(self, camera: str = "front") -> np.ndarray:
        """An RGB frame (camera_size x camera_size, uint8) from the named camera."""
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.robot.model, self.task.camera_size, self.task.camera_size)
        return camera_frame(self._renderer, self.robot.data, camera, self._camera_option,
                            plain=not self.task.camera_shadows)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        self.robot.disconnect()
