"""``runtime=ray`` on a simulated multi-node cluster (``ray.cluster_utils.Cluster``, every node on this machine): a
head node where the learner runs and two "robot PC" nodes, each labelled with its (simulated) robot and holding
that robot's custom resource.

One run checks, in order: each actor lands on the node of its robot and leases that robot; killing an actor's Ray
host (and with it the actor process) leads to a restart on the same node and a re-lease of the same robot;
removing a node marks its robot unavailable (unhealthy in the lease manager, its actor waiting unscheduled, never
placed elsewhere) while the other robot goes on; the node coming back brings its actor back (twice, with one restart
allowed: a node leaving is not a crash and counts against no budget); killing the learner's host brings a new
learner on the driver's node from its checkpoint; and the run ends with every step the actors' own ledgers recorded
stored once in the learner's buffer, none pending."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from robolearn.hardware.resources import LeaseClient
from robolearn.logging.status import read_json
from robolearn.runtime.audit import audit_run
from robolearn.runtime.ray_runtime import ROBOT_LABEL, TYPE_LABEL, robot_resource
from tests.helpers import BIN, fast_run_overrides, start_robolearn, wait_for

pytestmark = [pytest.mark.e2e]


def _robot_node(cluster, robot: str):
    return cluster.add_node(num_cpus=1, labels={ROBOT_LABEL: robot, TYPE_LABEL: "sim_so101"},
                            resources={robot_resource(robot): 1})


def _placement(run) -> dict:
    return read_json(run / "placement.json") or {"processes": {}, "robots": []}


def _holders(run) -> dict[str, tuple[str | None, bool]]:
    info = read_json(run / "resources.json")
    client = LeaseClient(info["endpoint"], "test", timeout_s=3.0)
    try:
        return {r["name"]: (r["holder"], r["healthy"]) for r in client.call({"op": "status"})["resources"]}
    finally:
        client.close()


def _gone(pid: int) -> bool:
    """Exited (or a zombie waiting to be reaped: it runs no more)."""
    try:
        return "\nState:\tZ" in open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return True


def _running(run, name: str) -> dict | None:
    where = _placement(run)["processes"].get(name, {})
    return where if where.get("state") == "running" else None


@pytest.mark.slow
@pytest.mark.timeout(900)  # each step waits on the one before (a cluster on 2 cores): about 5 minutes in all
def test_ray_places_actors_on_their_robots_nodes_restarts_them_and_survives_a_node_leaving(tmp_path):
    from ray.cluster_utils import Cluster

    # the head (the learner's workstation) declares a GPU: Ray gives one to the learner (learner.device=auto), which
    # learns on the CPU all the same, as torch sees no CUDA device on this machine
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False})
    nodes = {robot: _robot_node(cluster, robot) for robot in ("arm-a", "arm-b")}
    cluster.wait_for_nodes()
    run = tmp_path / "runs" / "fleet"
    # one restart allowed per actor: arm-b's node leaves twice below, and a node leaving counts against no budget
    # the budget only bounds it: the run is stopped (as on Ctrl-C) once every step below is done
    proc = start_robolearn(["run", *fast_run_overrides("fleet", 12.0), "runtime=ray",
                            f"runtime.address={cluster.address}", "runtime.actor_restarts=1"], cwd=tmp_path)
    try:
        # 1. each actor on its robot's node, holding that robot
        for i, robot in enumerate(("arm-a", "arm-b")):
            where = wait_for(lambda i=i: _running(run, f"actor-{i}"), 120, f"actor-{i} running")
            assert where["node_id"] == nodes[robot].node_id, (robot, where)
        wait_for(lambda: _holders(run) == {"arm-a": ("actor-0", True), "arm-b": ("actor-1", True)}, 60,
                 "each actor holding its own robot")
        wait_for(lambda: (read_json(run / "status" / "actor-0.json") or {}).get("env_steps", 0) > 100, 60,
                 "actor-0 acting")
        # Ray starts these nodes' workers at niceness 15; the processes they host run as they would locally (the
        # hosts may lower it as root; without privilege it stays, as test_a_ray_host_without_privilege... shows)
        assert _running(run, "actor-0")["nice_from_ray"] == 15
        if os.geteuid() == 0:
            assert [os.getpriority(os.PRIO_PROCESS, _running(run, name)["pid"]) for name in ("actor-0", "learner")] \
                == [0, 5]
        # the learner holds the head's GPU; the actors hold none
        assert _running(run, "learner")["gpus"] == ["0"], _placement(run)
        assert [_running(run, f"actor-{i}")["gpus"] for i in range(2)] == [[], []]
        assert read_json(run / "status" / "learner.json")["device"] == "cpu"

        # 2. its Ray host killed (the actor process dies with it): started again on the same node, same robot
        first = _running(run, "actor-0")
        host_pid = int(open(f"/proc/{first['pid']}/stat").read().rsplit(")", 1)[1].split()[1])  # its parent
        os.kill(host_pid, signal.SIGKILL)
        again = wait_for(lambda: (w := _running(run, "actor-0")) and w["pid"] != first["pid"] and w, 120,
                         "actor-0 started again")
        assert again["node_id"] == nodes["arm-a"].node_id
        wait_for(lambda: _gone(first["pid"]), 10, "the old actor process killed with its host")  # no orphan
        wait_for(lambda: _holders(run)["arm-a"] == ("actor-0", True), 60, "arm-a leased again by actor-0")

        # 3. arm-b's node leaves: arm-b unavailable, its actor waits unscheduled, arm-a goes on; twice
        for leaving in range(2):
            cluster.remove_node(nodes["arm-b"], allow_graceful=False)
            wait_for(lambda: _holders(run)["arm-b"][1] is False, 60, "arm-b marked unhealthy")
            wait_for(lambda: _placement(run)["processes"]["actor-1"]["state"] == "waiting for its node", 60,
                     "actor-1 waiting for its node")
            wait_for(lambda: [r["available"] for r in _placement(run)["robots"]] == [True, False], 30,
                     "placement.json saying arm-b is unavailable")
            if leaving == 0:
                shown = subprocess.run([str(BIN / "robolearn"), "cluster", str(run)], capture_output=True,
                                       text=True, timeout=60, env={**os.environ, "COLUMNS": "250"})
                assert shown.returncode == 0, shown.stderr
                rows = {line.split("│")[4].strip(): line for line in shown.stdout.splitlines()
                        if line.count("│") > 8}
                assert "actor-0 " in rows["arm-a"] and "alive" in rows["arm-a"], shown.stdout  # holder, node
                assert "dead" in rows["arm-b"] and "unavailable" in rows["arm-b"], shown.stdout
                assert "actor-1: waiting for its node" in shown.stdout
                assert ", GPU 0)" in shown.stdout and shown.stdout.count("GPU 0") == 1, shown.stdout  # the learner
                steps = (read_json(run / "status" / "actor-0.json") or {})["env_steps"]
                wait_for(lambda at=steps: read_json(run / "status" / "actor-0.json")["env_steps"] > at + 100, 60,
                         "arm-a acting on while arm-b is gone")

            # 4. the node comes back: its actor is scheduled there again and takes its robot
            nodes["arm-b"] = _robot_node(cluster, "arm-b")
            wait_for(lambda: (w := _running(run, "actor-1")) and w["node_id"] == nodes["arm-b"].node_id, 120,
                     "actor-1 back on arm-b's new node")
            wait_for(lambda: _holders(run)["arm-b"] == ("actor-1", True), 60, "arm-b leased again by actor-1")

        # 5. the learner's host killed: a new learner on the driver's node, from its checkpoint
        learner = read_json(run / "status" / "learner.json")
        os.kill(int(open(f"/proc/{learner['pid']}/stat").read().rsplit(")", 1)[1].split()[1]), signal.SIGKILL)
        back = wait_for(lambda: (s := read_json(run / "status" / "learner.json")) and s["pid"] != learner["pid"]
                        and s.get("resumed_from") and s, 120, "a new learner resumed from its checkpoint")
        assert _running(run, "learner")["node_id"] == _placement(run)["driver_node"]
        assert _running(run, "learner")["gpus"] == ["0"]  # the GPU the killed learner held is its again
        wait_for(lambda: read_json(run / "status" / "learner.json")["updates"] > back["resumed_from"]["updates"],
                 60, "the new learner learning past its checkpoint")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.shutdown()
    summary = json.loads((run / "summary.json").read_text())
    assert proc.returncode == 0 and summary["ok"], out
    restarted = [r["process"] for r in summary["restarts"]]
    assert sorted(restarted) == ["actor-0", "actor-1", "actor-1", "learner"], summary["restarts"]
    assert [r.get("node_left", False) for r in summary["restarts"] if r["process"] == "actor-1"] == [True, True]
    assert not any(r.get("node_left") for r in summary["restarts"] if r["process"] != "actor-1")
    audit = audit_run(run)
    assert audit["produced_steps"] > 500 and set(audit["produced_by_actor"]) == {"actor-0", "actor-1"}
    assert audit["lost_steps"] == 0 and audit["duplicate_steps"] == 0, audit
    assert audit["pending_steps"] == 0 and summary["batches_unacked"] == 0, audit  # every step acknowledged


@pytest.mark.slow  # 50 s; the fast tier keeps the unit tests below (make test stays under its 15 minutes)
def test_runtime_ray_starts_its_own_instance_and_runs_the_same_config(tmp_path):
    """No address: a local Ray instance; simulated robots on this machine (loopback); the run is the local one's
    (same summary), and the summary says where each process ran."""
    proc = start_robolearn(["run", *fast_run_overrides("here", 0.3), "runtime=ray", "runtime.num_actors=2",
                            "runtime.num_cpus=2"], cwd=tmp_path)
    out, _ = proc.communicate(timeout=240)
    run = tmp_path / "runs" / "here"
    summary = json.loads((run / "summary.json").read_text())
    assert proc.returncode == 0 and summary["ok"], out
    assert "[runtime] Ray at" in out and "2 simulated, on this machine" in out
    where = summary["placement"]["processes"]
    assert set(where) == {"learner", "actor-0", "actor-1"} and all(w["state"] == "exited (0)" for w in where.values())
    assert where["learner"]["node_id"] == summary["placement"]["driver_node"]
    # an instance started by the run gives its workers niceness 0 itself (the hosts had nothing to lower)
    assert [(where[n]["nice_from_ray"], where[n]["nice"]) for n in ("actor-0", "actor-1", "learner")] == [(0, 0)] * 3
    assert all(a["env_steps"] > 0 for a in summary["actors"]) and not (run / "ray.json").exists()


@pytest.mark.slow  # a cluster of two nodes on 2 cores: about a minute
@pytest.mark.timeout(300)
def test_the_actors_of_a_node_with_two_robots_both_run_there_each_leasing_its_own(tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    pc = cluster.add_node(num_cpus=1, labels={TYPE_LABEL: "sim_so101"},
                          resources={robot_resource("sim-1"): 1, robot_resource("sim-2"): 1})
    cluster.wait_for_nodes()
    proc = start_robolearn(["run", *fast_run_overrides("pc", 1.0), "runtime=ray",
                            f"runtime.address={cluster.address}"], cwd=tmp_path)
    try:
        out, _ = proc.communicate(timeout=240)
        summary = json.loads((tmp_path / "runs" / "pc" / "summary.json").read_text())
        assert proc.returncode == 0 and summary["ok"], out
        assert "robots: sim-1 (" in out and "sim-2 (" in out, out
        where = summary["placement"]["processes"]
        assert where["actor-0"]["node_id"] == where["actor-1"]["node_id"] == pc.node_id, where
        assert where["learner"]["node_id"] == summary["placement"]["driver_node"] != pc.node_id
        assert sorted(a["robot_id"] for a in summary["actors"]) == ["sim-1", "sim-2"], summary["actors"]
        assert all(a["env_steps"] > 0 for a in summary["actors"])
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.shutdown()


# a Ray host's niceness rule, run in a child of this test (its "raylet", at niceness 0): the child first takes the
# niceness given (Ray's 15 above its raylet), then, with "unprivileged", gives up the right to lower it
_NICENESS_PROBE = """
import json, os, resource, sys
from robolearn.runtime.ray_hosts import _ordinary_priority  # imported first: another user may not read the files
os.setpriority(os.PRIO_PROCESS, 0, int(sys.argv[1]))
if sys.argv[2] == "unprivileged":
    resource.setrlimit(resource.RLIMIT_NICE, (0, 0))  # no lowering allowed by the limit ...
    if os.geteuid() == 0:
        os.setuid(65534)  # ... nor by being root (nobody)
