"""One robolearn process on a Ray node: ``ProcessHost`` (the Ray actor that starts and watches it there) and
``RayProcess`` (the runtime's handle on it, the same interface as a local ``WorkerProcess``).

    driver (robolearn run runtime=ray)              node the scheduler chose (labels, resources)
    RayProcess(name, options) --creates-->          ProcessHost.__init__: [mirror the run directory's files]
                                                        -> WorkerProcess(name)  (python -m robolearn.runtime.worker)
    alive(): has ProcessHost.wait() returned?        wait(): the process's exit code, when it exits
             raised (the host was killed or its node left): dead
    status_text(): its status file, for a driver on another machine

The process is the same one a local run starts (the production actor loop, learner, policy server); Ray only
chooses its node. It dies with its host (``die_with_parent``), so a killed host leaves no orphan beside the one
the supervisor starts in its place. Only strings cross Ray's boundary (a name, a path, file contents): robolearn
data never travels through Ray's pickled calls, it stays on the zmq channels with their acknowledgements and keys.
"""

from __future__ import annotations

import socket
from pathlib import Path

from robolearn.rundir import RunDir
from robolearn.runtime.supervisor import WorkerProcess

# files a node on another machine needs before the process starts: they are written there from the driver's
MIRRORED = ("config.yaml", "run_id", "endpoints.json", "resources.json", "policy_server.json")


class ProcessHost:
    """The Ray actor (``ray.remote(max_concurrency=4)``: ``wait`` blocks while the others answer)."""

    def __init__(self, name: str, run_root: str, driver_host: str, mirror: dict[str, str]) -> None:
        self.run = RunDir(Path(run_root))
        self.name = name
        self.remote = socket.gethostname() != driver_host  # another machine: its own disk
        if self.remote:
            self.run.root.mkdir(parents=True, exist_ok=True)
            for file, text in mirror.items():
                (self.run.root / file).write_text(text)
        self.proc = WorkerProcess(name, self.run, die_with_parent=True)

    def where(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
                "pid": self.proc.pid}

    def wait(self) -> int:
        return self.proc.popen.wait()

    def status_text(self) -> str | None:
        try:
            return self.run.status(self.name).read_text()
        except FileNotFoundError:
            return None

    def stop(self, timeout_s: float) -> int:
        return self.proc.stop(timeout_s)

    def terminate(self) -> None:
        self.proc.terminate()


class RayProcess:
    """A process placed by Ray (``options``: its label selector, resources, node affinity), as the supervisor and
    the runtime use a ``WorkerProcess``. Until its host is scheduled and has started it, it is alive with pid -1
    (a robot whose node left waits so, unscheduled, and is never started elsewhere)."""

    def __init__(self, name: str, run: RunDir, options: dict, driver_host: str, mirror: dict[str, str]) -> None:
        import ray

        self.name, self.run = name, run
        host = ray.remote(max_concurrency=4)(ProcessHost)
        self.handle = host.options(max_restarts=0, **options).remote(
            name, str(run.root.resolve()), driver_host, mirror)
        self._exit = self.handle.wait.remote()
        self._where_ref = self.handle.where.remote()
        self._where: dict | None = None
        self._code: int | None = None
        self.died_because = ""

    @property
    def where(self) -> dict | None:
        """Its node and pid once its host started it (None while it waits to be scheduled)."""
        import ray
        from ray.exceptions import RayActorError

        if self._where is None and ray.wait([self._where_ref], timeout=0)[0]:
            try:
                self._where = ray.get(self._where_ref)
            except RayActorError:
                self._where = {}
        return self._where or None

    @property
    def pid(self) -> int:
        return (self.where or {}).get("pid", -1)

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
        return self._code is None

    def status_text(self, timeout_s: float = 2.0) -> str | None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            return ray.get(self.handle.status_text.remote(), timeout=timeout_s)
        except (GetTimeoutError, RayActorError):
            return None

    def terminate(self) -> None:
        self.handle.terminate.remote()

    def stop(self, timeout_s: float) -> int:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        if self.alive() and self.where is not None:
            try:
                self._code = ray.get(self.handle.stop.remote(timeout_s), timeout=timeout_s + 10)
            except (GetTimeoutError, RayActorError) as exc:
                self._code, self.died_because = -9, type(exc).__name__
        ray.kill(self.handle, no_restart=True)  # a host still waiting to be scheduled is cancelled
        if self._code is None:
            self._code = -15  # never started: stopped while it waited for its node
        return self._code

    def close_log(self) -> None:
        """Its log is on its node (the run directory's logs/ there)."""
