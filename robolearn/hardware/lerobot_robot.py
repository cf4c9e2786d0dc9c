"""Any lerobot ``Robot`` as a HAL robot: ``robot=so101`` (lerobot's ``so101_follower``) and friends.

The lerobot robot is built from its registered config type (``RobotConfig.get_choice_class``), so
lerobot's own driver code runs unchanged: connection, calibration, bus I/O, its safety clamps. This
adapter adds robolearn's contract on top:
- observation ``state`` = motor positions then velocities (velocities by finite difference of
  consecutive readings; lerobot reports positions only), cameras as uint8 images, the same names,
  shapes and units as the MuJoCo twin (``robot=sim_so101``), built by ``joint_specs``;
- action = motor position targets; ``send_action`` rejects non-finite values and clips to the joint
  limits derived from the motors' calibration before lerobot sees them;
- every read asks the bus afresh: replies left waiting on the serial port are dropped first
  (``drop_stale_replies``);
- a camera frame older than ``max_frame_age_ms`` is a failed read, read again like a lost bus reply
  (``frame_age.FrameAges``; the ages are in the actor's status).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robolearn.hardware.frame_age import FrameAges
from robolearn.hardware.robot import RobotSpecs, check_max_relative_target, joint_specs, safe_action
from robolearn.specs import ArraySpec, ObservationSpec


@dataclass
class LerobotRobotConfig:
    """``robot=so101`` (or any lerobot robot type)."""

    name: str = "so101"
    type: str = "so101_follower"        # lerobot's registered robot config name
    port: str = "/dev/ttyACM0"
    id: str = "robolearn_follower"      # lerobot calibration id
    calibration_dir: str | None = None  # default: lerobot's calibration folder
    control_hz: float = 25.0
    on_disconnect: str = "torque_off"   # torque_off: the motors go limp (lerobot's default) | hold: they keep
                                        # holding the last command while powered (an arm that would fall)
    cameras: dict[str, Any] = field(default_factory=dict)   # name -> lerobot OpenCVCameraConfig fields, e.g.
                                        # {wrist: {index_or_path: /dev/video0, width: 640, height: 480, fps: 30}}
    max_relative_target: float | None = None  # lerobot's own: each goal held within this of the present position
                                        # (read from the bus before every command); None: only the joint limits
    read_retries: int = 2               # a failed observation (a camera frame over max_frame_age_ms, a bus reply
                                        # lost through lerobot's own retries) read again this many times before its
                                        # error stops the actor (the servos hold their goal meanwhile)
    max_frame_age_ms: float | None = 200.0  # a camera frame older than this when the observation is complete is a
                                        # failed read (lerobot's own bound is 500 ms); null: lerobot's only

    def __post_init__(self) -> None:
        if self.on_disconnect not in ("torque_off", "hold"):
            raise ValueError(f"robot.on_disconnect must be torque_off or hold, got {self.on_disconnect!r}")
        if self.read_retries < 0:
            raise ValueError(f"robot.read_retries must be >= 0, got {self.read_retries}")
        check_max_relative_target(self.max_relative_target)
        if self.max_frame_age_ms is not None and not self.max_frame_age_ms > 0:
            raise ValueError(f"robot.max_frame_age_ms must be > 0 or null, got {self.max_frame_age_ms}")


def import_device_modules(package) -> None:
    """Import lerobot's device subpackages (robots, teleoperators): their configs register on import."""
    for mod in pkgutil.iter_modules(package.__path__):
        if mod.ispkg:
            try:
                importlib.import_module(f"{package.__name__}.{mod.name}")
            except ImportError:  # a device whose optional dependencies are not installed
                pass


def lerobot_config_class(base, package, type_name: str, key: str):
    """The lerobot config class registered as ``type_name`` under ``base`` (RobotConfig, TeleoperatorConfig);
    a ValueError naming ``key`` and the known types otherwise."""
    import_device_modules(package)
    try:
        return base.get_choice_class(type_name)
    except KeyError:
        raise ValueError(f"{key}={type_name!r} is not a lerobot {package.__name__.split('.')[-1]} type; "
                         f"known: {sorted(base.get_known_choices())}") from None


