"""Exact resume: a learner restored from its checkpoint makes the same next update as the learner that kept
running (weights, target networks, optimisers, temperature, thresholds, RNG states, counters), for every
algorithm, with batches prefetched on a background thread."""

import numpy as np
import pytest
import torch

from robolearn.builders import build_task
from robolearn.config import validate
from robolearn.learner.loop import Learner
from robolearn.rundir import RunDir
from robolearn.transition import TransitionWriter
from tests.test_cli_config import _cfg

ALGOS = {
    "sac": {"policy": "mlp", "policy.hidden_dims": "[32,32]", "algo.critic_hidden_dims": "[32,32]",
            "learner.batch_size": "32", "algo.num_critics": "3", "algo.actor_update_every": "2"},
    "sac_gripper": {"policy": "mlp", "policy.hidden_dims": "[32,32]", "policy.discrete_gripper": "true",
                    "algo.critic_hidden_dims": "[32,32]", "learner.batch_size": "32"},
    "habc": {"policy": "flow_chunk", "policy.hidden_dims": "[32,32]", "policy.chunk_horizon": "4",
             "policy.max_prefix": "2", "algo.value_hidden_dims": "[32,32]", "learner.batch_size": "32",
             "algo.warmup": "3"},
    "hiors": {"policy": "flow_chunk", "policy.hidden_dims": "[32,32]", "policy.chunk_horizon": "4",
              "policy.max_prefix": "2", "learner.batch_size": "32"},
}


def fill(learner: Learner, episodes: int = 6, first: int = 0) -> None:
    """Random-action reach episodes (ids and seeds from ``first``): some with interventions, episode 0 a demo."""
    rng = np.random.default_rng(first)
    env = build_task(learner.cfg)
    for ep in range(first, first + episodes):
        obs, _ = env.reset(seed=ep)
        w = TransitionWriter(env.observation_spec)
        for t in range(30):
            a = env.action_spec.to_robot(rng.uniform(-1, 1, env.action_spec.dim).astype(np.float32))
            nxt, r, term, trunc, info = env.step(a)
            last = t == 29 or term
            w.add(obs, a, action_source=1 if 5 <= t < 9 and ep % 2 else 0, intervention=bool(5 <= t < 9 and ep % 2),
                  reward=r, terminated=term, truncated=last and not term, success=bool(info.get("success")),
                  episode_id=ep, step=t, tick=t, t_obs=0.0, t_act=0.0, policy_version=1, chunk_id=0,
                  chunk_index=0, delay_ticks=0)
            obs = nxt
            if last:
                break
        partition = "demo" if ep == 0 else "online"
        learner.buffer.add("sim-0", w.flush(final_obs=obs), partition=partition)
        if hasattr(learner.algo, "on_episode"):  # Hi-ORS: the threshold rises to the median return
            learner.algo.on_episode(learner.buffer.episode("sim-0", ep, partition).ret, partition)
    env.close()


def params(learner: Learner) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in learner.algo.state_dict()["actor"].items()}


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_resumed_learner_makes_the_uninterrupted_runs_next_update(tmp_path, algo):
    # updates due from the first batch on (the prefetcher draws only while the schedule has one due)
    cfg = validate(_cfg(task="reach", algo=algo.removesuffix("_gripper"), run_name="resume",
                        **{"learner.learning_starts": "0", **ALGOS[algo]}))
    run = RunDir(tmp_path)
    a = Learner(run, cfg, stop=None)
    fill(a)
    prefetch = a.start_prefetch()
    for _ in range(5):
        a.update_once(prefetch)
    a.checkpoint()
    metrics_a = a.update_once(prefetch)
    after_a = params(a)
    prefetch.close()
    a.buffer.close()

    b = Learner(run, cfg, stop=None)  # restores the checkpoint and reopens the same buffer
    assert b.resumed_from["updates"] == 5
    if algo == "hiors":
        assert b.algo.threshold.value == a.algo.threshold.value > -np.inf
    prefetch = b.start_prefetch()
    metrics_b = b.update_once(prefetch)
    prefetch.close()
    b.buffer.close()
    assert metrics_b == metrics_a
    after_b = params(b)
    assert after_b.keys() == after_a.keys()
    for k in after_a:
        assert torch.equal(after_a[k], after_b[k]), k


def test_an_error_in_an_update_ends_the_learner_instead_of_vanishing(tmp_path):
    import threading

    from robolearn.stop_flag import StopFlag

    cfg = validate(_cfg(task="reach", run_name="loud", **ALGOS["sac"], **{"learner.learning_starts": "0"}))
    stop = StopFlag()
    learner = Learner(RunDir(tmp_path), cfg, stop)
    fill(learner)

    def broken_update(batch):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")  # what a broken torch update raises

    learner.algo.update = broken_update
    timer = threading.Timer(120.0, stop.set)  # without the error surfacing, the loop would spin until then
    timer.start()
    try:
        with pytest.raises(RuntimeError, match="mat1 and mat2"):
            learner.run_forever()
    finally:
        timer.cancel()
        learner.buffer.close()
