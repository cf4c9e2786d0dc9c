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


def test_the_estop_command_starts_without_torch_or_hydra(tmp_path):
    """A person presses the e-stop when something is going wrong: ``robolearn estop`` must not first spend
    seconds importing torch and hydra (a minute on a loaded machine; it did, through robolearn.cli)."""
    import subprocess
    import sys

    run = tmp_path / "runs" / "x"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("run_name: x\n")
    probe = ("import sys\n"
             "from robolearn.__main__ import main\n"
             "code = 'returned'\n"
             "try:\n    main(['estop', sys.argv[1]])\nexcept SystemExit as exc:\n    code = exc.code\n"
             "print(code, sorted(m for m in ('torch', 'hydra', 'mujoco') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe, str(run)], capture_output=True, text=True, timeout=60)
    lines = done.stdout.strip().splitlines()
    assert lines and lines[-1] == "0 []", (done.stdout, done.stderr)  # exit code 0, none of them imported
    assert (run / "estop").is_dir() and list((run / "estop").glob("*.json")), "the e-stop was not latched"
