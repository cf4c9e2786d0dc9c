"""Registries that pick tasks, robots, policies and algorithms by name (LeRobot style).

Each entry is a config dataclass (the schema a config group is validated against) plus a factory.
The registry only stores and looks up: it imports nothing. The built-ins are registered once, at each
entry point (the CLI, a worker process, the policy server, a test session), by
``robolearn.runtime.builtins.register_builtins``; a plugin registers its own entries the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CONFIG_GROUPS = ("task", "robot", "teleop", "policy", "algo", "runtime")  # chosen in the config: task=reach, algo=sac
GROUPS = (*CONFIG_GROUPS, "human")  # human: the teleops that may take over in sim (actor.human=scripted)


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
    if not any(_REGISTRY.values()):
        raise LookupError("nothing is registered: call robolearn.runtime.builtins.register_builtins() at the "
                          "entry point")
    try:
        return _REGISTRY[group][name]
    except KeyError:
        raise KeyError(f"unknown {group} {name!r}; registered: {sorted(_REGISTRY[group])}") from None


def names(group: str) -> list[str]:
    return sorted(_REGISTRY[group])