def make_lerobot_robot(config: LerobotRobotConfig):
    """lerobot's own robot object for ``config.type`` (not connected)."""
    import lerobot.robots
    from lerobot.robots import RobotConfig
    from lerobot.robots.utils import make_robot_from_config

    cfg_cls = lerobot_config_class(RobotConfig, lerobot.robots, config.type, "robot.type")
    kwargs = {"port": config.port, "id": config.id}
    if config.calibration_dir:
        kwargs["calibration_dir"] = Path(config.calibration_dir)
    if config.cameras:
        from lerobot.cameras.opencv.configuration_opencv import OpenCVCameraConfig

        if "cameras" not in cfg_cls.__dataclass_fields__:
            raise ValueError(f"robot.cameras: lerobot's {config.type} takes no cameras")
        try:
            kwargs["cameras"] = {name: OpenCVCameraConfig(**spec) for name, spec in config.cameras.items()}
        except (TypeError, ValueError) as exc:
            raise ValueError(f"robot.cameras: {exc}") from None
    if config.max_relative_target is not None:
        if "max_relative_target" not in cfg_cls.__dataclass_fields__:
            raise ValueError(f"robot.max_relative_target: lerobot's {config.type} has no such setting")
        kwargs["max_relative_target"] = float(config.max_relative_target)
    if "disable_torque_on_disconnect" in cfg_cls.__dataclass_fields__:
        kwargs["disable_torque_on_disconnect"] = config.on_disconnect == "torque_off"
    elif config.on_disconnect == "hold":
        raise ValueError(f"robot.on_disconnect=hold: lerobot's {config.type} has no disable_torque_on_disconnect "
                         "setting, so its torque cannot be kept on after disconnect")
    return make_robot_from_config(cfg_cls(**kwargs))


def _limits(bus, motor: str) -> tuple[float, float, str]:
    """(low, high, unit) of a motor's normalised position, from its norm mode and calibration (lerobot maps a
    calibrated range to degrees around its middle)."""
    m = bus.motors[motor]
    mode = m.norm_mode.value
    if mode == "degrees":
        cal = bus.calibration.get(motor)
        if cal is None:  # not calibrated yet (connect refuses it): the encoder's full turn
            return -180.0, 180.0, "deg"
        half = (cal.range_max - cal.range_min) / 2 * 360.0 / bus.model_resolution_table[m.model]
        return -half, half, "deg"
    if mode == "range_0_100":
        return 0.0, 100.0, "0..100"
    return -100.0, 100.0, "-100..100"


def drop_stale_replies(bus: Any) -> None:
    """Discard what waits on a motor bus's serial port before a request is sent. A status packet that arrives after
    its read timed out (a loaded host, a slow USB adapter) stays queued: lerobot's retry, and every read after it,
    would then decode the previous request's answer, so the arm's state would stay one read old for the rest of the
    run (across a reset: the last pose of the episode before). The Feetech and Dynamixel SDKs' ``clearPort`` flushes
    output only. Anything waiting before a request is sent answers an earlier one, so nothing current is dropped. A
    device with no serial bus (``bus`` None, a keyboard, a network robot) has nothing to drop."""
    port = getattr(getattr(bus, "port_handler", None), "ser", None)  # opened by connect
    if port is not None and port.is_open:
        port.reset_input_buffer()


def connect_calibrated(device: Any, what: str) -> None:
    """Connect a lerobot robot or teleoperator without lerobot's interactive calibration; RuntimeError naming it
    (and disconnected again) when it has no calibration: positions from an uncalibrated bus are meaningless, and
    lerobot would only refuse at the first read (for a leader arm: when the person takes over)."""
    device.connect(calibrate=False)
    if not device.is_calibrated:
        device.disconnect()
        raise RuntimeError(f"{what} is not calibrated (no calibration for id {device.id!r} in "
                           f"{device.calibration_dir}): run lerobot's calibration (lerobot-calibrate) first")


