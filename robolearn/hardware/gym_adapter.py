"""Any registered gymnasium env with Box (or Dict of Box) spaces as a simulated robot: ``task=gym``.

``robolearn run task=gym task.env_id=Reacher-v5`` wraps ``gymnasium.make(env_id)``:
- observations: a Box becomes ``state`` (float32, flattened); a Dict maps each key to an array of the
  same name (3-D uint8 boxes stay uint8 images, everything else float32), with ``observation`` or
  ``state`` renamed to ``state``. Bounds come from the space; infinite bounds are kept (policies then
  leave that element unscaled).
- actions: a Box with finite bounds, flattened; the actor's actions are reshaped back.
- success: ``info["is_success"]`` or ``info["success"]`` when the env reports it, else False.
``env.robot`` is a HAL ``Robot`` view of the env, so a gymnasium env is leased and driven like any
other robot; its ``send_action`` advances the env one step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from robolearn.hardware.robot import safe_action
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec, SpecError


@dataclass
class GymTaskConfig:
    """``task=gym``."""

    name: str = "gym"
    env_id: str = "Reacher-v5"
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make
    control_hz: float | None = None                        # default: the env's render_fps metadata, else 50

    @property
    def robot_type(self) -> str:
        return self.env_id.replace("/", "_")

    def __post_init__(self) -> None:
        if self.env_id not in gym.registry:
            raise ValueError(f"task.env_id={self.env_id!r} is not a registered gymnasium env "
                             "(import the package that registers it, or check the id)")


def _bounds(space: gym.spaces.Box) -> tuple[tuple[float, ...], tuple[float, ...]]:
    low, high = (tuple(np.asarray(b, np.float64).ravel().tolist()) for b in (space.low, space.high))
    return low, high


def _array_spec(key: str, space: gym.spaces.Space) -> ArraySpec:
    if not isinstance(space, gym.spaces.Box):
        raise SpecError(f"observation '{key}' is a {type(space).__name__}; only Box spaces are supported")
    if space.dtype == np.uint8 and len(space.shape) == 3:
        return ArraySpec(tuple(space.shape), dtype="uint8")
    low, high = _bounds(space)
    return ArraySpec((int(np.prod(space.shape)),), low=low, high=high)


def observation_spec_of(space: gym.spaces.Space) -> tuple[ObservationSpec, dict[str, str]]:
    """The spec, and which env key feeds each spec key."""
    if isinstance(space, gym.spaces.Dict):
        keys = {("state" if k in ("observation", "state") else k): k for k in space.spaces}
        return ObservationSpec({k: _array_spec(src, space.spaces[src]) for k, src in keys.items()}), keys
    return ObservationSpec({"state": _array_spec("state", space)}), {"state": ""}


@dataclass
class GymRobotConfig:
    name: str
    control_hz: float


class GymRobot:
    """HAL ``Robot`` view of a gymnasium env (specs, connect, observe, act)."""

    def __init__(self, env: GymTaskEnv, control_hz: float) -> None:
        self._env = env
        self.name = env.config.robot_type
        self.config = GymRobotConfig(self.name, control_hz)

    @property
    def observation_spec(self) -> ObservationSpec:
        return self._env.observation_spec

    @property
    def action_spec(self) -> ActionSpec:
        return self._env.action_spec

    @property
    def is_connected(self) -> bool:
        return True

    def connect(self) -> None:
        pass

    def disconnect(self) -> None:
        self._env.close()

    def get_observation(self) -> dict[str, np.ndarray]:
        return self._env.last_obs

    def send_action(self, action: np.ndarray) -> np.ndarray:
        sent = safe_action(action, self.action_spec)
        self._env.step(sent)
        return sent


class GymTaskEnv:
    """The task interface the actor drives (reset / step / specs / robot), over ``gymnasium.make``."""

    def __init__(self, config: GymTaskConfig, robot_config: Any = None) -> None:  # noqa: ARG002
        """``robot_config`` is ignored: the gymnasium env is its own robot."""
        self.config = config
        self.env = gym.make(config.env_id, **config.kwargs)
        self.observation_spec, self._keys = observation_spec_of(self.env.observation_space)
        space = self.env.action_space
        if not isinstance(space, gym.spaces.Box):
            raise SpecError(f"{config.env_id}: action space is a {type(space).__name__}; only Box is supported")
        low, high = _bounds(space)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise SpecError(f"{config.env_id}: action bounds must be finite, got {space.low} .. {space.high}")
        self._action_shape = space.shape
        self.action_spec = ActionSpec(ArraySpec((int(np.prod(space.shape)),), low=low, high=high))
        hz = config.control_hz or float(self.env.metadata.get("render_fps") or 50.0)
        self.robot = GymRobot(self, hz)
        self.last_obs: dict[str, np.ndarray] = {}

    def _convert(self, obs) -> dict[str, np.ndarray]:
        out = {}
        for key, src in self._keys.items():
            spec = self.observation_spec.arrays[key]
            value = obs[src] if src else obs
            out[key] = np.asarray(value, dtype=spec.dtype).reshape(spec.shape)
        self.last_obs = out
        return out

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self._convert(obs), {"success": False, **info}

    def step(self, action: np.ndarray):
        a = self.action_spec.clip(np.asarray(action, np.float32)).reshape(self._action_shape)
        obs, reward, terminated, truncated, info = self.env.step(a)
        success = bool(info.get("is_success", info.get("success", False)))
        return self._convert(obs), float(reward), bool(terminated), bool(truncated), {**info, "success": success}

    def close(self) -> None:
        self.env.close()
