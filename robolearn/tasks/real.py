"""``task=real``: a task on a real arm (``robot=so101``) or on its sim twin with the sim's success hidden
(``robot=sim_so101``), with a person (``teleop=...``, ``hardware.operator``) for rewards and resets.

One episode:

    reset     (``task.reset.by_teleop``: the person first puts the scene back by teleop, ends with Enter)
              the arm moves to the named pose ``task.reset.pose`` along a straight joint-space line at
              ``task.reset.max_speed`` (every command through the actor's safety guard, paced at the
              control rate; a late beat only slows it: the guard's lateness watchdog does not hold a reset,
              ``GuardedRobot.send_paced``), then holds while the person sets the scene up, until they press Enter
              ("ready": only an Enter after the move counts), or ``task.reset.ready_timeout_s`` passes (then it
              starts, and says so; 0, the default: it waits)
    ticks     action = a bounded joint-position change of the command (the sim tasks' action units, so a
              policy moves between them), clipped to the task's joint limits (``task.joint_low/high``),
              and held where it would take the gripper tip out of the box ``task.workspace_low/high``
              (forward kinematics of the arm's model, ``task.kinematics``)
    ends      the person's label: success (reward ``success_bonus``, terminated), failure or re-record
              (truncated, reward 0; a re-recorded episode's steps are kept: in the buffer they look like a
              failure's, the re-record is in the step's info and the task's counts only), or the time
              limit ``task.episode_s`` (truncated)

Rewards: ``reward=human``, the person's labels; ``reward=classifier``, a learned success classifier
(``rewards.classifier``) on the observation after each step: ``P(success) >= threshold`` for
``classifier_confirm_ticks`` ticks in a row ends the episode as a success, unless the person labelled one of those
steps (their label wins; with 1, the default, a false success ends the episode before anyone can veto it).
Observation ``state``: the robot's joint positions and velocities, then the tip position (m) from the arm's
kinematics, as the real arm computes it from its encoders; the cameras ``task.cameras`` as images (the
robot's cameras, or the twin's rendered ones). On the twin the scene (``task.twin``: its objects, its
randomisation per seed) is a sim task whose reward and observation extras the learner never sees; its success
is in ``info["sim_success"]`` for evaluation and for the scripted person only, and the episode's success label
is the person's.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from robolearn.hardware.robot import Robot
from robolearn.hardware.safety import GuardedRobot
from robolearn.hardware.teleop import TeleopEvent
from robolearn.registry import lookup
from robolearn.rewards.classifier import load_classifier
from robolearn.sim.ik import SiteIK
from robolearn.sim.so101 import JOINTS, LEVEL_ARM, SimSO101, SimSO101Config, arm_units
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

REWARDS = ("human", "classifier")


@dataclass
class ResetConfig:
    """``task.reset.*``."""

    pose: str = "home"                 # a name in ``poses``
    poses: dict[str, list[float]] = field(default_factory=lambda: {   # robot units (a calibrated arm's degrees)
        "home": list(LEVEL_ARM), "tucked": [0.0, -73.96, 76.2, 57.8, -87.2, 0.0]})
    max_speed: float = 30.0            # deg/s per joint (gripper units/s) along the reset trajectory
    by_teleop: bool = False            # the person first resets the scene by teleop, then presses Enter
    ready_timeout_s: float = 0.0       # wait this long for "ready" after the move, then start anyway (0: wait for it)
    tolerance: float = 5.0             # robot units: the arm's measured joints (not the gripper's: it may close on
                                       # something) this near the pose, or the reset counts as short of it

    def __post_init__(self) -> None:
        if self.pose not in self.poses:
            raise ValueError(f"task.reset.pose={self.pose!r} is not a named pose; poses: {sorted(self.poses)}")
        for name, pose in self.poses.items():
            if len(pose) != len(JOINTS):
                raise ValueError(f"task.reset.poses.{name} must have {len(JOINTS)} values (joints in robot units), "
                                 f"got {pose}")
        if self.max_speed <= 0 or self.ready_timeout_s < 0 or self.tolerance <= 0:
            raise ValueError("task.reset.max_speed and task.reset.tolerance must be > 0, task.reset.ready_timeout_s "
                             ">= 0")


@dataclass
class RealTaskConfig:
    """``task=real``."""

    name: str = "real"
    instruction: str = ""              # what the person teaches (the lerobot task string of recordings)
    reward: str = "human"              # human: the person's labels | classifier: a learned success classifier's,
                                       # which the person's labels override
    classifier: str = ""               # reward=classifier: its folder (robolearn reward train ... --out FOLDER)
    classifier_threshold: float = 0.0  # P(success) that counts as a success; 0: the one stored with it
    classifier_confirm_ticks: int = 1  # ticks in a row at or above it before it ends the episode (the person's
                                       # label in those ticks wins)
    success_bonus: float = 1.0         # reward of the step labelled a success
    episode_s: float = 20.0            # time limit of an episode
    max_delta_deg: float = 6.0         # per tick, arm joints (the sim tasks' action bound)
    gripper_max_delta: float = 6.0     # per tick, gripper units
    joint_low: list[float] = field(default_factory=list)   # robot units; empty: the robot's limits
    joint_high: list[float] = field(default_factory=list)
    workspace_low: list[float] = field(default_factory=lambda: [-0.1, -0.35, 0.0])   # tip box, m, base frame
    workspace_high: list[float] = field(default_factory=lambda: [0.45, 0.35, 0.45])
    kinematics: str = "so101_arm.xml"  # the arm's MJCF (robolearn/sim/assets, or a path) for its kinematics
    cameras: list[str] = field(default_factory=list)        # observation images: robot cameras / twin cameras
    camera_size: int = 96              # the twin's rendered images (square, pixels)
    camera_shadows: bool = True        # the twin's images with shadows (false: ~12x cheaper to render)
    twin: str = "reach"                # robot=sim_so101: the sim task whose scene the twin runs
    scene_state: bool = False          # twin only: the scene's state features (e.g. the target's position) too,
                                       # as a tracker would give them on hardware; its success stays hidden
    reset: ResetConfig = field(default_factory=ResetConfig)

    def __post_init__(self) -> None:
        if self.reward not in REWARDS:
            raise ValueError(f"task.reward must be one of {REWARDS}, got {self.reward!r}")
        if self.reward == "classifier" and not (Path(self.classifier) / "classifier.json").exists():
            raise ValueError(f"task.reward=classifier needs task.classifier=FOLDER with a trained classifier "
                             f"(robolearn reward train); {self.classifier or '(none given)'} holds none")
        if self.classifier_confirm_ticks < 1:
            raise ValueError(f"task.classifier_confirm_ticks must be >= 1, got {self.classifier_confirm_ticks}")
        if not 0.0 <= self.classifier_threshold < 1.0:
            raise ValueError(f"task.classifier_threshold must be in [0, 1), got {self.classifier_threshold}")
        if self.episode_s <= 0 or self.max_delta_deg <= 0 or self.gripper_max_delta <= 0:
            raise ValueError("task.episode_s, task.max_delta_deg and task.gripper_max_delta must be > 0")
        for key in ("joint_low", "joint_high"):
            if getattr(self, key) and len(getattr(self, key)) != len(JOINTS):
                raise ValueError(f"task.{key} must be empty or have {len(JOINTS)} values, got {getattr(self, key)}")
        for key in ("workspace_low", "workspace_high"):
            if len(getattr(self, key)) != 3:
                raise ValueError(f"task.{key} must have 3 values (x, y, z in m), got {getattr(self, key)}")
        if any(lo >= hi for lo, hi in zip(self.workspace_low, self.workspace_high)):
            raise ValueError(f"task.workspace_low {self.workspace_low} must be below workspace_high "
                             f"{self.workspace_high}")


class ArmKinematics:
    """Forward and inverse kinematics of the gripper tip from the arm's MuJoCo model, on scratch data (no
    simulation runs: for a real arm this is its geometry, as its encoders' readings are turned into a pose)."""

    def __init__(self, model: str) -> None:
        self.arm = SimSO101(SimSO101Config(model=model))
        self.ik = SiteIK(self.arm.model, "tip", self.arm.qpos_indices[:5], self.arm.arm_dof_indices)
        self.data = mujoco.MjData(self.arm.model)
        self._tip = self.arm.model.site("tip").id

    def tip(self, joints: np.ndarray) -> np.ndarray:
        self.data.qpos[self.arm.qpos_indices] = self.arm.to_radians(np.asarray(joints, np.float64))
        mujoco.mj_kinematics(self.arm.model, self.data)
        return self.data.site_xpos[self._tip].copy()

    def joints_for(self, tip: np.ndarray, joints: np.ndarray) -> np.ndarray:
        qpos = np.zeros(self.arm.model.nq)
        qpos[self.arm.qpos_indices] = self.arm.to_radians(np.asarray(joints, np.float64))
        arm_rad, _ = self.ik.solve(qpos, np.asarray(tip, np.float64))
        out = np.asarray(joints, np.float32).copy()
        out[:5] = arm_units(arm_rad)
        return out