print(json.dumps(_ordinary_priority()))
"""


def _probe_niceness(start: int, who: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _NICENESS_PROBE, str(start), who], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_ray_host_without_privilege_keeps_its_niceness_and_says_so():
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the probe's "raylet"
    assert _probe_niceness(15, "unprivileged") == {"nice_from_ray": 15, "nice": 15, "nice_of_raylet": 0}


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a niceness, or setting a negative one, needs root")
def test_a_ray_host_lowers_its_niceness_to_its_raylets_and_never_raises_it():
    assert _probe_niceness(15, "root") == {"nice_from_ray": 15, "nice": 0, "nice_of_raylet": 0}
    # a Ray run below 0 (real-time control) keeps it for the processes it starts
    assert _probe_niceness(-5, "root") == {"nice_from_ray": -5, "nice": -5, "nice_of_raylet": -5}


def test_runtime_ray_refuses_robot_pcs_joined_by_hand():
    from robolearn.runtime.ray_runtime import RayRuntimeConfig

    with pytest.raises(ValueError, match="robot PCs join as Ray nodes"):
        RayRuntimeConfig(remote_actors=1)


def test_robot_nodes_are_read_from_labels_and_a_label_without_its_resource_is_refused():
    from robolearn.config import ConfigError
    from robolearn.runtime.ray_runtime import robot_nodes

    def node(i, robot, kind="so101", alive=True, resource=True):
        return {"NodeID": f"n{i}", "Alive": alive, "NodeManagerAddress": f"10.0.0.{i}",
                "Labels": {ROBOT_LABEL: robot, TYPE_LABEL: kind},
                "Resources": {robot_resource(robot): 1.0} if resource else {}}

    nodes = [node(1, "arm-b"), node(2, "arm-a"), node(3, "arm-c", alive=False), node(4, "cam", kind="other"),
             {"NodeID": "head", "Alive": True, "NodeManagerAddress": "10.0.0.9", "Labels": {}, "Resources": {}}]
    assert [(n.robot_id, n.node_id) for n in robot_nodes("so101", nodes)] == [("arm-a", "n2"), ("arm-b", "n1")]
    with pytest.raises(ConfigError, match="has no resource 'robot:arm-d'"):
        robot_nodes("so101", [node(5, "arm-d", resource=False)])
    with pytest.raises(ConfigError, match="advertised by two nodes"):
        robot_nodes("so101", [node(1, "arm-a"), node(2, "arm-a")])


def test_a_node_with_several_simulated_robots_gets_an_actor_per_robot_pinned_by_its_resource():
    from robolearn.config import ConfigError
    from robolearn.runtime.ray_runtime import RayPlacement, robot_nodes

    several = {"NodeID": "pc", "Alive": True, "NodeManagerAddress": "10.0.0.5", "Labels": {TYPE_LABEL: "sim_so101"},
               "Resources": {"CPU": 4.0, robot_resource("sim-2"): 1.0, robot_resource("sim-1"): 1.0}}
    one = {"NodeID": "arm", "Alive": True, "NodeManagerAddress": "10.0.0.6",
           "Labels": {TYPE_LABEL: "sim_so101", ROBOT_LABEL: "sim-3"}, "Resources": {robot_resource("sim-3"): 1.0}}
    nodes = robot_nodes("sim_so101", [several, one])
    assert [(n.robot_id, n.node_id, n.labelled) for n in nodes] == [
        ("sim-1", "pc", False), ("sim-2", "pc", False), ("sim-3", "arm", True)]
    placement = RayPlacement.__new__(RayPlacement)  # its placement rules alone, no cluster
    placement.nodes, placement.driver_node = nodes, "ab" * 28  # a node id: 28 bytes in hex
    assert [placement.options(f"actor-{i}") for i in range(3)] == [
        {"label_selector": {TYPE_LABEL: "sim_so101"}, "resources": {robot_resource("sim-1"): 1}, "num_cpus": 0},
        {"label_selector": {TYPE_LABEL: "sim_so101"}, "resources": {robot_resource("sim-2"): 1}, "num_cpus": 0},
        {"label_selector": {ROBOT_LABEL: "sim-3"}, "resources": {robot_resource("sim-3"): 1}, "num_cpus": 0}]
    with pytest.raises(ConfigError, match=r"holds several so101 robots \(arm-1, arm-2\).*one serial port"):
        robot_nodes("so101", [{**several, "Labels": {TYPE_LABEL: "so101"}, "Resources": {
            robot_resource("arm-1"): 1.0, robot_resource("arm-2"): 1.0}}], ported=True)
    with pytest.raises(ConfigError, match="labels robot type 'sim_so101' but holds no robot"):
        robot_nodes("sim_so101", [{**several, "Resources": {"CPU": 4.0}}])


def test_a_node_on_another_machine_gets_the_learners_addresses_on_the_drivers_ip():
    from robolearn.runtime.ray_runtime import _readdress

    text = json.dumps({"transitions": "tcp://127.0.0.1:5001", "weights": "tcp://0.0.0.0:5002",
                       "gui": "tcp://10.1.2.3:5003", "next_episode_id": 7})
    assert json.loads(_readdress(text, "192.168.1.10")) == {
        "transitions": "tcp://192.168.1.10:5001", "weights": "tcp://192.168.1.10:5002",
        "gui": "tcp://10.1.2.3:5003", "next_episode_id": 7}
