"""The supervisor's restart policy with real worker processes: one that dies before it ever gets going (here: a run
directory without a config) is a crash loop and is restarted with growing back-off until it is out of restarts
within the window; a killed actor's place taken by the spare actor; the weights an actor keeps for its replacement;
the version floor of a restarted learner."""

import os
import signal
import time

import torch

from robolearn.actor.weights_cache import WeightsCache
from robolearn.hardware.resources import LeaseManager
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir
from robolearn.runtime.local import LocalRuntimeConfig
from robolearn.runtime.supervisor import Supervisor, WorkerProcess
from tests.helpers import fast_run_overrides, start_robolearn, wait_for


def _json(path):
    return read_json(path) or {}  # {}: not written yet


def test_a_process_that_dies_before_it_is_ready_is_restarted_with_growing_back_off(tmp_path):
    run = RunDir(tmp_path)  # no config.yaml: every actor process exits at start
    runtime = LocalRuntimeConfig(actor_restarts=3, restart_window_s=600, restart_backoff_s=0.5)
    leases = LeaseManager([])
    procs = {"actor-0": WorkerProcess("actor-0", run)}
    supervisor = Supervisor(run, procs, leases, runtime)
    started, failure, t0 = [], "", time.monotonic()
    pids = {procs["actor-0"].pid}
    while not failure and time.monotonic() - t0 < 120:
        failure = supervisor.check(time.monotonic() - t0)
        if procs["actor-0"].pid not in pids:
            pids.add(procs["actor-0"].pid)
            started.append(time.monotonic())
        time.sleep(0.02)
    procs["actor-0"].stop(5)
    leases.close()
    assert "actor-0 exited unexpectedly" in failure and "within 600 s" in failure, failure
    assert len(supervisor.restarts) == 3 and all(r["ready_after_s"] is None for r in supervisor.restarts)
    died = [r["at_s"] for r in supervisor.restarts]
    waits = [s - t0 - d for s, d in zip(started, died)]  # death seen -> its replacement started
    assert waits[0] < 0.3 and 0.4 < waits[1] < 1.0 and 1.4 < waits[2] < 2.5, waits  # at once, 1 x, 3 x backoff
    assert "Traceback" in run.log("actor-0").read_text() or "config.yaml" in run.log("actor-0").read_text()


def test_a_killed_actor_s_place_goes_to_the_waiting_spare_and_a_new_spare_follows(tmp_path):
    """The spare (its pid in pids.json as spare-actor-0) becomes actor-0: the actor acting after the kill has the
    spare's pid, which a cold start could not have; then another spare is started. That one is killed while it
    waits: spares stop for the run, and the next dead actor starts cold (a pid no spare had)."""
    # (stopped by SIGINT once seen; the budget only has to outlast the waits on a busy machine)
    proc = start_robolearn(["run", "task=reach", "actor.realtime=true", *fast_run_overrides("spare", 6)], tmp_path)
    run = tmp_path / "runs" / "spare"

    def acting(pid_ok) -> bool:
        status = _json(run / "status" / "actor-0.json")
        return pid_ok(status.get("pid")) and status.get("env_steps", 0) > 0

    try:
        spare = wait_for(lambda: _json(run / "pids.json").get("spare-actor-0"), 120, "a spare actor")
        wait_for(lambda: "imports done" in (run / "logs" / "spare-actor.log").read_text(), 60, "its imports")
        os.kill(_json(run / "pids.json")["actor-0"], signal.SIGKILL)
        wait_for(lambda: acting(lambda pid: pid == spare), 60, "the spare acting as actor-0")
        assert _json(run / "pids.json")["actor-0"] == spare
        second = wait_for(lambda: _json(run / "pids.json").get("spare-actor-0") not in (None, spare)
                          and _json(run / "pids.json")["spare-actor-0"], 60, "a new spare")
        os.kill(second, signal.SIGKILL)
        wait_for(lambda: "spare-actor-0" not in _json(run / "pids.json"), 30, "the dead spare gone from pids.json")
        os.kill(spare, signal.SIGKILL)
        wait_for(lambda: acting(lambda pid: pid not in (None, spare, second)), 120, "a cold-started actor-0")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "exited (code -9) while it waited; no more spares this run" in out, out
    summary = _json(run / "summary.json")
    assert [(r["process"], r.get("from_spare")) for r in summary["restarts"]] == [("actor-0", True),
                                                                                   ("actor-0", False)], summary
    assert all(r["ready_after_s"] is not None for r in summary["restarts"])
    assert f"spare actor (pid {spare}) takes the place of actor-0" in (run / "logs" / "actor-0.log").read_text()


def test_a_replacement_actor_acts_with_the_weights_its_predecessor_kept(tmp_path):
    policy = torch.nn.Linear(3, 2)
    cache = WeightsCache(tmp_path / "weights.npz", every_s=5.0)
    cache.save(7, policy)
    cache.save(8, torch.nn.Linear(3, 2))  # within every_s: not written
    fresh = torch.nn.Linear(3, 2)
    assert cache.load(fresh) == 7
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), policy.state_dict().values()))
    assert WeightsCache(tmp_path / "weights.npz").load(torch.nn.Linear(4, 2)) is None  # another policy: ignored
    whole = (tmp_path / "weights.npz").read_bytes()
    for damaged in (b"torn", whole[: len(whole) // 2], whole[:40] + bytes(len(whole) - 40)):
        (tmp_path / "weights.npz").write_bytes(damaged)
        assert WeightsCache(tmp_path / "weights.npz").load(fresh) is None


def test_a_restarted_publisher_knows_the_newest_version_published_before(tmp_path):
    import zmq

    from robolearn.transport.learner_status import LearnerStatus
    from robolearn.transport.weights import WeightPublisher

    ctx = zmq.Context()
    policy = torch.nn.Linear(3, 2)
    status = LearnerStatus(version=1, updates=0, env_steps=0, learned_env_steps=0, caught_up=True)
    pub = WeightPublisher(ctx, "127.0.0.1", 20, version_file=tmp_path / "published_version")
    assert pub.published_before == 0
    for v in (1, 2, 41):
        pub.publish(v, policy, status)
    pub.close()
    again = WeightPublisher(ctx, "127.0.0.1", 20, version_file=tmp_path / "published_version")
    assert again.published_before == 41
    again.close()
    ctx.term()
