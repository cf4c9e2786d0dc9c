"""The e-stop of a live run: ``robolearn estop`` from another shell holds the robot (no step is taken: the
actor's ledger, not its status, says so), a replacement of a killed actor finds it still latched and holds
too, and only ``robolearn rearm`` lets the robot act again."""

import json
import os
import signal
import time

import pytest

from robolearn.actor.step_ledger import read_ledger
from robolearn.logging.status import read_json
from tests.helpers import fast_run_overrides, robolearn, start_robolearn, wait_for

pytestmark = pytest.mark.e2e


def _status(run):
    return read_json(run / "status" / "actor-0.json") or {}


def _begun(run) -> int:
    return len(read_ledger(run / "ledger" / "actor-0.log").begun)


def test_a_latched_estop_holds_the_robot_through_a_restart_until_a_person_rearms_it(tmp_path):
    proc = start_robolearn(["run", "task=reach", "actor.realtime=true", *fast_run_overrides("es", 2.0)], cwd=tmp_path)
    run = tmp_path / "runs" / "es"
    try:
        wait_for(lambda: _status(run).get("env_steps", 0) > 50, 120, "the actor acting")
        r = robolearn(["estop", str(run), "--reason", "hand in the workspace"], cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and "e-stop latched for every robot" in r.stdout, r.stderr
        wait_for(lambda: _status(run).get("estop_latched"), 10, "the actor to see the e-stop")
        time.sleep(0.5)
        taken = _begun(run)
        time.sleep(2.0)
        assert _begun(run) == taken  # not one step while latched
        old = json.loads((run / "pids.json").read_text())["actor-0"]
        os.kill(old, signal.SIGKILL)  # the replacement must not resume by itself
        wait_for(lambda: _status(run).get("pid") not in (None, old) and _status(run).get("estop_latched"), 60,
                 "a replacement actor that reports the latch")
        time.sleep(2.0)
        assert _begun(run) == taken and _status(run).get("env_steps") == 0
        r = robolearn(["rearm", str(run)], cwd=tmp_path, timeout=60)
        assert r.returncode == 0 and "re-armed all" in r.stdout and "hand in the workspace" in r.stdout, r.stdout
        wait_for(lambda: _begun(run) > taken + 25, 30, "steps again after the re-arm")
        assert not _status(run).get("estop_latched")
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-3000:]
