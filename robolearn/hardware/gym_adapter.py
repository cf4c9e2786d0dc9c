"""Any gymnasium env with Box (or Dict of Box) spaces, from any package, as a simulated robot: ``task=gym``.

``robolearn run task=gym task.env_id=Reacher-v5`` wraps ``gymnasium.make(env_id, **task.kwargs)``. An env
another package registers is named as gymnasium does, ``task.env_id=package.module:EnvId`` (the module is
imported, so it registers its envs), or its modules are listed in ``task.imports``; every process that
builds the env validates the config, and so imports them.
- observations: a Box becomes ``state`` (float32, flattened). A Dict: each 3-D uint8 Box stays a camera
  image of the same name; every other entry is flattened into ``state``, one after the other in the
  Dict space's key order (sorted, unless the env built it from an OrderedDict), each element named
  ``<key>[i]`` in the spec (a goal-conditioned env's ``achieved_goal``, ``desired_goal`` and
  ``observation`` all reach the policy).
  Bounds come from the space; infinite bounds are kept (policies then normalise those elements with
  running statistics of the data).
- actions: a Box with finite bounds, flattened; the actor's actions are reshaped back.
- success: ``info["is_success"]`` or ``info["success"]`` when the env reports it, else False.
``env.robot`` is a HAL ``Robot`` view of the env, so a gymnasium env is leased and driven like any
other robot; its ``send_action`` advances the env one step.
"""

from __future__ import annotations

import importlib
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
    env_id: str = "Reacher-v5"                             # an id in gymnasium's registry, or module:EnvId
    imports: list[str] = field(default_factory=list)       # modules to import first (they register envs)
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make
    control_hz: float | None = None                        # default: the env's render_fps metadata, else 50

    @property
    def robot_type(self) -> str:
        return self.env_id.replace("/", "_").replace(":", "_")

    def __post_init__(self) -> None:
        module, _, env_id = self.env_id.rpartition(":")
        for name in [*self.imports, *([module] if module else [])]:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise ValueError(f"task.env_id={self.env_id!r}: cannot import {name!r} ({exc})") from None
        if env_id not in gym.registry:
            raise ValueError(f"task.env_id={self.env_id!r}: {env_id!r} is not a registered gymnasium env "
                             f"(name the module that registers it, package.module:{env_id}, or check the id)")


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


def _is_image(space: gym.spaces.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def observation_spec_of(space: gym.spaces.Space) -> tuple[ObservationSpec, dict[str, list[str]]]:
    """The spec, and which env keys feed each spec key (``state``: the non-image ones, in order)."""
    if not isinstance(space, gym.spaces.Dict):
        return ObservationSpec({"state": _array_spec("state", space)}), {"state": []}
    images = [k for k, sub in space.spaces.items() if _is_image(sub)]
    parts = [k for k in space.spaces if k not in images]
    arrays = {k: _array_spec(k, space.spaces[k]) for k in images}
    sources = {k: [k] for k in images}
    if parts:
        specs = [_array_spec(k, space.spaces[k]) for k in parts]
        names = tuple(f"{k}[{i}]" for k, spec in zip(parts, specs) for i in range(spec.size))
        arrays["state"] = ArraySpec((len(names),), names=names,
                                    low=tuple(v for spec in specs for v in spec.low),
                                    high=tuple(v for spec in specs for v in spec.high))
        sources["state"] = parts
    return ObservationSpec(arrays), sources


@dataclass
class GymRobotConfig:
    name: str
    control_hz: float


class GymRobot:
    """HAL ``Robot`` view of a gymnasium env (specs, connect, observe, act)."""

    holds_position = False  # its action steps the env: there is no command that holds it (GuardedRobot.hold)

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
        for key, sources in self._keys.items():
            spec = self.observation_spec.arrays[key]
            if not sources:  # a Box space: the observation itself
                value = obs
            elif key == "state":
                value = np.concatenate([np.asarray(obs[k], np.float32).ravel() for k in sources])
            else:
                value = obs[sources[0]]
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
        return self._convert(obs), float(reward), bool(terminated), bool(truncated), {
            **info, "success": success, "executed_action": a.reshape(-1)}

    def close(self) -> None:
        self.env.close()
