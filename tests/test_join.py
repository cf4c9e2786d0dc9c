"""A robot PC joins a run whose learner is on another machine (``robolearn join``): here both are this machine,
the learner's run with ``runtime.num_actors=0`` and one remote slot, the joined actor in its own directory.

With the fault injector (``tests/fault_proxy.py``) between the joined actor and the learner's transitions and
weights ports (100 +- 50 ms each way, every connection reset every 3-7 s) the learner's weights still reach the
robot PC, the joined actor's own ledger, held against the learner's buffer log, shows nothing lost or stored twice,
and (slow tier) the run converges on reach."""

import json

import pytest

from robolearn.logging.status import read_json
from robolearn.runtime.audit import audit_run
from robolearn.transport.sockets import endpoint_port
from tests.fault_proxy import FaultProxy
from tests.helpers import fast_run_overrides, free_port, robolearn, start_robolearn, wait_for

pytestmark = pytest.mark.e2e


def _ports(run) -> dict:
    endpoints = wait_for(lambda: read_json(run / "endpoints.json"), 120, "the learner's endpoints")
    return {ch: endpoint_port(endpoints[ch]) for ch in ("transitions", "weights")}


# The network half (nothing lost, weights arrive through the faults) on a short run, and whether a longer one also
# converged (it depends on how fast this machine learns in its minutes). Both in the slow tier: the short one is about
# a minute of make test's 15 (the fast tier keeps the join protocol's unit tests and a local end-to-end run).
@pytest.mark.slow
@pytest.mark.parametrize("minutes, converge", [(0.6, False), (2.5, True)], ids=["no-loss", "converges"])
def test_a_robot_pc_joins_through_a_faulty_network_learns_and_loses_nothing(tmp_path, minutes, converge):
    (tmp_path / "ws").mkdir()
    (tmp_path / "pc").mkdir()
    join_port = free_port()
    ws = start_robolearn(["run", *fast_run_overrides("far", minutes), "runtime.num_actors=0",
                          "runtime.remote_actors=1", f"runtime.join_port={join_port}"], cwd=tmp_path / "ws")
    proxies, pc = [], None
    try:
        ports = _ports(tmp_path / "ws" / "runs" / "far")
        proxies = [FaultProxy(("127.0.0.1", ports[ch]), latency_ms=100, jitter_ms=50, reset_every_s=5.0, seed=i)
                   for i, ch in enumerate(("transitions", "weights"))]
        pc = start_robolearn(["join", f"tcp://127.0.0.1:{join_port}", "--run-dir", "joined",
                              "--transitions", proxies[0].endpoint, "--weights", proxies[1].endpoint],
                             cwd=tmp_path / "pc")
        ws_out, _ = ws.communicate(timeout=240)
        pc_out, _ = pc.communicate(timeout=120)
    finally:
        for p in (ws, pc):
            if p is not None and p.poll() is None:
                p.kill()
        for proxy in proxies:
            proxy.close()
    run = tmp_path / "ws" / "runs" / "far"
    summary = json.loads((run / "summary.json").read_text())
    assert ws.returncode == 0 and summary["ok"], ws_out
    assert pc.returncode == 0, pc_out
    assert "joined run 'far'" in pc_out and "0 batches left unacknowledged" in pc_out
    # the faults happened: >= 10 resets in the 1.5 minutes this test once ran, in proportion for its runs now
    assert min(p.resets for p in proxies) >= 10 * minutes / 1.5, [p.resets for p in proxies]
    audit = audit_run(run, joined=(tmp_path / "pc" / "joined",))
    # > 1000 steps for the 1.5 minutes this test once ran, in proportion for its runs now
    assert audit["produced_by_actor"].keys() == {"actor-0"} and audit["produced_steps"] > 1000 * minutes / 1.5, audit
    assert audit["lost_steps"] == 0 and audit["duplicate_steps"] == 0 and audit["pending_steps"] == 0, audit
    joined = read_json(tmp_path / "pc" / "joined" / "status" / "actor-0.json")
    # the learner's versions reached the robot PC through the faulty weights port, up to a late one
    assert joined["versions_received"] >= 5 and joined["version"] >= summary["policy_version"] // 2, (joined, summary)
    if not converge:
        return
    r = robolearn(["eval", f"run_dir={run}", "episodes=20", "seed=900000"], cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    success = float(r.stdout.split("success rate ")[1].split("%")[0]) / 100
    print(f"resets {[p.resets for p in proxies]}, steps {audit['produced_steps']}, "
          f"success(50) {summary['success_rate_last_50']:.2f}, eval {success:.2f}")
    assert success >= 0.8, r.stdout  # converged: a deterministic evaluation on seeds no episode used


@pytest.mark.slow  # the fast tier checks CURVE in test_curve
def test_a_robot_pc_joins_a_run_bound_with_curve_keys_only_with_its_client_key(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "pc").mkdir()
    keys = robolearn(["keys", "generate", str(tmp_path / "keys"), "--clients", "robot-pc-1"], cwd=tmp_path)
    assert keys.returncode == 0, keys.stderr
    join_port = free_port()
    ws = start_robolearn(["run", *fast_run_overrides("sealed", 0.6), "runtime.num_actors=0", "runtime.remote_actors=1",
                          f"runtime.join_port={join_port}", f"runtime.keys_dir={tmp_path / 'keys' / 'server'}"],
                         cwd=tmp_path / "ws")
    try:
        _ports(tmp_path / "ws" / "runs" / "sealed")
        stranger = robolearn(["join", f"tcp://127.0.0.1:{join_port}", "--run-dir", "x"], cwd=tmp_path / "pc",
                             timeout=60)
        assert stranger.returncode != 0 and "no answer" in stranger.stderr  # no key: no handshake, nothing
        pc = robolearn(["join", f"tcp://127.0.0.1:{join_port}", "--run-dir", "joined", "--keys-dir",
                        str(tmp_path / "keys" / "robot-pc-1")], cwd=tmp_path / "pc", timeout=180)
        ws_out, _ = ws.communicate(timeout=120)
    finally:
        if ws.poll() is None:
            ws.kill()
    assert pc.returncode == 0, pc.stdout + pc.stderr
    assert ws.returncode == 0, ws_out
    audit = audit_run(tmp_path / "ws" / "runs" / "sealed", joined=(tmp_path / "pc" / "joined",))
    assert audit["produced_steps"] > 100 and audit["lost_steps"] == 0, audit
