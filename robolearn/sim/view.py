"""What a person watching a sim robot sees: frames of the scene rendered away from the control loop, and world
points projected into them.

``SceneView`` renders from a ``Snapshot`` (copies of the scene's positions, taken on the control thread in
microseconds) into its own ``MjData``, so the milliseconds an offscreen frame costs are spent on the GUI feed's
thread, not on the robot's tick (MuJoCo's bindings release the GIL while they render). Make and use a view on one
thread: its GL context belongs to the thread that created it.

``PinholeCamera`` is the projection a real camera has too (intrinsics and its pose in the robot's base frame,
from config): ``pixels = K [R | t] world``. For a sim camera it comes from MuJoCo's camera (vertical field of
view ``fovy``, position ``cam_xpos``, orientation ``cam_xmat``, looking down its -z axis with +y up).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np


@dataclass(frozen=True)
class Snapshot:
    """The scene's state at one tick: enough to draw it (positions only)."""

    qpos: np.ndarray
    mocap_pos: np.ndarray
    mocap_quat: np.ndarray

    @classmethod
    def of(cls, data: mujoco.MjData) -> Snapshot:
        return cls(data.qpos.copy(), data.mocap_pos.copy(), data.mocap_quat.copy())


@dataclass(frozen=True)
class PinholeCamera:
    """World (robot base) point -> image pixel (x right, y down): ``fx, fy, cx, cy`` and the world-to-camera
    rotation ``rotation`` (3, 3) and translation ``translation`` (3,), camera looking along +z (OpenCV)."""

    fx: float
    fy: float
    cx: float
    cy: float
    rotation: np.ndarray
    translation: np.ndarray

    def project(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) world points -> (N, 2) pixels; points behind the camera come back as NaN."""
        cam = np.asarray(points, np.float64) @ self.rotation.T + self.translation
        z = cam[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            px = np.stack([self.fx * cam[:, 0] / z + self.cx, self.fy * cam[:, 1] / z + self.cy], axis=1)
        px[z <= 1e-6] = np.nan
        return px

    @classmethod
    def from_config(cls, intrinsics: list[float], extrinsics: list[list[float]]) -> PinholeCamera:
        """``intrinsics`` [fx, fy, cx, cy]; ``extrinsics`` the 4x4 camera-to-world pose (where the camera is),
        OpenCV axes (x right, y down, z forward)."""
        pose = np.asarray(extrinsics, np.float64)
        if len(intrinsics) != 4 or pose.shape != (4, 4):
            raise ValueError(f"a camera needs intrinsics [fx, fy, cx, cy] and a 4x4 extrinsics pose; got "
                             f"{list(intrinsics)} and shape {pose.shape}")
        rot = pose[:3, :3].T
        return cls(*map(float, intrinsics), rot, -rot @ pose[:3, 3])


def camera_option() -> mujoco.MjvOption:
    """What a camera shows: the scene's bodies, not MuJoCo's site markers (the fingertip's orange ball, 16 mm across:
    a real arm has no such ball, and in the wrist camera it hides the middle of the cube being grasped)."""
    option = mujoco.MjvOption()
    option.sitegroup[:] = 0
    return option


def camera_frame(renderer: mujoco.Renderer, data: mujoco.MjData, camera: str, option: mujoco.MjvOption,
                 plain: bool) -> np.ndarray:
    """One RGB frame (uint8, a copy) from ``camera`` as ``option`` shows the scene (``camera_option``), with no
    shadows or reflections when ``plain`` (``plain_scene``): the env's cameras and the GUI's scene view."""
    renderer.update_scene(data, camera=camera, scene_option=option)
    if plain:
        plain_scene(renderer)
    return renderer.render().copy()


def plain_scene(renderer: mujoco.Renderer) -> None:
    """No shadows or reflections in the scene ``renderer`` has just updated: in software rendering (EGL without a
    GPU) their extra passes are ~90% of a frame's cost (56 vs 6 ms at 96 px, 61 vs 5 ms at 64 px here)."""
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0


def mujoco_camera(model: mujoco.MjModel, data: mujoco.MjData, camera: str, width: int, height: int) -> PinholeCamera:
    """The pinhole model of a MuJoCo camera as rendered at ``width`` x ``height`` (after ``mj_forward``)."""
    cam = model.camera(camera).id
    f = 0.5 * height / np.tan(np.radians(model.cam_fovy[cam]) / 2)
    mj_to_cv = np.diag([1.0, -1.0, -1.0])   # MuJoCo cameras look down -z with +y up; OpenCV down +z with +y down
    rot = mj_to_cv @ data.cam_xmat[cam].reshape(3, 3).T
    return PinholeCamera(f, f, width / 2, height / 2, rot, -rot @ data.cam_xpos[cam])


class SceneView:
    """Renders ``camera`` of ``model`` at ``size`` x ``size`` from snapshots (see the module docstring)."""

    def __init__(self, model: mujoco.MjModel, camera: str, size: int) -> None:
        if camera not in {model.camera(i).name for i in range(model.ncam)}:
            names = [model.camera(i).name for i in range(model.ncam)]
            raise ValueError(f"gui.camera={camera!r}: the scene has cameras {names}")
        self.model, self.camera, self.size = model, camera, size
        self.data = mujoco.MjData(model)
        self._renderer: mujoco.Renderer | None = None
        self._camera_option = camera_option()  # built once, not per frame

    def _pose(self, snapshot: Snapshot) -> None:
        self.data.qpos[:] = snapshot.qpos
        self.data.mocap_pos[:] = snapshot.mocap_pos
        self.data.mocap_quat[:] = snapshot.mocap_quat
        mujoco.mj_forward(self.model, self.data)

    def camera_at(self, snapshot: Snapshot, width: int, height: int) -> PinholeCamera:
        """The camera's projection at that snapshot, for an image of ``width`` x ``height`` (no rendering)."""
        self._pose(snapshot)
        return mujoco_camera(self.model, self.data, self.camera, width, height)

    def render(self, snapshot: Snapshot) -> tuple[np.ndarray, PinholeCamera]:
        """(size, size, 3) uint8 and the camera's projection at that snapshot."""
        self._pose(snapshot)
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.size, self.size)
        self._renderer.update_scene(self.data, camera=self.camera, scene_option=self._camera_option)
        plain_scene(self._renderer)  # a person watching does not need shadows
        return self._renderer.render().copy(), mujoco_camera(self.model, self.data, self.camera, self.size, self.size)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
