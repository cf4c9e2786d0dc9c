"""Registries that pick tasks, robots, policies, algorithms and runtimes by name (LeRobot style).

Each entry is a config dataclass (the schema a hydra config group is validated against) plus a
factory. Modules register themselves on import; ``load_builtins`` imports the built-in ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GROUPS = ("task", "robot", "policy", "algo", "runtime")


@dataclass(frozen=True)
class Entry:
    config_cls: type
    factory: Callable[..., Any] | None


_REGISTRY: dict[str, dict[str, Entry]] = {g: {} for g in GROUPS}


def register(group: str, name: str, config_cls: type, factory: Callable[..., Any] | None = None) -> None:
    if group not in _REGISTRY:
        raise KeyError(f"unknown registry group {group!r}; groups are {GROUPS}")
    _REGISTRY[group][name] = Entry(config_cls, factory)


def lookup(group: str, name: str) -> Entry:
    load_builtins()
    try:
        return _REGISTRY[group][name]
    except KeyError:
        raise KeyError(f"unknown {group} {name!r}; registered: {sorted(_REGISTRY[group])}") from None


def names(group: str) -> list[str]:
    load_builtins()
    return sorted(_REGISTRY[group])


def build_task_and_policy(cfg):
    """The task env of a ``RunConfig`` (robot inside) and a fresh policy for its specs."""
    env = lookup("task", cfg.task.name).factory(cfg.task, cfg.robot)
    policy = lookup("policy", cfg.policy.name).factory(env.observation_spec, env.action_spec, cfg.policy)
    return env, policy


def robot_type(cfg) -> str:
    """The resource type a run's actors lease: the task's own robot (a gymnasium env) or the robot group's."""
    return getattr(cfg.task, "robot_type", None) or cfg.robot.name


def load_builtins() -> None:
    # imported here, not at module top, so the core does not depend on sim/policies at import time
    import robolearn.hardware.gym_adapter  # noqa: F401
    import robolearn.hardware.lerobot_robot  # noqa: F401
    import robolearn.learner.habc  # noqa: F401
    import robolearn.learner.hiors  # noqa: F401
    import robolearn.learner.sac  # noqa: F401
    import robolearn.policies.flow_chunk  # noqa: F401
    import robolearn.policies.mlp  # noqa: F401
    import robolearn.runtime.local  # noqa: F401
    import robolearn.sim.cube_tasks  # noqa: F401
    import robolearn.sim.reach  # noqa: F401
    import robolearn.sim.so101  # noqa: F401
