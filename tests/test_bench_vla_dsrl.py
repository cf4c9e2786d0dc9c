"""bench-vla-dsrl's BC start: a ``--base`` saved by bench-vla is taken only with the settings the run would train it
with, and those settings reach the shipped CLI run's ``policy.base`` through its overrides (benchmarks/vla_dsrl.py
``check_base``, ``base_overrides``), so the run's frozen VLA is the network the checkpoint's weights fit."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from robolearn.checkpoint import load_checkpoint
from robolearn.config import compose, validate
from robolearn.policies.vla import VLAPolicy

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from vla import (  # noqa: E402
    BC_STEPS,
    COLOURS,
    DEMOS,
    PERTURB,
    TRAIN_TEMPLATES,
    bc_settings,
    make_env,
    policy_config,
    save_policy,
)
from vla_dsrl import base_overrides, check_base  # noqa: E402


def run_base(overrides: list[str]):
    return validate(compose(overrides=["task=pick_cube_color", "policy=dsrl", "algo=dsrl", *overrides])).policy.base


def test_the_benchmarks_vla_settings_compose_into_the_runs_frozen_base():
    config = policy_config()
    assert any(o.startswith("policy.base.camera_strides=") for o in base_overrides(config))  # differs from default
    assert run_base(base_overrides(config)) == config
    older = replace(config, camera_strides=[2, 1, 1, 1], text_encoder="minilm")  # a --camera-strides 2 1 1 1 start
    assert run_base(base_overrides(older)) == older
    assert run_base([]) != config  # without the overrides the run would build another network



def test_a_base_is_taken_only_with_the_bc_settings_this_run_would_train(tmp_path):
    env = make_env({c: [t.format(c) for t in TRAIN_TEMPLATES] for c in COLOURS}, scene_state=False)
    config = policy_config()
    policy = VLAPolicy(env.observation_spec, env.action_spec, config)
    env.close()
    settings = bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128)
    ckpt = tmp_path / "policy-0" / "checkpoints" / "latest.pt"
    with pytest.raises(SystemExit, match="no .*bc.json"):
        check_base(ckpt, settings)
    assert save_policy(tmp_path / "policy-0", policy, settings, {"final_loss": 0.5}) == ckpt
    weights = load_checkpoint(ckpt).policy_weights
    assert all(torch.equal(weights[k], v) for k, v in policy.state_dict().items())
    assert check_base(ckpt, settings)["bc"] == {"final_loss": 0.5}
    with pytest.raises(SystemExit, match=r"seed 0 \(this run's: 1\)"):  # bench-vla's policy 0, not 1
        check_base(ckpt, bc_settings(config, 1, DEMOS, PERTURB, BC_STEPS, 128))
    with pytest.raises(SystemExit, match=r"bc_steps 12000 \(this run's: 6000\)"):
        check_base(ckpt, bc_settings(config, 0, DEMOS, PERTURB, 6000, 128))
    with pytest.raises(SystemExit, match=r"in policy\.camera_strides \[2, 2, 1, 1\] \(this run's: \[2, 1, 1, 1\]\)$"):
        check_base(ckpt, bc_settings(policy_config(camera_strides=[2, 1, 1, 1]), 0, DEMOS, PERTURB, BC_STEPS, 128))
    with pytest.raises(SystemExit, match=r"scene 'cameras' \(this run's: 'state'\)"):
        check_base(ckpt, bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128, scene="state"))
