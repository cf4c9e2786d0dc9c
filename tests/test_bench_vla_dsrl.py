"""bench-vla-dsrl's run of the shipped CLI: the BC start's settings reach ``policy.base`` through its overrides
(benchmarks/vla_dsrl.py ``base_overrides``), so the run's frozen VLA is the network the checkpoint's weights fit."""

import sys
from dataclasses import replace
from pathlib import Path

from robolearn.config import compose, validate

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from vla import policy_config  # noqa: E402
from vla_dsrl import base_overrides  # noqa: E402


def run_base(overrides: list[str]):
    return validate(compose(overrides=["task=pick_cube_color", "policy=dsrl", "algo=dsrl", *overrides])).policy.base


def test_the_benchmarks_vla_settings_compose_into_the_runs_frozen_base():
    config = policy_config()
    assert any(o.startswith("policy.base.camera_strides=") for o in base_overrides(config))  # differs from default
    assert run_base(base_overrides(config)) == config
    older = replace(config, camera_strides=[2, 1, 1, 1], text_encoder="minilm")  # a --camera-strides 2 1 1 1 start
    assert run_base(base_overrides(older)) == older
    assert run_base([]) != config  # without the overrides the run would build another network

