"""One robolearn process on a Ray node: ``ProcessHost`` (the Ray actor that starts and watches it there) and
``RayProcess`` (the runtime's handle on it, the same interface as a local ``WorkerProcess``).

    driver (robolearn run runtime=ray)              node the scheduler chose (labels, resources)
    RayProcess(name, options) --creates-->          ProcessHost.__init__: [mirror the run directory's files]
                                                        -> WorkerProcess(name)  (python -m robolearn.runtime.worker)
    alive(): has ProcessHost.wait() returned?        wait(): the process's exit code, when it exits
             raised (the host was killed or its node left): dead
    status_text(): its status file, for a driver on another machine (copy_status)

The process is the same one a local run starts (the production actor loop, learner, policy server); Ray only
chooses its node. It dies with its host (``die_with_parent``), so a killed host leaves no orphan beside the one
the supervisor starts in its place. Only strings cross Ray's boundary (a name, a path, file contents): robolearn
data never travels through Ray's pickled calls, it stays on the zmq channels with their acknowledgements and keys.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from robolearn.logging.status import write_json_atomic
from robolearn.rundir import RunDir
from robolearn.runtime.supervisor import WorkerProcess

# files a node on another machine needs before the process starts: they are written there from the driver's
MIRRORED = ("config.yaml", "run_id", "endpoints.json", "resources.json", "policy_server.json", "gui.json")


def node_ip() -> str:
    """This node's IP as Ray knows it: what tells the driver's machine from another one."""
    import ray

    return ray.util.get_node_ip_address()


def _ordinary_priority() -> dict[str, int]:
    """Lower this thread's niceness to its raylet's (the Ray worker's parent) if it can, and say what it found, what
    it kept and what it aimed at: what a process it starts from this same thread inherits (on Linux a niceness
    belongs to a thread, and a fork copies the forking thread's). Ray starts its workers ``worker_niceness`` (15 by
    default) above the raylet: a robot's control loop started from one would yield the CPU to every ordinary process
    on its machine, Ray's own daemons included. It only ever lowers (a raylet run at a negative niceness for real-time
    control keeps it for its robots). Lowering needs privilege (root, or RLIMIT_NICE); without it the niceness stays,
    and the driver says so with the fix (``RAY_worker_niceness=0`` on that node's ``ray start``)."""
    found = os.getpriority(os.PRIO_PROCESS, 0)
    aim = min(found, os.getpriority(os.PRIO_PROCESS, os.getppid()))
    if found > aim:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, aim)
        except PermissionError:
            pass  # reported through where(): the driver names the node and the fix
    return {"nice_from_ray": found, "nice": os.getpriority(os.PRIO_PROCESS, 0), "nice_of_raylet": aim}


_warned_nodes: set[str] = set()  # the niceness warning is said once per node, not per process or restart


class ProcessHost:
    """The Ray actor (``ray.remote(max_concurrency=16)``: ``wait`` blocks while the others answer, and a ``wait``
    asked again after a moment of unreachability may still be blocking beside the new one)."""

    def __init__(self, name: str, run_root: str, driver_cwd: str, driver_ip: str, mirror: dict[str, str]) -> None:
        self.name = name
        self.remote = node_ip() != driver_ip  # another machine: its own disk, its own run directory
        if self.remote:  # ~/robolearn-runs/<run>-<run id>: its spool, ledger and logs stay there, as a joined robot
            # PC's do; named by the run's id, so another run of the same name never re-sends this one's spool
            self.run = RunDir(Path.home() / "robolearn-runs" / f"{Path(run_root).name}-{mirror['run_id'].strip()}")
            self.run.root.mkdir(parents=True, exist_ok=True)
            for file, text in mirror.items():
                (self.run.root / file).write_text(text)
        else:  # the driver's run directory, and its working directory (relative paths in the config, as locally)
            self.run = RunDir(Path(run_root))
        import ray

        self.gpus = [str(g) for g in ray.get_gpu_ids()]  # what Ray gave it (the learner: one, when it asks)
        if not self.gpus:  # Ray leaves CUDA_VISIBLE_DEVICES as it is for an actor given no GPU: the process sees
            os.environ["CUDA_VISIBLE_DEVICES"] = ""  # only the GPUs Ray gave it (learner.device=auto: the CPU)
        self.nice = _ordinary_priority()  # on this thread, just before the start: the process inherits it
        self.proc = WorkerProcess(name, self.run, die_with_parent=True, cwd=None if self.remote else driver_cwd)

    def where(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": node_ip(), "remote": self.remote,
                "pid": self.proc.pid, "gpus": self.gpus, **self.nice}

    def wait(self) -> int:
        return self.proc.popen.wait()

    def status_text(self) -> str | None:
        try:
            return self.run.status(self.name).read_text()
        except FileNotFoundError:
            return None

    def stop(self, timeout_s: float) -> int:
        return self.proc.stop(timeout_s)


