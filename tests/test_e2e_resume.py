"""SIGKILL the learner mid-run: the runtime restarts it from its checkpoint and the run goes on, nothing lost; with
restarts off the run stops and ``resume=true`` continues it with every stored transition. (Killed actors:
``tests/test_chaos.py``.)"""

import json
import os
import signal
import time

import numpy as np
import pytest

from robolearn.logging.status import read_json
from tests.helpers import fast_run_overrides, read_buffer, robolearn, start_robolearn, wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_killed_learner_resumes_from_checkpoint_with_its_buffer(tmp_path):
    run = tmp_path / "runs" / "kill"
    proc = start_robolearn(["run", *fast_run_overrides("kill", 3.0), "runtime.learner_restarts=0"], cwd=tmp_path)
    try:
        wait_for(lambda: (read_json(run / "status" / "learner.json") or {}).get("updates", 0) >= 50, 150,
                 "50 learner updates")
        t_updates = time.time()
        ckpt = run / "checkpoints" / "latest.pt"
        wait_for(lambda: ckpt.exists() and ckpt.stat().st_mtime > t_updates and len(read_buffer(run)) >= 30, 60,
                 "a checkpoint after the updates, and 30 transition batches")
        shown = robolearn(["resources", str(run)], cwd=tmp_path, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "sim_so101-0" in shown.stdout and "actor-0" in shown.stdout and "ok" in shown.stdout
        pid = json.loads((run / "pids.json").read_text())["learner"]
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    assert "learner exited unexpectedly" in out and "runtime.learner_restarts=0" in out

    before = read_buffer(run)
    assert len(before) >= 30
    import torch

    ckpt = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)
    ckpt_updates = ckpt["algo"]["num_updates"]
    assert ckpt_updates > 0

    r = robolearn(["run", "run_name=kill", "resume=true", "budget.minutes=0.4", "runtime.live_console=false"],
                  cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    status = json.loads((run / "status" / "learner.json").read_text())
    assert status["resumed_from"]["updates"] == ckpt_updates
    assert status["updates"] > ckpt_updates
    learner_log = (run / "logs" / "learner.log").read_text()
    steps_before = sum(len(b["action"]) for b in before)
    assert f"loaded {steps_before} transitions" in learner_log

    after = read_buffer(run)
    assert len(after) > len(before)
    for a, b in zip(before, after):  # every transition stored before the kill is still there, unchanged
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    # what the actor had spooled when the learner died continues its episodes; every new episode starts past them
    old_episodes = {int(e) for b in before for e in b["episode_id"]}
    new_episodes = {int(e) for b in after[len(before):] for e in b["episode_id"]} - old_episodes
    assert new_episodes and min(new_episodes) > max(old_episodes)
    assert (run / "run.1.rrd").exists()  # the resumed segment does not overwrite the first recording


def test_second_run_with_the_same_name_needs_resume(tmp_path):
    (tmp_path / "runs" / "taken" / "buffer").mkdir(parents=True)
    (tmp_path / "runs" / "taken" / "config.yaml").write_text("x: 1\n")
    (tmp_path / "runs" / "taken" / "buffer" / "seg-000000.log").write_bytes(b"collected data")
    r = robolearn(["run", "run_name=taken"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "resume=true" in r.stderr


@pytest.mark.slow  # make test-all; make test's chaos test kills the learner too and checks its restart
def test_a_killed_learner_is_restarted_from_its_checkpoint_and_nothing_is_lost(tmp_path):
    from robolearn.runtime.audit import audit_run

    run = tmp_path / "runs" / "relearn"
    proc = start_robolearn(["run", *fast_run_overrides("relearn", 1.2)], cwd=tmp_path)
    try:
        wait_for(lambda: (read_json(run / "status" / "learner.json") or {}).get("updates", 0) >= 200, 150,
                 "200 learner updates")
        killed = json.loads((run / "pids.json").read_text())["learner"]
        os.kill(killed, signal.SIGKILL)
        actor_version = read_json(run / "status" / "actor-0.json")["version"]
        t_kill = time.monotonic()
        import torch

        ckpt_updates = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)["algo"]["num_updates"]
        steps_before = sum(len(b["action"]) for b in read_buffer(run))  # nobody writes the buffer now
        wait_for(lambda: (read_json(run / "endpoints.json") or {}).get("learner_pid") not in (None, killed), 60,
                 "a new learner listening")
        recovery_s = time.monotonic() - t_kill
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads((run / "summary.json").read_text())
    assert proc.returncode == 0 and summary["ok"], out
    assert [r["process"] for r in summary["restarts"]] == ["learner"] and summary["restarts"][0]["ready_after_s"]
    status = json.loads((run / "status" / "learner.json").read_text())
    assert status["resumed_from"]["updates"] == ckpt_updates and status["updates"] > ckpt_updates
    assert f"loaded {steps_before} transitions" in (run / "logs" / "learner.log").read_text()
    # the actor outlived the learner: its open episode continues (not rejected), its spool was re-sent
    assert summary["rejected_messages"] == 0 and summary["batches_unacked"] == 0, summary
    audit = audit_run(run)  # the actor's own ledger against the buffer's log
    assert audit["produced_steps"] > steps_before
    assert audit["lost_steps"] == 0 and audit["duplicate_steps"] == 0 and audit["pending_steps"] == 0, audit
    # the restored weights went out past every version published before the kill, so the actor took them
    assert json.loads((run / "status" / "actor-0.json").read_text())["version"] > actor_version
    print(f"new learner listening {recovery_s:.1f} s after the kill")
