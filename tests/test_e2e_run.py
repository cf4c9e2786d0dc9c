"""End to end: the real CLI starts a learner and an actor process that talk over zmq."""

import json
import subprocess

import numpy as np
import pytest

from tests.helpers import BIN, fast_run_overrides, read_buffer, robolearn

pytestmark = pytest.mark.e2e


def test_short_run_learns_asynchronously_and_leaves_a_complete_run_dir(tmp_path):
    r = robolearn(["run", *fast_run_overrides("e2e", 0.6)], cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "robolearn run summary" in r.stdout
    run = tmp_path / "runs" / "e2e"
    summary = json.loads((run / "summary.json").read_text())
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((run / "logs").glob("*.log")))
    context = f"summary: {summary}\n{logs}"  # shown if an assertion below fails
    assert summary["ok"] and summary["stopped_because"].startswith("time budget"), context

    # the actor swapped in at least two weight versions, and transitions carry them
    assert summary["actors"][0]["versions_received"] >= 2, context
    batches = read_buffer(run)
    versions = np.concatenate([b["policy_version"] for b in batches])
    assert len(set(versions.tolist())) >= 2 and versions.min() >= 1, context
    assert np.all(np.diff(versions) >= 0), context  # a single actor never goes back to older weights
    # every step the learner counted is on disk, and its policy lag was tracked
    assert sum(len(b["action"]) for b in batches) == summary["env_steps"] > 0, context
    assert sum(summary["policy_lag_histogram"].values()) == summary["env_steps"], context
    # ...and so is every step the actor itself took (its own count), each batch acknowledged end to end
    actor = json.loads((run / "status" / "actor-0.json").read_text())
    assert sum(len(b["action"]) for b in batches) == actor["env_steps"], f"{actor}\n{context}"
    assert actor["batches_unacked"] == 0 and actor["batches_acked"] == actor["batches_sent"] > 0, context
    assert summary["updates"] > 0, context

    # the rerun recording holds the per-tick robot data and the learner losses
    out = subprocess.run([str(BIN / "rerun"), "rrd", "print", "-v", str(run / "run.rrd")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr + context
    for entity in ("/robot/sim_so101-0/observation/state", "/robot/sim_so101-0/action",
                   "/robot/sim_so101-0/reward", "/learner/critic_loss", "/learner/actor_loss", "/learner/alpha"):
        assert entity in out.stdout, f"{entity} missing from run.rrd\n{context}"
    assert (run / "config.yaml").exists() and (run / "metrics.jsonl").stat().st_size > 0
    actor_rrd = subprocess.run([str(BIN / "rerun"), "rrd", "print", "-v", str(run / "actor-0.rrd")],
                               capture_output=True, text=True, timeout=120)
    assert "/robot/sim_so101-0/chunk" in actor_rrd.stdout, actor_rrd.stderr + context  # predicted chunks

    # the buffer CLI reads the same run
    info = robolearn(["buffer", "info", str(run), "--json"], cwd=tmp_path, timeout=120)
    assert info.returncode == 0, info.stderr
    figures = json.loads(info.stdout)
    assert figures["steps"]["online"] == summary["env_steps"], f"{figures}\n{context}"
    assert figures["episodes_committed"] == summary["episodes"] and figures["episodes_open"] == 0, \
        f"{figures}\n{context}"

    # the trained policy can be evaluated from the run directory
    ev = robolearn(["eval", f"run_dir={run}", "episodes=3"], cwd=tmp_path, timeout=120)
    assert ev.returncode == 0, ev.stderr + context
    assert "over 3 episodes" in ev.stdout and f"policy v{summary['policy_version']}" in ev.stdout, ev.stdout + context
    assert not figures["problems"]


@pytest.mark.slow  # 38 s; the fast tier keeps the short run above and the chunking tests on the simulated clock
def test_run_under_inference_delay_executes_chunks_without_stalls(tmp_path):
    """A 3-tick inference delay on the simulated clock with 8-action chunks: the latency-aware executor asks
    early enough that the robot never waits, and every transition records the measured delay."""
    r = robolearn(["run", *fast_run_overrides("delay", 0.25), "policy.chunk_horizon=8",
                   "actor.inference_delay_ticks=3", "actor.chunking.initial_delay=3",
                   "actor.chunking.execute_horizon=4"], cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "runs" / "delay"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ok"] and summary["env_steps"] > 200, summary
    assert summary["stalled_ticks"] == 0, summary
    actor = summary["actors"][0]
    assert set(actor["delay_histogram"]) == {"3"} and 0 < summary["chunk_utilisation"] < 1, actor
    delays = np.concatenate([b["delay_ticks"] for b in read_buffer(run)])
    # the first chunk of an episode is computed at rest (delay 0); all others took the 3 ticks
    assert set(delays.tolist()) == {0, 3} and (delays == 3).mean() > 0.5


@pytest.mark.slow  # the fast tier's person is in test_real_robot_run
def test_hil_run_with_habc_the_scripted_human_and_a_lag_limit(tmp_path):
    """algo=habc on pick_cube with a flow chunk policy: the scripted human takes over (steps flagged as
    interventions, source HUMAN), the same learner loop updates, and actors respect max_policy_lag."""
    r = robolearn(["run", "task=pick_cube", "policy=flow_chunk", "policy.hidden_dims=[32,32]", "policy.max_prefix=0",
                   "algo=habc", "learner.batch_size=64", "algo.warmup=20", "algo.value_hidden_dims=[32,32]",
                   "learner.publish_every=5", "actor.human=scripted", "actor.max_policy_lag=2",
                   "actor.chunking.mode=sync", "actor.chunking.execute_horizon=5", "budget.env_steps=500",
                   "budget.minutes=1.5", "runtime.live_console=false", "run_name=hil"], cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "runs" / "hil"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["ok"] and summary["env_steps"] >= 500 and summary["updates"] > 0, summary
    batches = read_buffer(run)
    intervention = np.concatenate([b["intervention"] for b in batches])
    source = np.concatenate([b["action_source"] for b in batches])
    assert intervention.any() and not intervention.all(), summary
    assert (source[intervention] == 1).all() and (source[~intervention] == 0).all()  # HUMAN / POLICY
    assert summary["intervention_steps"] == int(intervention.sum())
