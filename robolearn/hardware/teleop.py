"""The HAL teleop and camera protocols, and lerobot's teleoperators as HAL teleops.

A teleop returns an action in the robot's units plus events: a human takes over or hands back
(intervention on/off), marks the episode a success or failure, asks to re-record it, or stops.
``LerobotTeleop`` wraps a lerobot leader arm chosen by its config type (``so101_leader``, ``koch_leader``, ...: a
calibrated device on a motor bus; robolearn's own keyboard, gamepad and browser teleops are in ``operator``): its
action dict is ordered as the robot's joints and its ``get_teleop_events`` (where the device has one) become HAL
events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from robolearn.hardware.lerobot_robot import connect_calibrated, drop_stale_replies, lerobot_config_class


class TeleopEvent(StrEnum):
    INTERVENTION_ON = "intervention_on"
    INTERVENTION_OFF = "intervention_off"
    SUCCESS = "success"
    FAILURE = "failure"
    RERECORD = "rerecord"
    STOP = "stop"
    READY = "ready"          # the scene is reset: start the episode
    ESTOP = "estop"          # latch the e-stop (hardware.safety.EStop)


@dataclass
class TeleopReading:
    action: np.ndarray | None                     # robot units; None when the device commands nothing
    events: set[TeleopEvent] = field(default_factory=set)
    intervening: bool = False                     # is the human driving right now


@runtime_checkable
class Teleop(Protocol):
    name: str

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read(self) -> TeleopReading: ...


@runtime_checkable
class Intervener(Teleop, Protocol):
    """A teleop that may take over inside the control loop (``actor.episode.TickDriver``): ``read()`` before
    each tick says whether it drives, ``observe(action)`` after it tells what the robot executed, and
    ``reset()`` starts each episode."""

    def reset(self) -> None: ...

    def observe(self, executed: np.ndarray) -> None: ...


@runtime_checkable
class Camera(Protocol):
    name: str

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    def read(self) -> np.ndarray:
        """One RGB frame, uint8 (H, W, 3)."""
        ...


@dataclass
class LerobotTeleopConfig:
    name: str = "so101_leader"
    type: str = "so101_leader"      # lerobot teleoperator type
    port: str | None = "/dev/ttyACM1"
    id: str = "robolearn_leader"
    calibration_dir: str | None = None
    always_intervening: bool = True  # a leader arm drives whenever it is connected; keyboards/gamepads say when


class LerobotTeleop:
    def __init__(self, config: LerobotTeleopConfig, joints: list[str]) -> None:
        import lerobot.teleoperators
        from lerobot.teleoperators import TeleoperatorConfig
        from lerobot.teleoperators.utils import make_teleoperator_from_config

        cls = lerobot_config_class(TeleoperatorConfig, lerobot.teleoperators, config.type, "teleop.type")
        kwargs = {"id": config.id}
        if config.port is not None and "port" in cls.__dataclass_fields__:
            kwargs["port"] = config.port
        if config.calibration_dir:
            kwargs["calibration_dir"] = Path(config.calibration_dir)
        self.config = config
        self.name = config.type
        self.joints = joints
        self.device = make_teleoperator_from_config(cls(**kwargs))
        self._intervening = False

    def connect(self) -> None:
        connect_calibrated(self.device, f"teleop {self.config.type} on {self.config.port}")

    def disconnect(self) -> None:
        if self.device.is_connected:
            self.device.disconnect()

    def read(self) -> TeleopReading:
        from lerobot.teleoperators.utils import TeleopEvents

        drop_stale_replies(getattr(self.device, "bus", None))  # a leader arm's bus; a keyboard or gamepad has none
        raw = self.device.get_action()
        missing = [j for j in self.joints if f"{j}.pos" not in raw]
        action = None if missing else np.array([raw[f"{j}.pos"] for j in self.joints], np.float32)
        flags = self.device.get_teleop_events() if hasattr(self.device, "get_teleop_events") else {}
        intervening = self.config.always_intervening or bool(flags.get(TeleopEvents.IS_INTERVENTION, False))
        events = set()
        if intervening != self._intervening:
            events.add(TeleopEvent.INTERVENTION_ON if intervening else TeleopEvent.INTERVENTION_OFF)
            self._intervening = intervening
        for flag, event in ((TeleopEvents.SUCCESS, TeleopEvent.SUCCESS), (TeleopEvents.FAILURE, TeleopEvent.FAILURE),
                            (TeleopEvents.RERECORD_EPISODE, TeleopEvent.RERECORD),
                            (TeleopEvents.TERMINATE_EPISODE, TeleopEvent.STOP)):
            if flags.get(flag):
                events.add(event)
        return TeleopReading(action, events, intervening)


def discover_cameras() -> list[dict]:
    """Cameras lerobot can find on this machine (OpenCV), as resource descriptions."""
    from lerobot.cameras.opencv.camera_opencv import OpenCVCamera

    return [{"name": f"opencv-{c['id']}", "kind": "camera", "id": c["id"]} for c in OpenCVCamera.find_cameras()]