class _DropClampWarnings(logging.Filter):
    """lerobot logs every clamp of ``max_relative_target`` as a multi-line warning on the root logger, at the
    control rate; the guard counts them instead (``safety.clamped_by_driver`` in the actor's status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Relative goal position magnitude had to be clamped")


_CLAMP_WARNINGS = _DropClampWarnings()


class LerobotRobot(RobotSpecs):
    """HAL ``Robot`` over a lerobot robot with a motor bus (``robot.bus``)."""

    def __init__(self, config: LerobotRobotConfig, robot=None) -> None:
        self.config = config
        self.name = config.name
        self.robot = robot if robot is not None else make_lerobot_robot(config)
        if config.max_relative_target is not None and _CLAMP_WARNINGS not in logging.getLogger().filters:
            logging.getLogger().addFilter(_CLAMP_WARNINGS)
        bus = self.robot.bus
        self.joints = [k.removesuffix(".pos") for k in self.robot.action_features]
        limits = [_limits(bus, j) for j in self.joints]
        obs, self._action_spec = joint_specs(self.joints, [u for _, _, u in limits], [lo for lo, _, _ in limits],
                                             [hi for _, hi, _ in limits])
        cams = {k: v for k, v in self.robot.observation_features.items() if isinstance(v, tuple)}
        self._obs_spec = ObservationSpec({**obs.arrays, **{k: ArraySpec(tuple(v), dtype="uint8")
                                                           for k, v in cams.items()}})
        cameras = getattr(self.robot, "cameras", {}) if config.max_frame_age_ms is not None else {}
        self.frame_ages = FrameAges(cameras, config.max_frame_age_ms) if cameras else None
        self._last: tuple[float, np.ndarray] | None = None
        self.failed_reads = 0  # observations read again after a failure (``read_retries``; the actor's status)

    @property
    def is_connected(self) -> bool:
        return self.robot.is_connected

    def connect(self) -> None:
        connect_calibrated(self.robot, f"robot {self.config.type} on {self.config.port}")

    def disconnect(self) -> None:
        if self.robot.is_connected:
            self.robot.disconnect()

    def _read(self) -> dict[str, Any]:
        """lerobot's observation, read again (stale replies dropped first each time, a control period later: a
        camera's next frame) up to ``read_retries`` times when it fails: a USB camera stalls now and then (or its
        frame is older than ``max_frame_age_ms``), and a bus reply can be lost, more often while several joints
        move at once. A robot that is not connected is not read again."""
        from lerobot.utils.errors import DeviceNotConnectedError

        for attempt in range(1, self.config.read_retries + 1):
            drop_stale_replies(self.robot.bus)
            try:
                return self._observe()
            except DeviceNotConnectedError:
                raise
            except (TimeoutError, ConnectionError) as exc:
                self.failed_reads += 1
                print(f"[robot] {self.config.type} on {self.config.port}: read failed ({exc}); reading again "
                      f"({attempt} of robot.read_retries={self.config.read_retries})", file=sys.stderr, flush=True)
                time.sleep(1.0 / self.config.control_hz)
        drop_stale_replies(self.robot.bus)
        return self._observe()

    def _observe(self) -> dict[str, Any]:
        if self.frame_ages is None:
            return self.robot.get_observation()
        self.frame_ages.before()
        raw = self.robot.get_observation()
        self.frame_ages.check(raw)
        return raw

    def get_observation(self) -> dict[str, np.ndarray]:
        raw = self._read()
        now = time.perf_counter()
        pos = np.array([raw[f"{j}.pos"] for j in self.joints], np.float32)
        vel = np.zeros_like(pos)
        if self._last is not None and now > self._last[0]:
            vel = ((pos - self._last[1]) / (now - self._last[0])).astype(np.float32)
        self._last = (now, pos)
        obs = {"state": np.concatenate([pos, vel])}
        for key, spec in self._obs_spec.arrays.items():
            if key != "state":
                obs[key] = np.asarray(raw[key], np.uint8).reshape(spec.shape)
        return obs

    def send_action(self, action: np.ndarray) -> np.ndarray:
        sent = safe_action(action, self._action_spec)
        drop_stale_replies(self.robot.bus)  # with max_relative_target lerobot reads the present position first
        done = self.robot.send_action({f"{j}.pos": float(v) for j, v in zip(self.joints, sent)})
        return np.array([done[f"{j}.pos"] for j in self.joints], np.float32)
