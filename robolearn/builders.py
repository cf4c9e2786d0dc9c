"""Build a run's parts from its validated config through the registry: the task env (its robot inside,
not connected), a policy for the task's specs, the specs alone, and the robot type actors lease.

Building opens no hardware: a robot is connected only by the actor that holds its lease
(``actor.loop``), so the learner, the policy server and the CLI's inspection commands can build the
task for its specs on any machine.
"""

from __future__ import annotations

from typing import Any

import torch

from robolearn.hardware.task import TaskEnv
from robolearn.registry import lookup
from robolearn.specs import ActionSpec, ObservationSpec


def build_task(cfg: Any) -> TaskEnv:
    """The task env of a ``RunConfig`` with its robot constructed but not connected."""
    return lookup("task", cfg.task.name).factory(cfg.task, cfg.robot)


def build_policy(cfg: Any, obs_spec: ObservationSpec, action_spec: ActionSpec) -> torch.nn.Module:
    return lookup("policy", cfg.policy.name).factory(obs_spec, action_spec, cfg.policy)


def task_specs(cfg: Any) -> tuple[ObservationSpec, ActionSpec]:
    """The task's observation and action specs, read from an unconnected build of it."""
    env = build_task(cfg)
    try:
        return env.observation_spec, env.action_spec
    finally:
        env.close()


def robot_type(cfg: Any) -> str:
    """The resource type a run's actors lease: the task's own robot (a gymnasium env) or the robot group's."""
    return getattr(cfg.task, "robot_type", None) or cfg.robot.name