class RayProcess:
    """A process placed by Ray (``options``: its label selector, resources, node affinity), as the supervisor and
    the runtime use a ``WorkerProcess``. Until its host is scheduled and has started it, it is alive with pid -1
    (a robot whose node left waits so, unscheduled, and is never started elsewhere)."""

    def __init__(self, name: str, run: RunDir, options: dict, driver_ip: str, mirror: dict[str, str]) -> None:
        import ray

        self.name, self.run = name, run
        host = ray.remote(max_concurrency=16)(ProcessHost)
        self.handle = host.options(max_restarts=0, **options).remote(
            name, str(run.root.resolve()), str(Path.cwd()), driver_ip, mirror)
        self._exit = self.handle.wait.remote()
        self._where_ref = self.handle.where.remote()
        self._where: dict | None = None
        self._code: int | None = None
        self.died_because = ""
        self.node_left = False  # it died because its node left the cluster (not a crash of its own)

    @property
    def where(self) -> dict | None:
        """Its node and pid once its host started it (None while it waits to be scheduled)."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        if self._where is None and ray.wait([self._where_ref], timeout=0)[0]:
            try:
                self._where = ray.get(self._where_ref)
                where = self._where
                if where["nice"] > where["nice_of_raylet"] and where["ip"] not in _warned_nodes:
                    _warned_nodes.add(where["ip"])
                    print(f"[runtime] {self.name} runs at niceness {where['nice']} on {where['ip']}, its raylet at "
                          f"{where['nice_of_raylet']} (Ray's worker_niceness, which its host could not lower): "
                          "every ordinary process there comes first. Start that node's Ray with "
                          "RAY_worker_niceness=0 ray start ...", file=sys.stderr, flush=True)
            except ActorUnavailableError:  # a moment of unreachability: ask again
                self._where_ref = self.handle.where.remote()
            except RayActorError:  # dead before it answered
                self._where = {}
        return self._where or None

    @property
    def pid(self) -> int:
        """Its pid on its node (-1 until known)."""
        return (self.where or {}).get("pid", -1)

    @property
    def elsewhere(self) -> bool:
        """On another machine (its pid means nothing here)."""
        return bool((self.where or {}).get("remote"))

    @property
    def returncode(self) -> int | None:
        return self._code

    def alive(self) -> bool:
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        if self._code is None and ray.wait([self._exit], timeout=0)[0]:
            try:
                self._code = ray.get(self._exit)
            except ActorUnavailableError:  # its node stopped answering, not (yet) declared dead: ask again; a
                self._exit = self.handle.wait.remote()  # node that is gone fails it with ActorDiedError
            except RayActorError as exc:  # its host was killed, or its node left the cluster
                self._code, self.died_because = -9, f"{type(exc).__name__}: {str(exc)[:2000]}"
                # its node left: Ray says so for a drained (preempted) node; otherwise the node it ran on is no
                # longer alive (Ray marks a node dead before it fails the actors on it). A host that died before
                # it said where it runs is counted as a crash.
                node = (self.where or {}).get("node_id")
                self.node_left = getattr(exc, "preempted", False) or (
                    bool(node) and not any(n["NodeID"] == node and n["Alive"] for n in ray.nodes()))
        return self._code is None

    def _started(self, timeout_s: float) -> bool:
        """Whether its host runs (waiting up to ``timeout_s`` for it to say so: one just scheduled gets its
        graceful stop too)."""
        import ray

        ray.wait([self._where_ref], timeout=timeout_s)
        return self.where is not None

    def copy_status(self) -> None:
        """Its status file, from another machine's disk into the driver's run directory (the live line and the
        summary read it there)."""
        if self.where and self.where.get("remote"):
            text = self.status_text()
            if text:
                write_json_atomic(self.run.status(self.name), json.loads(text))

    def status_text(self, timeout_s: float = 2.0) -> str | None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(self.handle.status_text.remote(), timeout=timeout_s)
        except (GetTimeoutError, RayActorError):
            return None

    def stop(self, timeout_s: float) -> int:
        """SIGTERM through its host (it drains and exits as locally), its last status copied here when it ran on
        another machine, then the host is killed (one still waiting to be scheduled is cancelled)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        if self.alive() and self._started(timeout_s=5.0):
            try:
                self._code = ray.get(self.handle.stop.remote(timeout_s), timeout=timeout_s + 10)
            except (GetTimeoutError, RayActorError) as exc:
                self._code, self.died_because = -9, type(exc).__name__
            self.copy_status()
        ray.kill(self.handle, no_restart=True)
        if self._code is None:
            self._code = -15  # never started: stopped while it waited for its node
        return self._code

    def release(self) -> None:
        """It exited (its log is on its node, in the run directory's logs/ there): its host goes too, now, so the
        resources it held (a robot's, the learner's GPU) are free for the process started in its place."""
        import ray

        ray.kill(self.handle, no_restart=True)
