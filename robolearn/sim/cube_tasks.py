"""Cube tasks on the SO-101 arm: ``push_cube``, ``pick_cube`` and the language-conditioned ``pick_cube_color``.

Scene: the arm of ``so101_arm.xml`` plus free cubes (and, for pushing, a goal disc on the floor), built
with ``mujoco.MjSpec`` so the arm stays one file. Only the palm and the two jaws collide with objects.

Observation ``state``: the robot's joint positions and velocities (12), the grasp point (m, from the arm's
forward kinematics), then per cube its position (m), ``sin 4*yaw, cos 4*yaw`` (a cube looks the same every
quarter turn) and its offset from the hand (m: from the grasp point, or for ``push_cube`` from the
fingertips), all left out with ``task.scene_state=false``, for policies that see the scene through cameras;
``push_cube`` adds the goal (x, y in m) and its offset from the cube. The offsets are what a contact task
turns on, and their bounds (``RELATIVE_SCALE``) make a centimetre visible to the policy; ``pick_cube_color``
adds a one-hot of the asked colour, and ``env.instruction`` holds the sentence ("pick up the red cube"). With
``task.language=true`` there is no one-hot: the sentence is the ``instruction`` observation (UTF-8 bytes,
``robolearn.specs.encode_text``), drawn per episode from ``task.instructions`` when several are given.

Domain randomisation (config knobs, applied at every reset from the seeded RNG): cube positions and
yaw, colours (cubes and floor), sliding friction (cubes and floor), lighting (intensity, direction).

Each task has a scripted expert (``env.expert_action()``) that reads privileged simulator state and
plans with inverse kinematics: gripper pointing down, jaws aligned with the cube's faces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import mujoco
import numpy as np

from robolearn.sim.arm_task import ArmTaskConfig, ArmTaskEnv
from robolearn.sim.ik import SiteIK, down_pose
from robolearn.sim.so101 import SimSO101Config, arm_units, arm_xml
from robolearn.specs import ObservationSpec, encode_text, text_spec

COLOURS = {"red": (0.85, 0.15, 0.15), "green": (0.15, 0.7, 0.2), "blue": (0.15, 0.3, 0.9)}
FLOOR_RGB = (0.3, 0.3, 0.35)
GRIPPER_OPEN, GRIPPER_CLOSED, GRIPPER_PUSH = 45.0, 0.0, 9.0  # 0..100 units
# the pick expert's plan (m): its approach point over the cube, how near counts as there and at the grasp pose, how
# far the grasp point may drift from the cube (x, y) while descending, and how high a cube counts as lifted
ABOVE_M, AT_ABOVE_M, AT_GRASP_M, DRIFT_M, LIFTED_M = 0.06, 0.01, 0.006, 0.02, 0.005
GOAL_RGBA = (0.1, 0.8, 0.3, 0.35)
PUSH_GAP = 0.008  # m, the pushing fingertips' place behind the cube's face and above the floor
PUSH_TILT = 0.4  # rad the pushing fingers lean outward: reaches the far side of cubes near the edge
RELATIVE_SCALE = 0.1  # m: the bounds (+-) of the state's hand-to-cube and cube-to-goal offsets. They scale the
                      # offsets so that a centimetre is 0.1 to the policy; absolute positions are scaled by the
                      # reachable space (+-0.45 m), where a centimetre is 0.02 and contact tasks learn slowly
INSTRUCTION_BYTES = 96  # the ``instruction`` observation of pick_cube_color with task.language=true
# The cube scenes' front camera, framed on where the cubes are (from past the table's far edge, looking back at the
# arm): a 64 px frame shows a cube about 8 px wide, against about 4 in the arm's overview that reach keeps
FRONT_CAMERA_POS, FRONT_CAMERA_LOOK_AT, FRONT_CAMERA_FOVY = (0.42, 0.0, 0.32), (0.15, 0.0, 0.0), 32.0


@dataclass
class CubeTaskConfig(ArmTaskConfig):
    """Fields shared by the cube tasks, including the domain-randomisation knobs."""

    episode_ticks: int = 150
    gripper_max_delta: float = 15.0
    cube_size: float = 0.024                                                   # m, edge length
    cube_low: list[float] = field(default_factory=lambda: [0.12, -0.08])       # m, x y region of cube centres
    cube_high: list[float] = field(default_factory=lambda: [0.20, 0.08])
    randomize_yaw: bool = True                                                 # cube yaw uniform in [0, 90) deg
    colour_noise: float = 0.08       # +- per RGB channel on cubes and floor
    friction_range: list[float] = field(default_factory=lambda: [0.7, 1.2])   # sliding friction, cubes and floor
    light_noise: float = 0.3         # +- relative intensity; direction tilted by up to this many rad
    scene_state: bool = True         # the cubes' poses in ``state``; false: the robot's own values only (joints and
                                     # grasp point), the scene seen through the cameras as on hardware
    shaped_reward: bool = True       # the distance terms each tick; false: success_bonus on success and 0 otherwise,
                                     # the reward a person's labels or a success classifier give on hardware

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("cube_low", "cube_high"):
            if len(getattr(self, key)) != 2:
                raise ValueError(f"task.{key} must have 2 values (x, y in m), got {getattr(self, key)}")
        if any(lo > hi for lo, hi in zip(self.cube_low, self.cube_high)):
            raise ValueError(f"task.cube_low {self.cube_low} must be <= task.cube_high {self.cube_high}")
        if not 0.01 <= self.cube_size <= 0.04:
            raise ValueError(f"task.cube_size must be in [0.01, 0.04] m (the jaws open ~4 cm), got {self.cube_size}")
        lo, hi = self.friction_range
        if not 0 < lo <= hi:
            raise ValueError(f"task.friction_range must be [low, high] with 0 < low <= high, got {self.friction_range}")
        if self.colour_noise < 0 or self.light_noise < 0:
            raise ValueError("task.colour_noise and task.light_noise must be >= 0")


def build_scene(cubes: list[str], cube_size: float, goal: bool) -> mujoco.MjModel:
    """The arm plus one free cube per colour name (bodies ``cube_<colour>``) and optionally a goal disc."""
    spec = mujoco.MjSpec.from_string(arm_xml())
    spec.delete(spec.body("target"))  # reach's target marker: a green ball the cameras would see beside the cubes
    frame_front_camera(spec.camera("front"))
    half = cube_size / 2
    for i, colour in enumerate(cubes):
        body = spec.worldbody.add_body(name=f"cube_{colour}", pos=[0.15, 0.06 * i, half])
        body.add_freejoint(name=f"cube_{colour}")
        body.add_geom(name=f"cube_{colour}", type=mujoco.mjtGeom.mjGEOM_BOX, size=[half] * 3,
                      rgba=[*COLOURS[colour], 1.0], mass=0.03, contype=1, conaffinity=1, condim=4,
                      friction=[1.0, 0.01, 0.001])
    if goal:
        goal_body = spec.worldbody.add_body(name="goal", mocap=True, pos=[0.2, 0.0, 0.0005])
        goal_body.add_geom(name="goal", type=mujoco.mjtGeom.mjGEOM_CYLINDER, size=[0.025, 0.0005, 0],
                           rgba=list(GOAL_RGBA), contype=0, conaffinity=0)
    return spec.compile()


def frame_front_camera(camera: mujoco.MjsCamera) -> None:
    """Point ``camera`` from FRONT_CAMERA_POS at FRONT_CAMERA_LOOK_AT, image x horizontal (MuJoCo cameras look
    along their -z axis)."""
    pos, look_at = np.asarray(FRONT_CAMERA_POS), np.asarray(FRONT_CAMERA_LOOK_AT)
    backward = (pos - look_at) / np.linalg.norm(pos - look_at)
    right = np.cross([0.0, 0.0, 1.0], backward)
    right /= np.linalg.norm(right)
    camera.pos = pos
    camera.alt.xyaxes = np.concatenate([right, np.cross(backward, right)])
    camera.fovy = FRONT_CAMERA_FOVY


class CubeTaskEnv(ArmTaskEnv):
    """Base for the cube tasks: scene, randomisation, cube state, the pointing-down IK expert."""

    hand_site = "grasp"  # the site whose offset to each cube is in the state (the part of the hand the task uses)

    def tick_reward(self, shaping: float, success: bool) -> float:
        """A tick's reward: the task's ``shaping`` terms (unless ``task.shaped_reward`` is false) plus the success
        bonus on success."""
        return (shaping if self.task.shaped_reward else 0.0) + (self.task.success_bonus if success else 0.0)

    def __init__(self, task: CubeTaskConfig, robot: SimSO101Config | None, cubes: list[str], goal: bool,
                 extra_names: tuple[str, ...] = (), extra_low: tuple[float, ...] = (),
                 extra_high: tuple[float, ...] = ()) -> None:
        model = build_scene(cubes, task.cube_size, goal)
        names = ("grasp.x", "grasp.y", "grasp.z")
        seen = cubes if task.scene_state else []
        for c in seen:
            names += tuple(f"cube_{c}.{k}" for k in ("x", "y", "z", "sin4yaw", "cos4yaw"))
            names += tuple(f"{self.hand_site}_to_cube_{c}.{k}" for k in ("x", "y", "z"))
        r = RELATIVE_SCALE
        low = (-0.45, -0.45, -0.05) + (-0.5, -0.5, -0.05, -1.0, -1.0, -r, -r, -r) * len(seen) + extra_low
        high = (0.45, 0.45, 0.5) + (0.5, 0.5, 0.5, 1.0, 1.0, r, r, r) * len(seen) + extra_high
        super().__init__(task, robot, model, names + extra_names, low, high, "m, m, 1")
        m = self.robot.model
        self.cubes = cubes
        self.half = task.cube_size / 2
        self._cube_body = {c: m.body(f"cube_{c}").id for c in cubes}
        self._cube_geom = {c: m.geom(f"cube_{c}").id for c in cubes}
        self._cube_qpos = {c: m.jnt_qposadr[m.joint(f"cube_{c}").id] for c in cubes}
        self._floor = m.geom("floor").id
        self._grasp = m.site("grasp").id
        self._tip = m.site("tip").id
        self._hand = m.site(self.hand_site).id
        self._ik = SiteIK(m, "grasp", self.robot.qpos_indices[:5], self.robot.arm_dof_indices)
        self._tip_ik = SiteIK(m, "tip", self.robot.qpos_indices[:5], self.robot.arm_dof_indices)
        self._base_rgba = m.geom_rgba.copy()
        self._base_friction = m.geom_friction.copy()
        self._base_light_diffuse = m.light_diffuse.copy()
        self._base_light_dir = m.light_dir.copy()
        self.instruction = ""

    # --- state -----------------------------------------------------------------------------------
    def cube_pos(self, colour: str) -> np.ndarray:
        return self.robot.data.xpos[self._cube_body[colour]].copy()

    def cube_yaw(self, colour: str) -> float:
        w, x, y, z = self.robot.data.xquat[self._cube_body[colour]]
        return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))

    def grasp_pos(self) -> np.ndarray:
        return self.robot.data.site_xpos[self._grasp].copy()

    def _state_extra(self) -> np.ndarray:
        parts = [self.grasp_pos()]
        hand = self.robot.data.site_xpos[self._hand]
        for c in self.cubes if self.task.scene_state else []:
            yaw, cube = self.cube_yaw(c), self.cube_pos(c)
            parts.append(np.concatenate([cube, [np.sin(4 * yaw), np.cos(4 * yaw)], cube - hand]))
        parts.append(self._task_features())
        return np.concatenate(parts)

    def _task_features(self) -> np.ndarray:
        return np.zeros(0)

    def touching(self, colour: str) -> bool:
        """Whether a jaw or the palm touches the cube."""
        d, cube = self.robot.data, self._cube_geom[colour]
        hand = {self.robot.model.geom(n).id for n in ("palm", "fixed_jaw", "moving_jaw")}
        return any((c.geom1 == cube and c.geom2 in hand) or (c.geom2 == cube and c.geom1 in hand)
                   for c in d.contact[: d.ncon])

    # --- randomisation ---------------------------------------------------------------------------
    def _sample_cube_positions(self, min_gap: float = 0.05) -> list[np.ndarray]:
        rng, out = self.np_random, []
        while len(out) < len(self.cubes):
            xy = rng.uniform(self.task.cube_low, self.task.cube_high)
            if all(np.linalg.norm(xy - o) >= min_gap for o in out):
                out.append(xy)
        return out

    def _randomise(self) -> None:
        t, m, rng = self.task, self.robot.model, self.np_random
        m.geom_rgba[:] = self._base_rgba
        for g in [*self._cube_geom.values(), self._floor]:
            m.geom_rgba[g, :3] = np.clip(self._base_rgba[g, :3] + rng.uniform(-t.colour_noise, t.colour_noise, 3), 0, 1)
        m.geom_friction[:] = self._base_friction
        for g in [*self._cube_geom.values(), self._floor]:
            m.geom_friction[g, 0] = rng.uniform(*t.friction_range)
        m.light_diffuse[:] = self._base_light_diffuse * (1 + rng.uniform(-t.light_noise, t.light_noise))
        tilt = rng.uniform(-t.light_noise, t.light_noise, (len(m.light_dir), 2))
        direction = self._base_light_dir.copy()
        direction[:, :2] += tilt
        m.light_dir[:] = direction / np.linalg.norm(direction, axis=1, keepdims=True)
        d = self.robot.data
        for c, xy in zip(self.cubes, self._sample_cube_positions()):
            yaw = rng.uniform(0, np.pi / 2) if t.randomize_yaw else 0.0
            q = self._cube_qpos[c]
            d.qpos[q:q + 3] = [xy[0], xy[1], self.half]
            d.qpos[q + 3:q + 7] = [np.cos(yaw / 2), 0, 0, np.sin(yaw / 2)]

    def _reset_scene(self, seed: int | None) -> None:
        gym.Env.reset(self, seed=seed)  # seeds self.np_random
        self._reset_arm()
        self._randomise()
        mujoco.mj_forward(self.robot.model, self.robot.data)

    # --- expert helpers --------------------------------------------------------------------------
    def _jaw_yaw_for(self, colour: str) -> float:
        """A jaw-closing direction along one of the cube's face normals, the one nearest the hand's."""
        cube = self.cube_yaw(colour)
        hand_y = self.robot.data.site_xmat[self._grasp].reshape(3, 3)[:, 1]
        now = np.arctan2(hand_y[1], hand_y[0])
        options = cube + np.pi / 2 * np.arange(-4, 5)
        return float(options[np.argmin(np.abs(np.angle(np.exp(1j * (options - now)))))])

    def _move_to(self, site_pos: np.ndarray, jaw_yaw: float, gripper: float, site: str = "grasp",
                 tilt: float = 0.0) -> np.ndarray:
        """Bounded action toward the joint targets that put ``site`` at ``site_pos``, pointing down
        (tilted outward by ``tilt`` rad)."""
        ik = self._ik if site == "grasp" else self._tip_ik
        pose = down_pose(jaw_yaw, tilt, float(np.arctan2(site_pos[1], site_pos[0])))
        q, _ = ik.solve(self.robot.data.qpos, site_pos, pose)
        target = np.concatenate([arm_units(q), [gripper]])
        return self._delta_toward(target)

    def _at(self, site_pos: np.ndarray, tol: float, site: str = "grasp") -> bool:
        here = self.grasp_pos() if site == "grasp" else self.robot.data.site_xpos[self._tip]
        return bool(np.linalg.norm(here - site_pos) < tol)


# --- pick_cube / pick_cube_color ---------------------------------------------------------------------

@dataclass
class PickCubeConfig(CubeTaskConfig):
    """``task=pick_cube``: grasp the cube and lift it ``lift_height`` above the floor."""

    name: str = "pick_cube"
    lift_height: float = 0.05  # m the cube's bottom must rise


@dataclass
class PickCubeColorConfig(PickCubeConfig):
    """``task=pick_cube_color``: three cubes (red, green, blue); the instruction names the one to lift."""

    name: str = "pick_cube_color"
    colours: list[str] = field(default_factory=lambda: ["red", "green", "blue"])
    language: bool = False           # the asked colour as an ``instruction`` observation (the sentence, UTF-8)
                                     # instead of a one-hot in ``state``: language-conditioned policies (policy=vla)
    instructions: dict[str, list[str]] = field(default_factory=dict)  # colour -> sentences, one drawn per episode
                                     # (default "pick up the <colour> cube"); e.g. paraphrases held out of training

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = set(self.colours) - set(COLOURS)
        if unknown or len(self.colours) < 2:
            raise ValueError(f"task.colours must be >= 2 of {sorted(COLOURS)}, got {self.colours}")
        extra = set(self.instructions) - set(self.colours)
        if extra:
            raise ValueError(f"task.instructions names colours the task does not have: {sorted(extra)}")
        for colour, sentences in self.instructions.items():
            if not sentences:
                raise ValueError(f"task.instructions.{colour} is empty: give at least one sentence or leave it out")
            for sentence in sentences:
                if len(sentence.encode("utf-8")) > INSTRUCTION_BYTES:
                    raise ValueError(f"task.instructions.{colour}: {sentence!r} is longer than {INSTRUCTION_BYTES} "
                                     "UTF-8 bytes")

    def sentences(self, colour: str) -> list[str]:
        return list(self.instructions.get(colour, [f"pick up the {colour} cube"]))


class PickCubeEnv(CubeTaskEnv):
    """Reward per tick: ``-distance(grasp point, cube) / 0.1 m - 2 * (1 - lift fraction)``, plus the success
    bonus when the cube is lifted (terminated). Lifting a cube of the wrong colour ends the episode
    as a failure, truncated like the time limit.

    Every tick before success costs (reward <= 0), so ending the episode by lifting the cube is always worth more
    than staying in it. With the lift term as a gain instead (``+ 2 * lift fraction``), an RLPD policy learned to
    hold the cube at 4 of the 5 cm and collect about 1.6 a tick until the time limit, more than the bonus
    (BENCHMARKS.md, learn_tasks, development run P2). A wrong lift is a truncation, not a termination: a terminal
    state would stop those costs, so lifting any cube would pay; truncated, the learner values the state it ended
    in as if the episode went on. With ``task.shaped_reward=false`` only the success bonus is paid: the reward a
    real robot's person or success classifier gives (``task=real``), none of the simulator's distances."""

    def __init__(self, task: PickCubeConfig | None = None, robot: SimSO101Config | None = None) -> None:
        task = task or PickCubeConfig()
        colours = list(getattr(task, "colours", ["red"]))
        self._coloured = isinstance(task, PickCubeColorConfig)
        self._language = self._coloured and task.language
        onehot = len(colours) if self._coloured and not self._language else 0
        super().__init__(task, robot, colours, goal=False,
                         extra_names=tuple(f"asked.{c}" for c in colours[:onehot]),
                         extra_low=(0.0,) * onehot, extra_high=(1.0,) * onehot)
        if self._language:
            self.observation_spec = ObservationSpec({**self.observation_spec.arrays,
                                                     "instruction": text_spec(INSTRUCTION_BYTES)})
            self.observation_space = gym.spaces.Dict({**self.observation_space.spaces, "instruction": gym.spaces.Box(
                0, 255, (INSTRUCTION_BYTES,), np.uint8)})
        self._onehot = onehot > 0
        self.target = colours[0]
        self._phases: dict[str, str] = {}  # cube -> the expert's phase in its plan for that cube

    def _task_features(self) -> np.ndarray:
        if not self._onehot:
            return np.zeros(0)
        return np.array([c == self.target for c in self.cubes], dtype=np.float64)

    def _obs(self) -> dict[str, np.ndarray]:
        obs = super()._obs()
        if self._language:
            obs["instruction"] = encode_text(self.instruction, INSTRUCTION_BYTES)
        return obs

    def lift(self, colour: str) -> float:
        return float(self.cube_pos(colour)[2] - self.half)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._reset_scene(seed)
        self.target = self.cubes[int(self.np_random.integers(len(self.cubes)))] if self._coloured else self.cubes[0]
        if self._coloured:
            sentences = self.task.sentences(self.target)
            self.instruction = sentences[int(self.np_random.integers(len(sentences)))] if len(sentences) > 1 \
                else sentences[0]
        else:
            self.instruction = "pick up the cube"
        self._phases = {}
        return self._obs(), self._info(False)

    def success(self) -> bool:
        """The sim's own success signal: the target cube lifted ``lift_height`` off the table."""
        return self.lift(self.target) >= self.task.lift_height

    def _info(self, success: bool) -> dict:
        return {"success": success, "lift": self.lift(self.target), "instruction": self.instruction}

    def step(self, action: np.ndarray):
        executed = self._apply_delta(action)
        lift = self.lift(self.target)
        success = self.success()
        wrong = any(self.lift(c) >= self.task.lift_height for c in self.cubes if c != self.target)
        dist = float(np.linalg.norm(self.grasp_pos() - self.cube_pos(self.target)))
        reward = self.tick_reward(-dist / 0.1 - 2.0 * (1.0 - min(max(lift, 0.0) / self.task.lift_height, 1.0)), success)
        terminated = success
        truncated = not success and (wrong or self._tick >= self.task.episode_ticks)
        return (self._obs(), float(reward), bool(terminated), bool(truncated),
                {**self._info(success), "executed_action": executed})

    def decoy_goals(self) -> list[str]:
        """The cubes the instruction does not name: goals of a decoy plan in demos (``learner.bc.Perturbation``)."""
        return [c for c in self.cubes if c != self.target]

    def expert_action(self, cube: str | None = None) -> np.ndarray:
        """Above the cube with the jaws open and aligned, down, close, lift. ``cube``: the plan for another cube than
        the asked one (a decoy), with a phase of its own, so asking for it leaves the asked cube's plan as it was."""
        name = self.target if cube is None else cube
        if name not in self.cubes:
            raise ValueError(f"expert_action: no cube {name!r} in this scene; its cubes are {self.cubes}")
        action, self._phases[name] = self._plan(name, self._phases.get(name, "approach"))
        return action

    def expert_phase(self, cube: str) -> str:
        """The expert's phase in its plan for ``cube`` read off the scene alone, not carried from the ticks before:
        where a plan starts from a state someone else drove to (``expert_chunk``). The jaws told to close and on
        the cube: ``lift`` once it is off the table or they are closed and still, else ``close``; told to close
        within 1 cm of the grasp pose: ``close``; within the drift radius of the cube (x, y) and 1 cm under the
        approach point, or at it: ``descend`` (whose step at the grasp pose turns to ``close``, as the plan's does);
        else ``approach``. On the expert's own ticks it names the phase the plan is in except at a phase change,
        which it may name a tick early (docs/algorithms.md, "DAgger")."""
        pos = self.cube_pos(cube)
        above, grasp = self._expert_points(pos)
        closing = self.robot.commanded_positions()[5] < GRIPPER_OPEN - 5.0
        if closing and self.touching(cube):
            return "lift" if self.lift(cube) >= LIFTED_M or self._jaws_closed() else "close"
        if closing and self._at(grasp, 0.01):
            return "close"
        here = self.grasp_pos()
        near = np.linalg.norm(here[:2] - pos[:2]) < DRIFT_M
        return "descend" if near and (here[2] < above[2] - 0.01 or self._at(above, AT_ABOVE_M)) else "approach"

    def expert_chunk(self, horizon: int) -> np.ndarray:
        """The scripted expert's next ``horizon`` actions (robot units, (h, 6)) from the scene as it is, its plan for
        the asked cube started at ``expert_phase``: the label of a state whoever drove there (DAgger's oracle,
        ``learner.bc.OracleLabels``). h < horizon when the cube is lifted first (the episode would end there; the
        lifting action is included) or the time limit comes. The scene, the tick and the expert's own plans are
        as they were afterwards."""
        if horizon < 1:
            raise ValueError(f"expert_chunk: horizon must be >= 1, got {horizon}")
        plans, actions = self._phases, []
        self._phases = {self.target: self.expert_phase(self.target)}
        try:
            with self.scene_kept():
                while len(actions) < horizon and self._tick < self.task.episode_ticks:
                    actions.append(self.expert_action())
                    self._apply_delta(actions[-1])
                    if self.success():
                        break
        finally:
            self._phases = plans
        return np.asarray(actions, np.float32).reshape(-1, self.action_spec.dim)

    def _expert_points(self, cube: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the expert's plan for a cube at ``cube`` (m) puts the grasp point: above it, and at the grasp."""
        return cube + np.array([0.0, 0.0, ABOVE_M]), np.array([cube[0], cube[1], self.half + 0.004])

    def _jaws_closed(self) -> bool:
        """The gripper shut (under 20 units) and still (its jaw under 18 deg/s): what ends the expert's ``close``."""
        return bool(self.robot.joint_positions()[5] < 20.0 and abs(self.robot.joint_speeds_deg()[5]) < 18.0)

    def _plan(self, name: str, phase: str) -> tuple[np.ndarray, str]:
        """The expert's action toward cube ``name`` in ``phase``, and the phase after it."""
        cube = self.cube_pos(name)
        yaw = self._jaw_yaw_for(name)
        above, grasp = self._expert_points(cube)
        if phase == "approach":
            return self._move_to(above, yaw, GRIPPER_OPEN), "descend" if self._at(above, AT_ABOVE_M) else phase
        if phase == "descend":
            if self._at(grasp, AT_GRASP_M):
                phase = "close"
            elif np.linalg.norm(self.grasp_pos()[:2] - cube[:2]) > DRIFT_M:
                phase = "approach"  # the cube moved away: go back above it
            return self._move_to(grasp, yaw, GRIPPER_OPEN), phase
        if phase == "close":
            if self._jaws_closed():
                phase = "lift"
            return self._move_to(self.grasp_pos(), yaw, GRIPPER_CLOSED), phase
        if not self.touching(name) and self.lift(name) < LIFTED_M:
            phase = "approach"  # dropped or missed: try again
        up = self.grasp_pos()
        up[2] = self.half + self.task.lift_height + 0.03
        return self._move_to(up, yaw, GRIPPER_CLOSED), phase


# --- push_cube ----------------------------------------------------------------------------------------

@dataclass
class PushCubeConfig(CubeTaskConfig):
    """``task=push_cube``: push the cube onto the goal disc."""

    name: str = "push_cube"
    episode_ticks: int = 200
    goal_radius: float = 0.025        # m, success when the cube centre is this close to the goal (x, y)
    push_distance: list[float] = field(default_factory=lambda: [0.05, 0.09])  # m, goal from the cube's start
    goal_low: list[float] = field(default_factory=lambda: [0.11, -0.10])      # m, goals stay in this region
    goal_high: list[float] = field(default_factory=lambda: [0.22, 0.10])
    hand_target: str = "behind"       # where the reward's hand term pulls the fingertips: "behind" the cube (on the
                                      # side away from the goal, where pushing moves it toward the goal) or the
                                      # "cube" itself (then a learner must give up reward to get around the cube)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hand_target not in ("behind", "cube"):
            raise ValueError(f"task.hand_target must be behind or cube, got {self.hand_target!r}")


class PushCubeEnv(CubeTaskEnv):
    """Reward per tick: ``-(distance(cube, goal) + 0.5 * distance(tip, hand target)) / 0.1 m``, plus the
    success bonus when the cube centre is within ``goal_radius`` of the goal (terminated). The hand target
    (``task.hand_target``) is the push point behind the cube, or the cube. ``task.shaped_reward=false``: the success
    bonus alone."""

    hand_site = "tip"  # the fingertips push

    def __init__(self, task: PushCubeConfig | None = None, robot: SimSO101Config | None = None) -> None:
        task = task or PushCubeConfig()
        r, offset = RELATIVE_SCALE, task.scene_state  # the goal's offset from the cube shows where the cube is
        super().__init__(task, robot, ["red"], goal=True,
                         extra_names=("goal.x", "goal.y") + ("cube_to_goal.x", "cube_to_goal.y") * offset,
                         extra_low=(*task.goal_low,) + (-r, -r) * offset,
                         extra_high=(*task.goal_high,) + (r, r) * offset)
        self._goal_mocap = self.robot.model.body_mocapid[self.robot.model.body("goal").id]
        self.goal = np.zeros(2)
        self.instruction = "push the cube onto the green disc"
        self._phase = "approach"

    def _task_features(self) -> np.ndarray:
        if not self.task.scene_state:
            return self.goal
        return np.concatenate([self.goal, self.goal - self.cube_pos("red")[:2]])

    def push_direction(self) -> np.ndarray:
        """The unit vector (x, y) from the cube's centre to the goal: the way a push must move it."""
        to_goal = self.goal - self.cube_pos("red")[:2]
        return to_goal / max(float(np.linalg.norm(to_goal)), 1e-9)

    def push_point(self) -> np.ndarray:
        """Where the fingertips push from (m, x y z): behind the cube on the line from the goal through it, at the
        height the expert pushes at."""
        cube = self.cube_pos("red")
        return np.array([*(cube[:2] - self.push_direction() * (self.half + PUSH_GAP)), self.half + PUSH_GAP])

    def goal_distance(self) -> float:
        return float(np.linalg.norm(self.cube_pos("red")[:2] - self.goal))

    def success(self) -> bool:
        """The sim's own success signal: the cube's centre within ``goal_radius`` of the goal."""
        return self.goal_distance() <= self.task.goal_radius

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._reset_scene(seed)
        t, rng = self.task, self.np_random
        start = self.cube_pos("red")[:2]
        for _ in range(1000):
            angle, dist = rng.uniform(-np.pi, np.pi), rng.uniform(*t.push_distance)
            goal = start + dist * np.array([np.cos(angle), np.sin(angle)])
            if np.all(goal >= t.goal_low) and np.all(goal <= t.goal_high):
                break
        self.goal = goal
        self.robot.data.mocap_pos[self._goal_mocap, :2] = goal
        mujoco.mj_forward(self.robot.model, self.robot.data)
        self._phase = "approach"
        return self._obs(), {"success": False, "distance": self.goal_distance()}

    def step(self, action: np.ndarray):
        executed = self._apply_delta(action)
        dist = self.goal_distance()
        success = self.success()
        tip = self.robot.data.site_xpos[self._tip]
        target = self.push_point() if self.task.hand_target == "behind" else self.cube_pos("red")
        reward = self.tick_reward(-(dist + 0.5 * float(np.linalg.norm(tip - target))) / 0.1, success)
        truncated = (not success) and self._tick >= self.task.episode_ticks
        return self._obs(), float(reward), bool(success), bool(truncated), {"success": success, "distance": dist,
                                                                            "executed_action": executed}

    def expert_action(self) -> np.ndarray:
        """Get behind the cube (seen from the goal), come down, push it along the line to the goal;
        if the cube slides off the line, lift and approach again."""
        cube = self.cube_pos("red")
        to_goal = self.goal - cube[:2]
        direction = self.push_direction()
        jaw_yaw = float(np.arctan2(direction[1], direction[0]) + np.pi / 2)  # jaws side by side across the push
        behind = cube[:2] - direction * (self.half + 0.02)
        low_z, high_z = self.half + PUSH_GAP, self.half + 0.06
        tip = self.robot.data.site_xpos[self._tip]
        if self._phase == "approach":
            target = np.array([*behind, high_z])
            if self._at(target, 0.01, "tip"):
                self._phase = "descend"
            return self._move_to(target, jaw_yaw, GRIPPER_PUSH, "tip", PUSH_TILT)
        if self._phase == "descend":
            target = np.array([*behind, low_z])
            if self._at(target, 0.006, "tip"):
                self._phase = "push"
            return self._move_to(target, jaw_yaw, GRIPPER_PUSH, "tip", PUSH_TILT)
        # push: keep the tip on the line behind the cube, moving toward the goal
        offset = tip[:2] - cube[:2]
        lateral = abs(offset[0] * direction[1] - offset[1] * direction[0])
        if lateral > 0.012 or offset @ direction > 0:
            self._phase = "approach"
        step = min(0.02, float(np.linalg.norm(to_goal)) + 0.005)
        target = self.push_point() + np.array([*(direction * step), 0.0])  # a step past the push point
        return self._move_to(target, jaw_yaw, GRIPPER_PUSH, "tip", PUSH_TILT)
