"""Inverse kinematics for the scripted experts: joint targets that put a site at a pose.

Damped least squares on a scratch ``MjData`` (the live simulation is never touched), with the error
``[position (m); orientation (rad) * rot_weight]`` driven to zero. For the SO-101 layout, "gripper
pointing straight down with the jaws closing along a horizontal direction" is exactly reachable by
the five arm joints (pan + three pitch joints + roll), so the experts ask for that pose.
"""

from __future__ import annotations

import mujoco
import numpy as np


def down_pose(jaw_yaw: float, tilt: float = 0.0, azimuth: float = 0.0) -> np.ndarray:
    """Rotation matrix (3, 3) of a hand whose x axis (the fingers) points down (-z), tilted by ``tilt``
    rad away from the base toward ``azimuth`` (rad; tilting extends the reach), and whose y axis (the
    direction the jaws close along) is as close as possible to horizontal at ``jaw_yaw`` rad."""
    x = np.array([np.sin(tilt) * np.cos(azimuth), np.sin(tilt) * np.sin(azimuth), -np.cos(tilt)])
    y = np.array([np.cos(jaw_yaw), np.sin(jaw_yaw), 0.0])
    y = y - (y @ x) * x
    y /= np.linalg.norm(y)
    return np.stack([x, y, np.cross(x, y)], axis=1)


def orientation_error(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) that turns ``current`` toward ``target`` (both (3, 3), small-angle form)."""
    return 0.5 * sum(np.cross(current[:, i], target[:, i]) for i in range(3))


class SiteIK:
    """Solves for arm joint angles (rad) that put ``site`` at a position and orientation."""

    def __init__(self, model: mujoco.MjModel, site: str, qpos_indices: np.ndarray, dof_indices: np.ndarray,
                 rot_weight: float = 0.1, damping: float = 1e-4) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.site = model.site(site).id
        self.qpos_indices, self.dof_indices = qpos_indices, dof_indices
        jnt = [int(np.flatnonzero(model.jnt_qposadr == q)[0]) for q in qpos_indices]
        self.low, self.high = model.jnt_range[jnt, 0], model.jnt_range[jnt, 1]
        self.rot_weight, self.damping = rot_weight, damping
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def solve(self, qpos: np.ndarray, pos: np.ndarray, rot: np.ndarray | None = None,
              iterations: int = 60, tol: float = 1e-5) -> tuple[np.ndarray, float]:
        """Joint angles (rad, for ``qpos_indices``) starting from the full ``qpos``; returns them with
        the remaining position error (m)."""
        d = self.data
        d.qpos[:] = qpos
        q = d.qpos[self.qpos_indices].copy()
        for _ in range(iterations):
            d.qpos[self.qpos_indices] = q
            mujoco.mj_kinematics(self.model, d)
            mujoco.mj_comPos(self.model, d)
            err_p = pos - d.site_xpos[self.site]
            rows, err = [self._jacp], [err_p]
            if rot is not None:
                err.append(self.rot_weight * orientation_error(d.site_xmat[self.site].reshape(3, 3), rot))
                rows.append(self._jacr)
            mujoco.mj_jacSite(self.model, d, self._jacp, self._jacr, self.site)
            j = np.concatenate([r[:, self.dof_indices] for r in rows])
            if rot is not None:
                j[3:] *= self.rot_weight
            e = np.concatenate(err)
            if e @ e < tol * tol:
                break
            dq = j.T @ np.linalg.solve(j @ j.T + self.damping * np.eye(len(e)), e)
            q = np.clip(q + dq, self.low, self.high)
        d.qpos[self.qpos_indices] = q
        mujoco.mj_kinematics(self.model, d)
        return q, float(np.linalg.norm(pos - d.site_xpos[self.site]))
