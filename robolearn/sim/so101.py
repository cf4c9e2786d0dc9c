"""A MuJoCo twin of the SO-101 follower arm as a HAL ``Robot``.

Same joint names, order and units as lerobot's ``so101_follower`` (``use_degrees=True``): the five
arm joints in degrees, the gripper in 0..100 (0 closed, 100 open), and the same zero and direction of
each joint as a calibrated real arm (``CALIBRATED_SIGN``, ``CALIBRATED_OFFSET_DEG``): a pose in robot
units is the same pose on the twin and on the arm. The action is the absolute
position target of each servo, like the real arm; tasks that want delta actions map them on top.
One ``send_action`` advances the physics by one control period, so the simulation is stepped by the
control loop that drives it (sim time runs as fast as the loop asks).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import mujoco
import numpy as np

from robolearn.hardware.robot import RobotSpecs, check_max_relative_target, joint_specs, safe_action

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
UNITS = ["deg"] * 5 + ["0..100"]  # lerobot's so101_follower with use_degrees=True
ARM_JOINTS = JOINTS[:5]

# A calibrated real arm reads each arm joint as sign * (the twin's angle) + offset, in degrees. lerobot's zero is the
# middle of each joint's calibrated range, which the official SO-101 model (TheRobotStudio's so101_new_calib, whose
# frames lerobot's own kinematics use unchanged) puts at: the upper arm 13.97 deg forward of vertical, the forearm
# 2.21 deg above level, the hand level with its moving jaw on top (the offsets below give these to 0.05 deg);
# shoulder_pan and wrist_roll turn the other way round. The twin's own zero (upper arm vertical, forearm and hand
# level, the jaws opening sideways) is the simpler one to build. wrist_roll's zero is the pose the person held at
# calibration (its range is the full turn), so its offset holds for a wrist held level, jaw on top.
# docs/architecture.md, "The twin's joint convention".
CALIBRATED_SIGN = np.array([-1.0, 1.0, 1.0, 1.0, -1.0])
CALIBRATED_OFFSET_DEG = np.array([0.0, -13.96, 16.2, -2.2, -87.2])
# The twin's zero with the jaws half open, in robot units: the upper arm vertical, the forearm and hand level and
# forward, the jaws opening sideways (the sim tasks' home, task=real's "home" pose).
LEVEL_ARM = (*CALIBRATED_OFFSET_DEG.tolist(), 50.0)


def arm_units(rad: np.ndarray) -> np.ndarray:
    """The five arm joints' twin angles (rad, ``[..., 5]``) in a calibrated arm's degrees."""
    return CALIBRATED_SIGN * np.degrees(rad) + CALIBRATED_OFFSET_DEG


def arm_radians(units: np.ndarray) -> np.ndarray:
    """Inverse of ``arm_units``: a calibrated arm's degrees (``[..., 5]``) as the twin's angles (rad)."""
    return np.radians((np.asarray(units, np.float64) - CALIBRATED_OFFSET_DEG) * CALIBRATED_SIGN)


def arm_rate_units(rad: np.ndarray) -> np.ndarray:
    """A change or speed of the arm joints' twin angles (rad, rad/s) in a calibrated arm's degrees (no offset)."""
    return CALIBRATED_SIGN * np.degrees(rad)


@dataclass
class SimSO101Config:
    """``robot=sim_so101``."""

    name: str = "sim_so101"
    control_hz: float = 25.0
    model: str = "so101_arm.xml"  # file in robolearn/sim/assets, or an absolute path
    max_relative_target: float | None = None  # as lerobot's so101_follower: each command held within this of the
                                              # measured position (robot units); None: only the joint limits

    def __post_init__(self) -> None:
        check_max_relative_target(self.max_relative_target)


def arm_xml(model: str = "so101_arm.xml") -> str:
    """The MJCF text of ``model``: a file in robolearn/sim/assets, or an absolute path."""
    if model.startswith("/"):
        with open(model) as f:
            return f.read()
    return resources.files("robolearn.sim").joinpath("assets", model).read_text()


def load_model(model: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(arm_xml(model))


class SimSO101(RobotSpecs):
    """SO-101 follower in MuJoCo. Observation ``state`` = joint positions then joint velocities."""

    def __init__(self, config: SimSO101Config, model: mujoco.MjModel | None = None) -> None:
        self.config = config
        self.name = config.name
        self.model = model if model is not None else load_model(config.model)
        self.data = mujoco.MjData(self.model)
        self.n_substeps = max(1, round(1.0 / (config.control_hz * self.model.opt.timestep)))
        self._qpos_idx = np.array([self.model.jnt_qposadr[self.model.joint(j).id] for j in JOINTS])
        self._qvel_idx = np.array([self.model.jnt_dofadr[self.model.joint(j).id] for j in JOINTS])
        self._act_idx = np.array([self.model.actuator(j).id for j in JOINTS])
        self.qpos_indices = self._qpos_idx      # the six joints' qpos addresses, in JOINTS order
        self.arm_dof_indices = self._qvel_idx[:5]  # the arm's degrees of freedom (no gripper), for kinematics
        ranges = self.model.jnt_range[[self.model.joint(j).id for j in JOINTS]]
        self._rad_low, self._rad_high = ranges[:, 0].copy(), ranges[:, 1].copy()
        ends = arm_units(self._rad_low[:5]), arm_units(self._rad_high[:5])  # a joint turned round swaps its ends
        low = np.concatenate([np.minimum(*ends), [0.0]])
        high = np.concatenate([np.maximum(*ends), [100.0]])
        self._obs_spec, self._action_spec = joint_specs(list(JOINTS), UNITS, low.tolist(), high.tolist())
        self._connected = False

    # --- units -----------------------------------------------------------------------------------
    def to_robot_units(self, rad: np.ndarray) -> np.ndarray:
        out = arm_units(rad[..., :5])
        grip = (rad[..., 5:] - self._rad_low[5]) / (self._rad_high[5] - self._rad_low[5]) * 100.0
        return np.concatenate([out, grip], axis=-1).astype(np.float32)

    def to_radians(self, units: np.ndarray) -> np.ndarray:
        rad = arm_radians(units[..., :5])
        grip = self._rad_low[5] + units[..., 5:] / 100.0 * (self._rad_high[5] - self._rad_low[5])
        return np.concatenate([rad, grip], axis=-1)

    # --- Robot protocol --------------------------------------------------------------------------
    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def reset_to(self, joint_positions: np.ndarray) -> None:
        """Place the arm at ``joint_positions`` (robot units), at rest, with servos holding there."""
        mujoco.mj_resetData(self.model, self.data)
        rad = self.to_radians(np.asarray(joint_positions, dtype=np.float64))
        self.data.qpos[self._qpos_idx] = rad
        self.data.ctrl[self._act_idx] = rad
        mujoco.mj_forward(self.model, self.data)

    def joint_positions(self) -> np.ndarray:
        return self.to_robot_units(self.data.qpos[self._qpos_idx])

    def joint_speeds_deg(self) -> np.ndarray:
        """The six joints' speeds in degrees a second, in the twin's own directions (the gripper's jaw too: its
        angle, not its 0..100 units)."""
        return np.degrees(self.data.qvel[self._qvel_idx])

    def commanded_positions(self) -> np.ndarray:
        return self.to_robot_units(self.data.ctrl[self._act_idx])

    def get_observation(self) -> dict[str, np.ndarray]:
        pos = self.joint_positions()
        qvel = self.data.qvel[self._qvel_idx]
        vel = np.zeros(6, np.float32)
        vel[:5] = arm_rate_units(qvel[:5])
        vel[5] = qvel[5] / (self._rad_high[5] - self._rad_low[5]) * 100.0  # the gripper's 0..100 units a second, as
        # its position maps the jaw's range (a real arm's finite difference of its positions gives the same)
        return {"state": np.concatenate([pos, vel]).astype(np.float32)}

    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Limits first, then (``max_relative_target``) within reach of where the joints are: a target pushed into
        the table or the cube would otherwise run on ahead of an arm that cannot follow, unseen in its state."""
        sent = safe_action(action, self._action_spec)
        if self.config.max_relative_target is not None:
            present = self.joint_positions()
            lead = self.config.max_relative_target
            sent = np.clip(sent, present - lead, present + lead).astype(np.float32)
        self.data.ctrl[self._act_idx] = self.to_radians(sent)
        mujoco.mj_step(self.model, self.data, nstep=self.n_substeps)
        return sent
