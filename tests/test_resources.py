"""Leases: exclusive, queued in order, renewed by heartbeat, expiring when the holder dies; health checks."""

import subprocess
import sys
import time

import pytest

from robolearn.hardware.resources import LeaseClient, LeaseManager, Requirement, Resource, port_probe


def _sims(n=1, **kw):
    return [Resource(f"sim-{i}", "sim", "sim_so101", cameras=("front",), **kw) for i in range(n)]


def test_two_actors_contend_for_one_robot_second_waits_then_gets_it():
    m = LeaseManager(_sims(1), ttl_s=5)
    req = Requirement("sim_so101")
    first = m.request("actor-0", req, now=0.0)
    assert first["granted"] == ["sim-0"]
    assert m.request("actor-1", req, now=0.1) == {"queued": 0}
    assert m.request("actor-1", req, now=0.2) == {"queued": 0}
    m.release(first["lease_id"])
    assert m.request("actor-1", req, now=0.3)["granted"] == ["sim-0"]


def test_queue_is_first_come_first_served_and_requirements_are_checked():
    m = LeaseManager(_sims(2), ttl_s=5)
    a = m.request("a", Requirement("sim_so101", count=2), now=0)
    assert a["granted"] == ["sim-0", "sim-1"]
    assert "queued" in m.request("b", Requirement("sim_so101"), now=1)
    assert "queued" in m.request("c", Requirement("sim_so101"), now=1)
    m.release(a["lease_id"])
    assert "queued" in m.request("c", Requirement("sim_so101"), now=2)  # b asked first
    assert m.request("b", Requirement("sim_so101"), now=2)["granted"] == ["sim-0"]
    assert m.request("c", Requirement("sim_so101"), now=2)["granted"] == ["sim-1"]
    assert "no resource" in m.request("d", Requirement("sim_so101", cameras=("wrist",)), now=3)["error"]
    assert "no resource" in m.request("d", Requirement("so101_follower"), now=3)["error"]


def test_a_named_request_gets_that_resource_only_and_waits_in_its_own_queue():
    m = LeaseManager(_sims(2), ttl_s=5)
    held = m.request("a", Requirement("sim_so101", name="sim-1"), now=0)
    assert held["granted"] == ["sim-1"]  # not sim-0, the first free one
    assert m.request("b", Requirement("sim_so101", name="sim-1"), now=0.1) == {"queued": 0}
    # b waiting for sim-1 does not hold up a request for any sim (sim-0 is free)
    assert m.request("c", Requirement("sim_so101"), now=0.2)["granted"] == ["sim-0"]
    m.release(held["lease_id"])
    assert m.request("b", Requirement("sim_so101", name="sim-1"), now=0.3)["granted"] == ["sim-1"]
    assert "named 'sim-7'" in m.request("d", Requirement("sim_so101", name="sim-7"), now=0.4)["error"]


def test_unrenewed_lease_expires_and_renewed_one_does_not():
    m = LeaseManager(_sims(1), ttl_s=1.0)
    lease = m.request("a", Requirement("sim_so101"), now=0.0)
    assert m.renew(lease["lease_id"], now=0.9) == {"ok": True}
    assert "queued" in m.request("b", Requirement("sim_so101"), now=1.5)
    assert m.request("b", Requirement("sim_so101"), now=2.0)["granted"] == ["sim-0"]  # a stopped renewing
    assert "error" in m.renew(lease["lease_id"], now=2.1)


def test_a_robot_whose_health_check_fails_is_not_handed_out():
    healthy = {"sim-0": False, "sim-1": True}
    res = [Resource(f"sim-{i}", "sim", "sim_so101", probe=lambda i=i: healthy[f"sim-{i}"]) for i in range(2)]
    m = LeaseManager(res, ttl_s=5, probe_every_s=0.0)
    assert m.request("a", Requirement("sim_so101"), now=0)["granted"] == ["sim-1"]
    assert "queued" in m.request("b", Requirement("sim_so101"), now=1)
    healthy["sim-0"] = True
    assert m.request("b", Requirement("sim_so101"), now=2)["granted"] == ["sim-0"]
    assert {r["name"]: r["healthy"] for r in m.status()} == {"sim-0": True, "sim-1": True}


def test_port_probe_reports_a_missing_serial_port(tmp_path):
    assert port_probe(str(tmp_path / "ttyACM9"))() is False
    (tmp_path / "ttyACM0").write_bytes(b"")
    assert port_probe(str(tmp_path / "ttyACM0"))() is True


@pytest.mark.e2e
def test_killed_actor_loses_its_lease_within_the_timeout_and_another_takes_the_robot():
    m = LeaseManager(_sims(1), ttl_s=1.5, probe_every_s=10)
    endpoint = m.serve()
    holder = subprocess.Popen([sys.executable, "-m", "tests.lease_holder", endpoint, "actor-0"],
                              stdout=subprocess.PIPE, text=True)
    other = LeaseClient(endpoint, "actor-1")
    try:
        assert holder.stdout.readline().split() == ["granted", "sim-0"]
        time.sleep(2.0)  # longer than the ttl: the holder's heartbeat keeps its lease
        assert {r["name"]: r["holder"] for r in m.status()} == {"sim-0": "actor-0"}
        with pytest.raises(TimeoutError):
            other.acquire("sim_so101", timeout_s=0.5)
        holder.kill()
        t0 = time.monotonic()
        assert other.acquire("sim_so101", timeout_s=10) == ["sim-0"]
        assert time.monotonic() - t0 <= 1.5 + 1.0  # the TTL, plus polling and scheduling slack
        assert {r["name"]: r["holder"] for r in m.status()} == {"sim-0": "actor-1"}
        other.release()
        assert {r["name"]: r["holder"] for r in m.status()} == {"sim-0": None}
    finally:
        holder.kill()
        other.close()
        m.close()


def test_resources_come_from_the_robot_config_and_probes(tmp_path):
    from robolearn.hardware.lerobot_robot import LerobotRobotConfig
    from robolearn.hardware.resources import resources_for
    from robolearn.sim.so101 import SimSO101Config

    sims = resources_for(SimSO101Config(), "sim_so101", 3)
    assert [(r.name, r.kind) for r in sims] == [("sim_so101-0", "sim"), ("sim_so101-1", "sim"), ("sim_so101-2", "sim")]
    port = tmp_path / "ttyACM0"
    real = resources_for(LerobotRobotConfig(port=str(port)), "so101", 1)
    assert real[0].kind == "robot" and all(r.kind == "camera" for r in real[1:])  # no cameras on this machine
    m = LeaseManager(real, probe_every_s=0.0)
    assert "queued" in m.request("a", Requirement("so101"))  # no serial port: not handed out
    assert m.status()[0]["healthy"] is False
    port.write_bytes(b"")
    assert m.request("a", Requirement("so101"))["granted"] == ["so101-0"]
