"""``task=gym``: gymnasium's own MuJoCo envs as robolearn tasks."""

import json

import numpy as np
import pytest

from robolearn.hardware.gym_adapter import GymTaskConfig, GymTaskEnv
from robolearn.hardware.robot import Robot
from robolearn.registry import lookup
from tests.helpers import read_buffer, robolearn


@pytest.mark.parametrize("env_id, obs_dim, act_dim", [("Reacher-v5", 10, 2), ("Pusher-v5", 23, 7)])
def test_box_envs_become_specs_and_a_robot(env_id, obs_dim, act_dim):
    env = GymTaskEnv(GymTaskConfig(env_id=env_id))
    assert env.observation_spec.arrays["state"].shape == (obs_dim,)
    assert env.action_spec.dim == act_dim and np.all(np.isfinite(env.action_spec.array.low_array()))
    assert isinstance(env.robot, Robot) and env.robot.config.control_hz > 0
    obs, _ = env.reset(seed=0)
    env.observation_spec.validate(obs)
    obs2, reward, terminated, truncated, info = env.step(np.full(act_dim, 100.0, np.float32))  # clipped
    env.observation_spec.validate(obs2)
    assert isinstance(reward, float) and "success" in info
    env.close()


def test_a_policy_builds_for_unbounded_observations():
    entry = lookup("policy", "mlp")
    env = GymTaskEnv(GymTaskConfig(env_id="Reacher-v5"))
    policy = entry.factory(env.observation_spec, env.action_spec, entry.config_cls())
    obs, _ = env.reset(seed=0)
    chunk = policy.act(obs["state"])
    assert chunk.shape == (1, 2) and np.all(np.isfinite(chunk))
    assert float(policy.normalise.half_range.min()) == 1.0  # infinite bounds: left unscaled


def test_unknown_env_id_is_named():
    with pytest.raises(ValueError, match="NoSuchEnv-v0"):
        GymTaskConfig(env_id="NoSuchEnv-v0")


@pytest.mark.e2e
def test_robolearn_run_trains_on_reacher_for_a_few_hundred_steps(tmp_path):
    r = robolearn(["run", "task=gym", "task.env_id=Reacher-v5", "run_name=reacher", "budget.env_steps=400",
                   "budget.minutes=3", "learner.learning_starts=100", "policy.hidden_dims=[64,64]",
                   "algo.critic_hidden_dims=[64,64]", "runtime.live_console=false"], cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "runs" / "reacher"
    summary = json.loads((run / "summary.json").read_text())
    # the actor stops at the budget rather than wherever it got to before the runtime noticed
    assert summary["stopped_because"].startswith("env-step budget") and summary["env_steps"] == 400
    assert summary["updates"] >= 200 and summary["episodes"] >= 8  # Reacher episodes are 50 steps
    batches = read_buffer(run)
    assert batches[0]["obs.state"].shape[1] == 10 and batches[0]["action"].shape[1] == 2
