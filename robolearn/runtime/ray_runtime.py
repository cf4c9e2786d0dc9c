"""``runtime=ray``: the same run (task, robot, policy, algorithm) with its processes placed on a Ray cluster.

    robolearn run ... runtime=ray [runtime.address=HOST:PORT]   (no address: a local Ray instance is started)

    connect to Ray -> the robots: the robot:<id> resources of nodes labelled robolearn/robot-type=<the run's robot
    type> (a simulator with no such node: runtime.num_actors of them, on this machine, or anywhere when the run is off
    loopback with keys) -> the local runtime's sequence
    (``runtime.local``: learner, policy server, one actor per robot, supervision, summary), each process started
    on its node by a Ray actor (``runtime.ray_hosts``):
        learner, policy server, GUI   the driver's node (this machine: the buffer and checkpoints are on its disk);
                                      the learner asks Ray for one GPU (num_gpus=1) when learner.device is auto or
                                      cuda and this node has one, none with learner.device=cpu or no GPU here
        actor for robot X             the node holding the custom resource robot:X (one actor per robot), chosen
                                      by label selector (robolearn/robot=X when the node labels X, else the
                                      robot type); never anywhere else
A robot PC joins the cluster with

    ray start --address=WORKSTATION:6379 --labels="robolearn/robot=arm-1,robolearn/robot-type=so101" \
              --resources='{"robot:arm-1": 1}'

and a PC with several (simulated) robots with one resource per robot and the type label alone:
``--labels="robolearn/robot-type=sim_so101" --resources='{"robot:sim-1": 1, "robot:sim-2": 1}'``. Several real
arms on one node would need a serial port per robot, which the robot config does not have: refused by name.

The lease manager on the driver stays the authority on who holds a robot: each actor leases the robot of its node
by name. A process that dies is started again by the supervisor (the same restart budget and back-off as a local
run), placed by Ray by the same rules: an actor goes back to its robot's node and leases that robot again. A node
that leaves takes its robots with it: they turn unhealthy in the lease manager (``robolearn resources``), their
actors wait unscheduled until the node is back, and the rest of the run goes on. ``robolearn cluster RUN_DIR``
shows the nodes, their robots and labels, the leases and where each process runs (``placement.json``).

Data plane: transitions and weights stay on the run's zmq channels (acknowledged, CurveZMQ off loopback);
docs/architecture.md says why. Ray carries only strings (names, paths, the files a node on another machine
needs); robolearn never puts its data in Ray's pickled calls or object store.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, replace

from robolearn.builders import robot_type
from robolearn.config import ConfigError, RunConfig, load_run_config, to_yaml
from robolearn.hardware.resources import Resource
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.rundir import RunDir
from robolearn.runtime.local import LocalPlacement, LocalRuntimeConfig, run_local
from robolearn.runtime.ray_hosts import MIRRORED, RayProcess
from robolearn.runtime.supervisor import write_pids
from robolearn.transport.sockets import is_loopback

ROBOT_LABEL = "robolearn/robot"        # node label: the robot's id (a node with one robot)
TYPE_LABEL = "robolearn/robot-type"    # node label: its robot type (the run's robot config's type)
ROBOT_RESOURCE = "robot:"              # custom resource prefix: robot:<id>, one per robot a node holds
DRIVER_PROCESSES = ("learner", "policy-server", "gui")


def robot_resource(robot_id: str) -> str:
    """The custom resource a robot PC's node holds one of, per robot: one actor per robot."""
    return f"{ROBOT_RESOURCE}{robot_id}"


def robots_held(node: dict) -> list[str]:
    """The robot ids a node (of ``ray.nodes()``) holds a ``robot:<id>`` resource for."""
    return sorted(r.removeprefix(ROBOT_RESOURCE) for r, amount in (node.get("Resources") or {}).items()
                  if r.startswith(ROBOT_RESOURCE) and amount >= 1)


@dataclass
class RayRuntimeConfig(LocalRuntimeConfig):
    """``runtime=ray``: every ``runtime=local`` option, plus where the cluster is."""

    name: str = "ray"
    address: str | None = None          # a running cluster (HOST:PORT of its head, or auto); None: start one here
    num_cpus: int | None = None         # a Ray instance started here: its CPUs (None: all of this machine's)
    robot_keys_dir: str | None = None   # robot PCs on other machines: their CurveZMQ client folder (same path on
                                        # each; runtime.keys_dir is the server folder here)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.remote_actors:
            raise ValueError("runtime=ray: robot PCs join as Ray nodes (ray start --labels ...), not with robolearn "
                             "join; set runtime.remote_actors=0")
        if self.num_cpus is not None and self.num_cpus < 1:
            raise ValueError(f"runtime.num_cpus must be >= 1 or null, got {self.num_cpus}")