@dataclass
class RealTaskCounts:
    """What the task did to the commands and episodes, for the actor's status."""

    clipped_to_task_limits: int = 0
    held_at_workspace: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    time_limits: int = 0
    ready_timeouts: int = 0
    resets_short_of_the_pose: int = 0  # the move ran out of beats (held back by the guard, or the arm measured
                                       # farther than task.reset.tolerance from the pose: blocked, or lagging)
    classifier_successes: int = 0      # episodes the classifier ended (the person said nothing that step)
    classifier_successes_sim_agrees: int = 0  # the twin only: of those, how many the hidden sim success confirms


class RealTaskEnv:
    """The task (HAL ``TaskEnv``) on ``robot`` (a real driver, or the sim twin). The actor attaches the person
    (``attach_operator``) before the first reset; the learner and the launcher build it for its specs only."""

    def __init__(self, task: RealTaskConfig | None = None, robot: Any = None) -> None:
        self.task = task = task or RealTaskConfig()
        self.scene = None
        if robot is None or isinstance(robot, SimSO101Config):  # the twin: a sim task's scene, success hidden
            entry = lookup("task", task.twin)
            twin_cfg = entry.config_cls(cameras=list(task.cameras), camera_size=task.camera_size,
                                        camera_shadows=task.camera_shadows)
            self.scene = entry.factory(twin_cfg, robot or SimSO101Config())
            self.robot: Robot = self.scene.robot
        else:
            self.robot = lookup("robot", robot.name).factory(robot)
        self.control_hz = float(self.robot.config.control_hz)
        self.joints = [n.removesuffix(".pos") for n in self.robot.action_spec.array.names]
        if self.joints != list(JOINTS):
            raise ValueError(f"task=real drives an SO-101 arm (joints {list(JOINTS)}); robot={robot.name} has "
                             f"{self.joints}")
        limits = self.robot.action_spec.array
        self.joint_low = np.array(task.joint_low or limits.low, np.float32)
        self.joint_high = np.array(task.joint_high or limits.high, np.float32)
        low, high = np.array(limits.low), np.array(limits.high)
        if np.any(self.joint_low < low - 1e-3) or np.any(self.joint_high > high + 1e-3):
            raise ValueError(f"task.joint_low/high must lie within robot={robot.name if robot else 'sim_so101'}'s "
                             f"limits {list(limits.low)} .. {list(limits.high)}")
        reset_pose = np.array(task.reset.poses[task.reset.pose], np.float32)
        if np.any(reset_pose < self.joint_low) or np.any(reset_pose > self.joint_high):
            raise ValueError(f"task.reset.pose={task.reset.pose} {reset_pose.tolist()} is outside the task's joint "
                             "limits")
        self.kinematics = ArmKinematics(task.kinematics)
        tip = self.kinematics.tip(reset_pose)
        if np.any(tip < task.workspace_low) or np.any(tip > task.workspace_high):
            raise ValueError(f"task.reset.pose={task.reset.pose}: its tip {np.round(tip, 3).tolist()} m is outside the "
                             f"workspace {task.workspace_low} .. {task.workspace_high} (every step would hold there)")
        self.episode_ticks = max(1, round(task.episode_s * self.control_hz))

        d, g = task.max_delta_deg, task.gripper_max_delta
        self.action_spec = ActionSpec(ArraySpec(
            (6,), unit="deg/tick (arm), units/tick (gripper)", names=tuple(f"{j}.delta" for j in JOINTS),
            low=(-d,) * 5 + (-g,), high=(d,) * 5 + (g,)))
        rs = self.robot.observation_spec.arrays["state"]
        cams = self._camera_specs()
        names = rs.names + ("tip.x", "tip.y", "tip.z")
        low, high = rs.low + (-0.6, -0.6, -0.2), rs.high + (0.6, 0.6, 0.7)
        if task.scene_state:
            if self.scene is None:
                raise ValueError("task.scene_state=true passes the sim twin's scene state; a real robot has none")
            ss = self.scene.observation_spec.arrays["state"]
            n = rs.shape[0]  # the scene's state is the robot's, then its own features
            names, low, high = names + ss.names[n:], low + ss.low[n:], high + ss.high[n:]
        self.observation_spec = ObservationSpec({"state": ArraySpec(
            (len(names),), unit=f"{rs.unit}; m", names=names, low=low, high=high), **cams})
        self.classifier = None
        if task.reward == "classifier":
            self.classifier = load_classifier(Path(task.classifier))
            self.classifier.check_observation(self.observation_spec)
        self.threshold = task.classifier_threshold or (self.classifier.spec.threshold if self.classifier else 0.5)
        self.counts = RealTaskCounts()
        self.operator = None
        self.keep_waiting: Callable[[], bool] = lambda: True
        self.realtime = self.scene is None  # hardware runs in wall time; the twin as fast as the loop asks
        self._command: np.ndarray | None = None
        self._tick = 0
        self._confident = 0  # ticks in a row the classifier has said success

    def _camera_specs(self) -> dict[str, ArraySpec]:
        if self.scene is not None:
            return {c: self.scene.observation_spec.arrays[c] for c in self.task.cameras}
        have = {k: v for k, v in self.robot.observation_spec.arrays.items() if k != "state"}
        missing = [c for c in self.task.cameras if c not in have]
        if missing:
            raise ValueError(f"task.cameras {missing}: the robot has no such cameras (it has {sorted(have)}); "
                             "configure them in the robot")
        return {c: have[c] for c in self.task.cameras}

    # --- wiring (the actor's)
    def attach_operator(self, operator, keep_waiting: Callable[[], bool] = lambda: True,
                        realtime: bool | None = None) -> None:
        """The person (``hardware.operator``); ``keep_waiting()`` is asked on every beat of a reset or a wait for
        "ready" (the actor keeps its channels going in it; False: stop waiting, the run is stopping);
        ``realtime``: pace resets in wall time (hardware always is)."""
        self.operator = operator
        operator.arm = self
        self.keep_waiting = keep_waiting
        if realtime is not None:
            self.realtime = realtime or self.scene is None

    # --- the Arm protocol (hardware.operator)
    def commanded(self) -> np.ndarray:
        if self._command is None:
            self._command = self._measured()
        return self._command.copy()

    def action_toward(self, joint_target: np.ndarray) -> np.ndarray:
        return self.action_spec.clip((np.asarray(joint_target, np.float32) - self.commanded()).astype(np.float32))

    def tip_position(self, joints: np.ndarray) -> np.ndarray:
        return self.kinematics.tip(joints)

    def clip_tip(self, tip: np.ndarray) -> np.ndarray:
        return np.clip(tip, self.task.workspace_low, self.task.workspace_high)

    def joints_for_tip(self, tip: np.ndarray, joints: np.ndarray) -> np.ndarray:
        return self.kinematics.joints_for(self.clip_tip(tip), joints)

    # --- commands
    def _measured(self) -> np.ndarray:
        return self.robot.get_observation()["state"][:len(JOINTS)].astype(np.float32)

    def _send(self, target: np.ndarray, paced: bool = False) -> np.ndarray:
        """Command ``target`` (robot units) through the robot (the guard in a run); the new command is what it
        reports it sent. ``paced``: a beat of the reset, which paces itself (``GuardedRobot.send_paced``: the
        guard's lateness watchdog would hold a late reset short of its pose)."""
        sent = np.asarray(self.robot.send_paced(target) if paced and isinstance(self.robot, GuardedRobot)
                          else self.robot.send_action(target), np.float32)
        self._command = sent.copy()
        return sent

    def _bounded(self, target: np.ndarray) -> np.ndarray:
        """``target`` within the task's joint limits, or the current command where the tip would leave the box."""
        clipped = np.clip(target, self.joint_low, self.joint_high).astype(np.float32)
        if not np.array_equal(clipped, target):
            self.counts.clipped_to_task_limits += 1
        tip = self.kinematics.tip(clipped)
        if np.any(tip < self.task.workspace_low) or np.any(tip > self.task.workspace_high):
            self.counts.held_at_workspace += 1
            now = self.commanded()
            return np.concatenate([now[:5], clipped[5:]]).astype(np.float32)  # the gripper may still move
        return clipped

    def _observe(self) -> dict[str, np.ndarray]:
        raw = self.robot.get_observation()
        state = raw["state"].astype(np.float32)
        parts = [state, self.kinematics.tip(state[:len(JOINTS)])]
        if self.task.scene_state:
            parts.append(self.scene._state_extra())
        obs = {"state": np.concatenate(parts).astype(np.float32)}
        for cam in self.task.cameras:
            obs[cam] = self.scene.render(cam) if self.scene is not None else raw[cam]
        return obs

    def _beat(self, t0: float) -> None:
        """Pace one control period (wall time on hardware), counted from ``t0``."""
        if self.realtime:
            time.sleep(max(0.0, t0 + 1.0 / self.control_hz - time.perf_counter()))

    def hold_action(self) -> np.ndarray:
        return np.zeros(6, np.float32)

    @property
    def aim_offset(self) -> np.ndarray:
        """The twin's expert aims this far off its goal (recording near misses), where its scene has one."""
        return self.scene.aim_offset

    @aim_offset.setter
    def aim_offset(self, offset: np.ndarray) -> None:
        self.scene.aim_offset = offset

    def expert_action(self) -> np.ndarray:
        """The twin only: the scene's scripted expert (privileged), for recording demos and benchmarks."""
        if self.scene is None:
            raise NotImplementedError("a real robot has no scripted expert; record demos by teleop")
        return self.scene.expert_action()

    # --- the reset procedure
    def reset(self, *, seed: int | None = None, options: dict | None = None):  # noqa: ARG002
        if self.operator is None:
            raise RuntimeError("task=real needs a person: the actor attaches teleop=... before the first reset")
        if self.scene is not None:
            self._reset_scene(seed)
        self.operator.drop_pending()  # keys pressed during the last episode or an e-stop's hold say nothing now
        if self.task.reset.by_teleop:
            self._reset_by_teleop()
        self._move_to(np.array(self.task.reset.poses[self.task.reset.pose], np.float32))
        self._wait_for_ready()
        self.operator.prompt = ""
        self.operator.drop_pending()
        self._tick = self._confident = 0
        return self._observe(), {"success": False}

    def _reset_scene(self, seed: int | None) -> None:
        """The twin: the scene's objects are placed anew (as a person would); the arm stays where it is and moves
        to the reset pose itself, as a real arm must."""
        raw = self.scene.robot
        arm_q, arm_ctrl = raw.data.qpos[raw.qpos_indices].copy(), raw.data.ctrl[raw._act_idx].copy()
        first = self._command is None
        self.scene.reset(seed=seed)
        if not first:
            raw.data.qpos[raw.qpos_indices], raw.data.ctrl[raw._act_idx] = arm_q, arm_ctrl
            raw.data.qvel[:] = 0.0
            mujoco.mj_forward(raw.model, raw.data)
        else:
            self._command = None  # the scene placed the arm: the first command starts from there

    def _move_to(self, pose: np.ndarray) -> None:
        """Joint-space line to ``pose`` at ``reset.max_speed``, each tick from what was really sent (so an e-stop
        on the way, a hold, or the guard's own limits never make it jump when it goes on); then the pose is held
        until the arm's measured joints are within ``reset.tolerance`` of it (a command is not a position: a
        blocked or lagging arm is counted short, not taken for reset). The jaw's command counts as there once it
        stops gaining on the pose (held where the jaw closed on something)."""
        step = np.full(len(JOINTS), self.task.reset.max_speed / self.control_hz, np.float32)
        self.operator.prompt = f"moving to the reset pose '{self.task.reset.pose}'"
        far = float(np.max(np.abs(pose - self.commanded())))
        stalled = 0  # beats in a row the jaw's command made no headway: clamped where it is, closed on something
        settle = int(math.ceil(self.control_hz))  # beats for the arm to catch up with a command already there
        for _ in range(int(math.ceil(far / step[0])) * 4 + 10 + settle):  # the guard may slow it: bounded beats
            t0 = time.perf_counter()
            self.operator.poll()
            if not self.keep_waiting():
                return
            now = self.commanded()
            if (np.max(np.abs(pose[:5] - now[:5])) <= 1e-3 and (abs(pose[5] - now[5]) <= 1e-3 or stalled >= 2)
                    and np.max(np.abs(self._measured()[:5] - pose[:5])) <= self.task.reset.tolerance):
                return
            sent = self._send(now + np.clip(pose - now, -step, step), paced=True)  # at the pose: holds it
            # under half a step nearer is no headway (an encoder count of jitter in lerobot's clamp); two beats in
            # a row, so one beat of the guard holding every joint does not end the move
            stalled = stalled + 1 if abs(pose[5] - sent[5]) > abs(pose[5] - now[5]) - step[5] / 2 else 0
            self._beat(t0)
        self.counts.resets_short_of_the_pose += 1
        print(f"[task=real] the arm did not reach the reset pose '{self.task.reset.pose}' (commanded "
              f"{np.round(self.commanded() - pose, 1).tolist()}, measured "
              f"{np.round(self._measured() - pose, 1).tolist()} from it)", file=sys.stderr, flush=True)

    def _reset_by_teleop(self) -> None:
        """The person drives (their device, bounded as when taking over) until they press Enter."""
        self.operator.prompt = "reset the scene by teleop, then press Enter"
        print(f"[task=real] {self.operator.prompt}", flush=True)
        self.operator.begin_drive()  # from where the arm is: no target left over from an earlier takeover
        try:
            while self.keep_waiting():
                t0 = time.perf_counter()
                if self.operator.take_ready():
                    return
                target = self.operator.drive_target()
                self._send(self._bounded(target) if target is not None else self.commanded(), paced=True)
                self._beat(t0)
        finally:
            self.operator.end_drive()

    def _wait_for_ready(self) -> None:
        timeout = self.task.reset.ready_timeout_s
        self.operator.drop_pending()  # only an Enter after the arm has arrived counts
        if self.operator.take_ready():  # a scripted person: at once
            return
        self.operator.prompt = "set up the scene, then press Enter (ready)"
        print(f"[task=real] {self.operator.prompt}", flush=True)
        deadline = time.monotonic() + timeout if timeout > 0 else math.inf
        while self.keep_waiting():
            t0 = time.perf_counter()
            if self.operator.take_ready():
                break
            if time.monotonic() >= deadline:
                self.counts.ready_timeouts += 1
                print(f"[task=real] no 'ready' within task.reset.ready_timeout_s={timeout:g} s; starting the episode",
                      file=sys.stderr, flush=True)
                break
            self._send(self.commanded(), paced=True)  # hold
            self._beat(t0)

    # --- a tick
    def step(self, action: np.ndarray):
        delta = self.action_spec.clip(np.asarray(action, np.float32))
        before = self.commanded()
        sent = self._send(self._bounded(before + delta))
        self._tick += 1
        obs = self._observe()
        label = self.operator.take_label()  # the person's word first: it overrides the classifier
        info: dict[str, Any] = {"executed_action": (sent - before).astype(np.float32), "label": label or ""}
        if self.scene is not None:
            info["sim_success"] = bool(self.scene.success())
        if label is not None:
            self.counts.labels[label.value] = self.counts.labels.get(label.value, 0) + 1
        if self.classifier is not None:
            info["success_probability"] = p = self.classifier.probability(obs)
            self._confident = self._confident + 1 if p >= self.threshold else 0
            if label is None and self._confident >= self.task.classifier_confirm_ticks:
                label = TeleopEvent.SUCCESS
                info["label"] = "classifier"
                self.counts.classifier_successes += 1
                self.counts.classifier_successes_sim_agrees += int(info.get("sim_success", False))
        success = label == TeleopEvent.SUCCESS
        info["success"] = success
        info["rerecord"] = label == TeleopEvent.RERECORD
        truncated = label in (TeleopEvent.FAILURE, TeleopEvent.RERECORD)
        if label is None and self._tick >= self.episode_ticks:
            truncated = True
            self.counts.time_limits += 1
        reward = self.task.success_bonus if success else 0.0
        return obs, float(reward), success, bool(truncated), info

    def close(self) -> None:
        if self.scene is not None:
            self.scene.close()
        elif self.robot.is_connected:
            self.robot.disconnect()
