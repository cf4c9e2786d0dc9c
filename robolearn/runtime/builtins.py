"""The built-in tasks, robots, policies, algorithms and runtimes, registered by name.

Called once by every entry point (``robolearn`` CLI, ``robolearn.runtime.worker``, the policy server,
the test session) before any config is validated. Modules never register themselves on import, so
importing one has no side effect and the registry imports nothing (no import cycles).
"""

from __future__ import annotations

from robolearn import registry
from robolearn.config import store_config_schemas


def register_builtins() -> None:
    from robolearn.hardware.browser_teleop import GuiTeleopConfig, make_gui_operator
    from robolearn.hardware.gym_adapter import GymTaskConfig, GymTaskEnv
    from robolearn.hardware.lerobot_robot import LerobotRobot, LerobotRobotConfig
    from robolearn.hardware.operator import (
        GamepadTeleopConfig,
        KeyboardTeleopConfig,
        LeaderTeleopConfig,
        NoTeleopConfig,
        ScriptedPersonConfig,
        make_operator,
    )
    from robolearn.learner.dsrl import DSRL, DSRLConfig
    from robolearn.learner.habc import HABC, HABCConfig
    from robolearn.learner.hiors import HiORS, HiORSConfig
    from robolearn.learner.sac import SAC, SACConfig
    from robolearn.policies.dsrl import DSRLPolicyConfig, make_dsrl_policy
    from robolearn.policies.flow_chunk import FlowChunkPolicyConfig, make_flow_policy
    from robolearn.policies.lerobot_policy import LerobotPolicyConfig, make_lerobot_policy
    from robolearn.policies.mlp import MLPPolicyConfig, make_policy
    from robolearn.policies.vla import VLAPolicyConfig, make_vla_policy
    from robolearn.runtime.local import LocalRuntimeConfig, run_local
    from robolearn.runtime.ray_runtime import RayRuntimeConfig, run_ray
    from robolearn.sim.cube_tasks import PickCubeColorConfig, PickCubeConfig, PickCubeEnv, PushCubeConfig, PushCubeEnv
    from robolearn.sim.intervention import ScriptedHuman, ScriptedHumanConfig
    from robolearn.sim.reach import ReachConfig, ReachEnv
    from robolearn.sim.so101 import SimSO101, SimSO101Config
    from robolearn.tasks.real import RealTaskConfig, RealTaskEnv

    for group, name, config_cls, factory in (
        ("task", "reach", ReachConfig, ReachEnv),
        ("task", "pick_cube", PickCubeConfig, PickCubeEnv),
        ("task", "pick_cube_color", PickCubeColorConfig, PickCubeEnv),
        ("task", "push_cube", PushCubeConfig, PushCubeEnv),
        ("task", "gym", GymTaskConfig, GymTaskEnv),
        ("task", "real", RealTaskConfig, RealTaskEnv),
        ("robot", "sim_so101", SimSO101Config, SimSO101),
        ("robot", "so101", LerobotRobotConfig, LerobotRobot),
        ("teleop", "none", NoTeleopConfig, None),
        ("teleop", "keyboard", KeyboardTeleopConfig, make_operator),
        ("teleop", "gamepad", GamepadTeleopConfig, make_operator),
        ("teleop", "so101_leader", LeaderTeleopConfig, make_operator),
        ("teleop", "scripted", ScriptedPersonConfig, make_operator),
        ("teleop", "gui", GuiTeleopConfig, make_gui_operator),
        ("policy", "mlp", MLPPolicyConfig, make_policy),
        ("policy", "flow_chunk", FlowChunkPolicyConfig, make_flow_policy),
        ("policy", "lerobot", LerobotPolicyConfig, make_lerobot_policy),
        ("policy", "dsrl", DSRLPolicyConfig, make_dsrl_policy),
        ("policy", "vla", VLAPolicyConfig, make_vla_policy),
        ("algo", "sac", SACConfig, SAC),
        ("algo", "habc", HABCConfig, HABC),
        ("algo", "hiors", HiORSConfig, HiORS),
        ("algo", "dsrl", DSRLConfig, DSRL),
        ("runtime", "local", LocalRuntimeConfig, run_local),
        ("runtime", "ray", RayRuntimeConfig, run_ray),
        ("human", "scripted", ScriptedHumanConfig, ScriptedHuman),
    ):
        registry.register(group, name, config_cls, factory)
    store_config_schemas()