@dataclass(frozen=True)
class RobotNode:
    robot_id: str
    type: str
    node_id: str
    address: str      # the node's IP
    labelled: bool    # the node's robolearn/robot label names this robot (a node with one robot)


def robot_nodes(kind: str, nodes: list[dict] | None = None, ported: bool = False) -> list[RobotNode]:
    """The robots of type ``kind`` that live nodes (of ``ray.nodes()``) advertise: a node labelled with the type
    holds one ``robot:<id>`` resource per robot, and may label its one robot ``robolearn/robot=<id>``. ConfigError
    for a label without its resource, a typed node with no robot resource, a robot id on two nodes, and (``ported``:
    the robot config opens a serial port) several robots on one node."""
    import ray

    found: dict[str, RobotNode] = {}
    for node in ray.nodes() if nodes is None else nodes:
        labels = node.get("Labels") or {}
        if not node.get("Alive") or labels.get(TYPE_LABEL) != kind:
            continue
        held, where = robots_held(node), node["NodeManagerAddress"]
        label = labels.get(ROBOT_LABEL)
        if label is not None and label not in held:
            need = robot_resource(label)
            raise ConfigError(f"the node at {where} labels robot {label!r} but has no resource {need!r}: start it "
                              f"with --resources='{{\"{need}\": 1}}'")
        if not held:
            raise ConfigError(f"the node at {where} labels robot type {kind!r} but holds no robot: start it with "
                              f"--resources='{{\"{robot_resource('<id>')}\": 1}}', one per robot")
        if ported and len(held) > 1:
            raise ConfigError(f"the node at {where} holds several {kind} robots ({', '.join(held)}), but the robot "
                              f"config has one serial port (robot.port): one real robot per node")
        for robot in held:
            if robot in found:
                raise ConfigError(f"robot {robot!r} is advertised by two nodes ({found[robot].address} and {where}): "
                                  "give each robot its own id")
            found[robot] = RobotNode(robot, kind, node["NodeID"], where, labelled=label == robot)
    return sorted(found.values(), key=lambda n: n.robot_id)


def learner_gpus(device: str, driver_gpus: float) -> int:
    """The GPUs the learner asks Ray for on the driver's node (``driver_gpus`` of them there): one when
    ``learner.device`` may use CUDA and the node has a GPU. ConfigError for a CUDA device the node does not have, and
    for cuda:N with N > 0 (Ray makes the one GPU it gives the learner its cuda:0)."""
    if device == "cpu":
        return 0
    if device.startswith("cuda:") and device != "cuda:0":
        raise ConfigError(f"runtime=ray: learner.device={device}: Ray gives the learner one GPU, which it sees as "
                          "cuda:0; set learner.device=cuda (Ray picks which of the node's GPUs)")
    if driver_gpus >= 1:
        return 1
    if device == "auto":
        return 0
    raise ConfigError(f"runtime=ray: learner.device={device}, but Ray's node on this machine (where the learner runs, "
                      "beside the buffer) has no GPU resource; start Ray with --num-gpus=1 here, or set "
                      "learner.device=auto or cpu")


