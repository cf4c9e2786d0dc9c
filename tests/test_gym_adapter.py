"""``task=gym``: gymnasium's own MuJoCo envs as robolearn tasks."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from robolearn.hardware.gym_adapter import GymTaskConfig, GymTaskEnv
from robolearn.hardware.robot import Robot
from robolearn.registry import lookup
from tests.helpers import read_buffer, robolearn

GOAL_STEPS = 5000  # what SAC needs on GoalPoint here (two actors at 50 Hz: under a minute)


@pytest.mark.parametrize("env_id, obs_dim, act_dim", [("Reacher-v5", 10, 2), ("Pusher-v5", 23, 7)])
def test_box_envs_become_specs_and_a_robot(env_id, obs_dim, act_dim):
    env = GymTaskEnv(GymTaskConfig(env_id=env_id))
    assert env.observation_spec.arrays["state"].shape == (obs_dim,)
    assert env.action_spec.dim == act_dim and np.all(np.isfinite(env.action_spec.array.low_array()))
    assert isinstance(env.robot, Robot) and env.robot.config.control_hz > 0
    obs, _ = env.reset(seed=0)
    env.observation_spec.validate(obs)
    received, step = [], env.env.step
    env.env.step = lambda a: (received.append(np.array(a)), step(a))[1]  # what gymnasium's env is given
    obs2, reward, terminated, truncated, info = env.step(np.full(act_dim, 100.0, np.float32))
    np.testing.assert_array_equal(received[0], env.env.action_space.high)  # clipped to the env's bounds
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
@pytest.mark.slow  # 28 s; the fast tier keeps the adapter's unit tests above
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


def test_every_non_image_entry_of_a_dict_observation_reaches_the_state_in_key_order():
    env = GymTaskEnv(GymTaskConfig(env_id="tests.goal_env:GoalPoint-v0"))
    spec = env.observation_spec.arrays["state"]
    assert list(env.observation_spec.arrays) == ["state"]
    assert spec.names == ("achieved_goal[0]", "achieved_goal[1]", "desired_goal[0]", "desired_goal[1]",
                          "observation[0]", "observation[1]")
    assert spec.low[2:4] == (-1.0, -1.0) and spec.low[0] == -np.inf
    obs, _ = env.reset(seed=3)
    goal = env.env.unwrapped._goal  # the env's own goal, not the adapter's account of it
    np.testing.assert_array_equal(obs["state"][2:4], goal)
    env.close()


def test_an_env_of_another_package_is_named_module_colon_id():
    assert GymTaskConfig(env_id="tests.goal_env:GoalPoint-v0").robot_type == "tests.goal_env_GoalPoint-v0"
    with pytest.raises(ValueError, match="cannot import 'no_such_package'"):
        GymTaskConfig(env_id="no_such_package:Env-v0")
    with pytest.raises(ValueError, match="'Missing-v0' is not a registered"):
        GymTaskConfig(env_id="tests.goal_env:Missing-v0")


def test_unbounded_elements_are_standardised_from_the_data_and_the_statistics_travel_with_the_weights():
    from robolearn.policies.mlp import ObsNormaliser
    from robolearn.specs import ArraySpec, ObservationSpec

    spec = ObservationSpec({"state": ArraySpec((2,), low=(-np.inf, 0.0), high=(np.inf, 4.0))})
    norm = ObsNormaliser(spec)
    x = torch.tensor([[7.0, 3.0]])
    assert norm(x).tolist() == [[7.0, 0.5]]  # before any data the unbounded element is left as it is
    data = torch.randn(4000, 2, generator=torch.Generator().manual_seed(0)) * 3.0 + 100.0
    for chunk in data.split(128):  # batch by batch, as the learner sees them
        norm.update(chunk)
    out = norm(data)
    assert abs(float(out[:, 0].mean())) < 1e-3 and abs(float(out[:, 0].std()) - 1.0) < 1e-3
    assert torch.allclose(out[:, 1], (data[:, 1] - 2.0) / 2.0)  # bounded: scaled by the spec, not the data
    copy = ObsNormaliser(spec)
    copy.load_state_dict(norm.state_dict())  # what an actor gets with the weights
    assert torch.equal(copy(data), out)
    assert float(norm(torch.tensor([[1e6, 0.0]]))[0, 0]) == ObsNormaliser.CLIP


@pytest.mark.slow  # the fast tier runs reacher through the adapter
@pytest.mark.e2e
def test_an_env_from_a_module_is_imported_by_every_process_and_sac_learns_its_goal(tmp_path, monkeypatch):
    """``tests.goal_env:GoalPoint-v0`` through the production run (learner, two actors, the policy server):
    each process imports the module, and SAC reaches goals it can only know from ``desired_goal``, as a
    deterministic evaluation on unseen seeds says (a policy blind to the goal stays near chance)."""
    from robolearn.evaluate import evaluate
    from tests.goal_env import IMPORT_LOG

    log = tmp_path / "imports.log"
    monkeypatch.setenv(IMPORT_LOG, str(log))
    repo = str(Path(__file__).parents[1])  # the workers import tests.goal_env from the repository
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    r = robolearn(["run", "task=gym", "task.env_id=tests.goal_env:GoalPoint-v0", "run_name=goal",
                   "runtime.policy_server=true", "actor.realtime=true", "runtime.num_actors=2",
                   f"budget.env_steps={GOAL_STEPS}", "budget.minutes=4", "learner.learning_starts=500",
                   "policy.hidden_dims=[64,64]", "algo.critic_hidden_dims=[64,64]", "learner.batch_size=64",
                   "runtime.live_console=false"], cwd=tmp_path, timeout=330)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    imported_by = log.read_text()
    for role in ("worker.py learner", "worker.py actor", "worker.py policy-server"):
        assert role in imported_by, imported_by
    result = evaluate(tmp_path / "runs" / "goal", episodes=100, seed=700_000)
    print(result)
    assert result["success_rate"] >= 0.8, result