class RayPlacement(LocalPlacement):
    """Each process on its node, by the rules of the module docstring."""

    def __init__(self, cfg: RunConfig) -> None:
        import ray

        self.cfg = cfg
        context = ray.get_runtime_context()
        self.driver_node, self.driver_ip = context.get_node_id(), ray.util.get_node_ip_address()
        self.kind = robot_type(cfg)
        self.ported = getattr(cfg.robot, "port", None) is not None
        self.nodes = robot_nodes(self.kind, ported=self.ported)
        if not self.nodes and self.ported:
            raise ConfigError(f"runtime=ray: no live Ray node advertises a robot of type {self.kind!r}; on each robot "
                              f"PC: ray start --address=... --labels=\"{ROBOT_LABEL}=<id>,{TYPE_LABEL}={self.kind}\" "
                              f"--resources='{{\"robot:<id>\": 1}}'")
        self.elsewhere = [n for n in self.nodes if n.address != self.driver_ip]
        # off loopback with keys: processes may run on other machines (robots there; simulators anywhere)
        self.off_loopback = not is_loopback(cfg.runtime.host) and cfg.runtime.robot_keys_dir is not None
        if self.elsewhere and not self.off_loopback:
            raise ConfigError(f"runtime=ray: robots on other machines ({', '.join(n.robot_id for n in self.elsewhere)})"
                              " reach the learner off loopback: set runtime.host, runtime.keys_dir (the server "
                              "folder here) and runtime.robot_keys_dir (the client folder on the robot PCs)")
        if self.elsewhere and os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled":
            raise ConfigError("runtime=ray: robots on other machines, and Ray's token authentication is off "
                              "(RAY_AUTH_MODE=disabled): Ray's own calls between nodes are pickled, so only nodes "
                              "holding the cluster's token may join it; unset RAY_AUTH_MODE")
        self._available = {n.robot_id: n for n in self.nodes}  # refreshed by sync(), on the driver's thread
        driver = next(n for n in ray.nodes() if n["NodeID"] == self.driver_node)
        self.learner_gpus = learner_gpus(cfg.learner.device, (driver.get("Resources") or {}).get("GPU", 0))
        self._synced = 0.0

    # --- what the lease manager hands out ------------------------------------------------------------------
    def robots(self, cfg: RunConfig, kind: str) -> list[Resource]:
        if not self.nodes:
            return super().robots(cfg, kind)
        return [Resource(n.robot_id, "robot", kind, probe=lambda n=n: n.robot_id in self._available)
                for n in self.nodes]

    def assigned(self) -> dict[str, str]:
        return {f"actor-{i}": n.robot_id for i, n in enumerate(self.nodes)}

    def _refresh_robots(self) -> None:
        """Which robots a live node advertises now (a node that left and came back is a new node with the same
        labels). The lease manager's health probe reads the result (it never calls Ray under its lock)."""
        import ray

        try:
            self._available = {n.robot_id: n for n in robot_nodes(self.kind, ray.nodes(), self.ported)}
        except ConfigError as exc:  # a misconfigured node joined meanwhile: said, and the last good view kept
            print(f"[runtime] {exc}", file=sys.stderr, flush=True)

    # --- where each process starts ---------------------------------------------------------------------------
    def options(self, name: str) -> dict:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        on_driver = {"scheduling_strategy": NodeAffinitySchedulingStrategy(self.driver_node, soft=False),
                     "num_cpus": 0}
        if name == "learner":
            return {**on_driver, "num_gpus": self.learner_gpus}  # Ray sets its CUDA_VISIBLE_DEVICES
        if name in DRIVER_PROCESSES:
            return on_driver
        if not self.nodes:  # simulators: anywhere when off loopback with keys, else on this machine
            return {"num_cpus": 0} if self.off_loopback else on_driver
        node = self.nodes[int(name.removeprefix("actor-"))]
        # the resource pins the node (and one actor per robot); the label selector says which kind of node it is
        selector = {ROBOT_LABEL: node.robot_id} if node.labelled else {TYPE_LABEL: node.type}
        return {"label_selector": selector, "resources": {robot_resource(node.robot_id): 1}, "num_cpus": 0}

    def spare(self, run: RunDir) -> None:
        """None: a spare actor is not kept on a Ray cluster (one would be needed on each robot's node, placed by
        its labels; not built), so a dead actor's replacement starts cold there."""
        return None

    def spawn(self, name: str, run: RunDir) -> RayProcess:
        if name.startswith("actor-") and self.cfg.runtime.policy_server and self.off_loopback:
            self._wait_for(run.policy_server, "the policy server")  # a node elsewhere gets its address mirrored
        return RayProcess(name, run, self.options(name), self.driver_ip, self.mirror(run))

    def _wait_for(self, path, what: str) -> None:
        deadline = time.monotonic() + self.cfg.runtime.startup_timeout_s
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start within {self.cfg.runtime.startup_timeout_s:.0f} s")
            time.sleep(0.1)

    def mirror(self, run: RunDir) -> dict[str, str]:
        """The run directory's files as a node on another machine needs them: the robot PCs' client keys, and the
        learner's addresses on this machine's IP (a process on this machine never reads these)."""
        out = {f: (run.root / f).read_text() for f in MIRRORED if (run.root / f).exists()}
        from omegaconf import OmegaConf

        config = OmegaConf.to_container(OmegaConf.create(out["config.yaml"]))
        config["runtime"]["keys_dir"] = self.cfg.runtime.robot_keys_dir
        config["runtime"]["joined"] = f"ray://{self.driver_ip}"  # a client keys folder is then what it should hold
        out["config.yaml"] = OmegaConf.to_yaml(OmegaConf.create(config))
        for file in ("endpoints.json", "resources.json", "policy_server.json", "gui.json"):
            if file in out:
                out[file] = _readdress(out[file], self.driver_ip)
        return out

    # --- what the driver shows ---------------------------------------------------------------------------------
    def sync(self, run: RunDir, procs: dict) -> None:
        """Once a second: which robots are available, the status files of processes on other machines copied here
        (the live line and the summary read them; all asked at once, for at most a second), placement.json
        (robolearn cluster) and pids.json."""
        import ray
        from ray.exceptions import RayActorError

        if time.monotonic() - self._synced < 1.0:
            return
        self._synced = time.monotonic()
        self._refresh_robots()
        asked = {p.handle.status_text.remote(): name for name, p in procs.items()
                 if isinstance(p, RayProcess) and p.elsewhere and p.alive()}
        ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=1.0) if asked else ([], [])
        for ref in ready:
            try:
                text = ray.get(ref)
            except RayActorError:  # it died meanwhile: the supervisor sees it
                continue
            if text:
                write_json_atomic(run.status(asked[ref]), json.loads(text))
        write_json_atomic(run.root / "placement.json", self.describe(procs))
        write_pids(run, procs)

    def describe(self, procs: dict) -> dict:
        processes = {}
        for name, proc in procs.items():
            where = proc.where if isinstance(proc, RayProcess) else None
            why = proc.died_because.split(":")[0] if getattr(proc, "died_because", "") else ""
            state = ("running" if proc.alive() and where else "waiting for its node" if proc.alive()
                     else f"exited ({proc.returncode}{', ' + why if why else ''})")
            processes[name] = {"state": state, **(where or {})}
        return {"driver_node": self.driver_node, "processes": processes,
                "robots": [{"robot_id": n.robot_id, "available": now is not None,
                            **({"node_id": now.node_id, "address": now.address} if now else {})}
                           for n in self.nodes for now in [self._available.get(n.robot_id)]]}


def _readdress(text: str, ip: str) -> str:
    """Endpoints in a rendezvous file bound on loopback or every interface, as another machine reaches them."""
    data = json.loads(text)
    for key, value in data.items():
        if isinstance(value, str) and value.startswith("tcp://"):
            host = value[len("tcp://"):].rsplit(":", 1)[0]
            if is_loopback(host) or host in ("0.0.0.0", "*"):
                data[key] = value.replace(host, ip, 1)
    return json.dumps(data)


def run_ray(cfg: RunConfig, run: RunDir) -> dict:
    """Connect to (or start) Ray, place the run's processes on its nodes, run as the local runtime does."""
    import ray

    runtime: RayRuntimeConfig = cfg.runtime
    # an instance started here runs its workers at niceness 0, not Ray's 15: the processes they host inherit it
    # (ray_hosts._ordinary_priority lowers it where it may, on a cluster another started)
    started = {"num_cpus": runtime.num_cpus, "_system_config": {"worker_niceness": 0}} if runtime.address is None \
        else {}
    # no address: a new instance here ("local"), never one RAY_ADDRESS or an earlier ray start points at
    ray.init(address=runtime.address or "local", include_dashboard=False, log_to_driver=False,
             configure_logging=False, namespace="robolearn", **started)
    try:
        placement = RayPlacement(cfg)
        if placement.nodes and len(placement.nodes) != runtime.num_actors:  # one actor per robot found
            run.config.write_text(to_yaml(replace(cfg, runtime=replace(runtime, num_actors=len(placement.nodes)))))
            cfg = load_run_config(run.config)  # checked again: e.g. a terminal's person drives one robot only
        robots = ", ".join(f"{n.robot_id} ({n.address})" for n in placement.nodes) or \
            f"{cfg.runtime.num_actors} simulated, {'anywhere' if placement.off_loopback else 'on this machine'}"
        print(f"[runtime] Ray at {ray.get_runtime_context().gcs_address}; robots: {robots}", flush=True)
        write_json_atomic(run.root / "ray.json", {"address": ray.get_runtime_context().gcs_address})
        return run_local(cfg, run, placement)
    finally:
        (run.root / "ray.json").unlink(missing_ok=True)
        ray.shutdown()


def placement_of(run: RunDir) -> dict | None:
    """What the driver last wrote about where each process runs (robolearn cluster)."""
    return read_json(run.root / "placement.json")
