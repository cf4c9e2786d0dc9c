"""Worker processes and their supervision: what restarts a dead learner, policy server or actor, shared by the
local runtime (``runtime.local``) and a robot PC's ``robolearn join``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from robolearn.hardware.resources import LeaseManager
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.rundir import RunDir

if TYPE_CHECKING:
    from robolearn.runtime.local import LocalRuntimeConfig


def install_stop_signals() -> list[str]:
    """Ctrl-C (SIGINT) or SIGTERM stop the run gracefully. Installed explicitly: a process started in
    the background by a non-interactive shell inherits SIGINT as ignored, and would never stop."""
    received: list[str] = []

    def handler(signum, frame) -> None:  # noqa: ARG001
        received.append("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return received


def worker_args(name: str, run: RunDir) -> list[str]:
    """The ``python -m`` arguments of process ``name``: learner, policy-server, actor-<i>, spare-actor
    (``robolearn.runtime.worker``) or gui (``robolearn.apps.gui``, the page: named, not imported, as it sits above
    the runtime)."""
    if name == "gui":
        return ["robolearn.apps.gui", str(run.root)]
    if name.startswith("actor-"):
        return ["robolearn.runtime.worker", "actor", str(run.root), name.removeprefix("actor-")]
    if name == "spare-actor":
        return ["robolearn.runtime.worker", "spare-actor", str(run.root)]
    return ["robolearn.runtime.worker", name, str(run.root)]


class WorkerProcess:
    """One worker process (``worker_args``), its output appended to its log in the run directory."""

    def __init__(self, name: str, run: RunDir, die_with_parent: bool = False, cwd: str | None = None,
                 stdin: int | None = None) -> None:
        """``die_with_parent``: the kernel SIGKILLs it when the process that started it dies (Linux), as a crash
        of its own: the Ray runtime's host of it is killed or its node leaves, and no orphan goes on beside the
        one started in its place (what it journaled is recovered by that one, as after any crash). ``cwd``: where
        it runs (default: here). ``stdin``: ``subprocess.PIPE`` for a spare actor, told its index there."""
        self.name = name
        args = worker_args(name, run)
        run.log(name).parent.mkdir(parents=True, exist_ok=True)
        self.log = open(run.log(name), "a")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # own session: a terminal's Ctrl-C reaches only the runtime, which then stops us in order
        self.popen = subprocess.Popen([sys.executable, "-m", *args], stdout=self.log, stderr=subprocess.STDOUT,
                                      stdin=stdin, env=env, start_new_session=True, cwd=cwd,
                                      preexec_fn=_die_with_parent(os.getpid()) if die_with_parent else None)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def alive(self) -> bool:
        return self.popen.poll() is None

    def terminate(self) -> None:
        """SIGTERM: it stops as on Ctrl-C (an actor drains its spool); the supervisor starts it again."""
        self.popen.terminate()

    def release(self) -> None:
        """It exited: close its log (the supervisor starts another in its place)."""
        self.log.close()

    def stop(self, timeout_s: float) -> int:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                print(f"[runtime] {self.name} did not stop in {timeout_s:.0f} s; killing it", file=sys.stderr)
                self.popen.kill()
                self.popen.wait()
        self.log.close()
        return self.popen.returncode


class SpareActor(WorkerProcess):
    """An actor process started before it is needed (``runtime.spare_actors``). Most of an actor's start-up is
    imports (torch, MuJoCo, rerun, hydra: 6-7 s of a worker's start on an idle 2-core machine, 9+ s on a busy
    one); a spare has done them and waits, holding no robot and no socket, until the supervisor writes the index
    of the actor whose place it takes to its stdin. From then on it is that actor: it writes that actor's log,
    loads the run's config and starts as a new actor process would (leases a robot, recovers its predecessor's
    journal and spool). It exits when its stdin closes unused (the runtime stopped or died)."""

    def __init__(self, run: RunDir) -> None:
        super().__init__("spare-actor", run, stdin=subprocess.PIPE)

    def become(self, name: str) -> bool:
        """Take the place of ``name`` (``actor-<i>``); False if this process died meanwhile (start one cold)."""
        if not self.alive():
            return False
        try:
            self.popen.stdin.write(f"{name.removeprefix('actor-')}\n".encode())
            self.popen.stdin.close()
        except BrokenPipeError:  # it died between the check and the write
            return False
        self.name = name
        return True

    def _close_stdin(self) -> None:
        """An unused spare reads end-of-file and exits."""
        try:
            self.popen.stdin.close()
        except BrokenPipeError:  # what was left to flush had no reader: it is gone already
            pass

    def release(self) -> None:
        self._close_stdin()
        super().release()

    def stop(self, timeout_s: float) -> int:
        self._close_stdin()
        return super().stop(timeout_s)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """What the child runs before exec: prctl(PR_SET_PDEATHSIG, SIGKILL), looked up here, before the fork (no
    dlopen in the child of a threaded parent); a parent already gone by then is caught by the pid check."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def set_death_signal() -> None:
        if prctl(1, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os._exit(1)

    return set_death_signal


def write_pids(run: RunDir, procs: dict) -> None:
    """``pids.json``: the processes' pids where they are known and on this machine (a process the Ray runtime
    placed elsewhere, or not started yet, has none to signal here)."""
    write_json_atomic(run.root / "pids.json", {k: p.pid for k, p in procs.items()
                                               if p.pid > 0 and not getattr(p, "elsewhere", False)})


def tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return ""


# counts a learner keeps from its start; the summary adds those of the learners before a restart
LEARNER_COUNTERS = ("rejected_messages", "duplicate_batches", "out_of_order_batches", "cut_episodes")


class Supervisor:
    """Restarts a dead process, each with bounded retries and back-off, and logs each restart.

    An actor: its lease is freed at once (not after the ttl), then a new actor process with the same index
    re-leases a robot, turns what its predecessor journaled into a batch and re-sends its spool. The learner:
    a new one starts from the last checkpoint and the whole buffer log, on the same ports (the actors'
    sockets reconnect by themselves); meanwhile a simulated robot holds still (it waits for the learner's
    status) and a real one goes on with the weights it has, spooling everything. The policy server: a new one
    starts from the last checkpoint on the same port; meanwhile the actors' requests go unanswered and their
    robots hold (stalls), and each request lost is asked again. A restart is ready when the new process is
    acting (its first step) or, for the learner and the server, listening again; ``restarts`` says when."""

    def __init__(self, run: RunDir, procs: dict, leases: LeaseManager, runtime: LocalRuntimeConfig,
                 spawn: Callable[[str, RunDir], WorkerProcess] | None = None,
                 spare: Callable[[RunDir], SpareActor | None] | None = None) -> None:
        """``spawn(name, run)``: starts a process again (default: a ``WorkerProcess`` on this machine; the Ray
        runtime's places it on its node). ``spare(run)``: starts a spare actor; ``runtime.spare_actors`` of them
        are kept waiting from the time every actor first acts, a dead actor's place goes to the oldest, and another
        is started at once. None (or a ``spare`` that returns None): none."""
        self.run, self.procs, self.leases, self.runtime = run, procs, leases, runtime
        self.spawn = spawn or WorkerProcess
        self._start_spare = spare
        self._spares: list[SpareActor] = []  # oldest first
        self._spares_on = False  # every actor has acted once: spares are kept from then on
        self.restarts: list[dict] = []  # one entry per restart, for the summary
        self.learner_counted: dict[int, dict[str, int]] = {}  # pid -> LEARNER_COUNTERS of each learner that died
        self._due: dict[str, float] = {}  # process -> when its restart starts
        self._waiting: dict[str, tuple[dict, float]] = {}  # restarted process -> (its entry, when it died)
        self._ready_pids: set[int] = set()  # processes that got as far as acting (or, the learner, listening)
        self._unready_deaths: dict[str, int] = {}  # process -> deaths in a row before it was ready (a crash loop)
        self._deaths: dict[str, list[float]] = {}  # process -> when it died, within the restart window

    def _allowed(self, name: str) -> int:
        return getattr(self.runtime, self._limit_key(name))

    @staticmethod
    def _limit_key(name: str) -> str:
        return {"learner": "learner_restarts", "policy-server": "server_restarts",
                "gui": "gui_restarts"}.get(name, "actor_restarts")

    def check(self, elapsed_s: float) -> str:
        """Handle dead processes; returns a failure message when the run cannot go on."""
        now = time.monotonic()
        runtime = self.runtime
        for name, proc in list(self.procs.items()):
            if proc.alive() or name in self._due:
                continue
            code = proc.returncode
            # a Ray host whose node left the cluster: its robot went with it, nothing of the process failed, so
            # it counts against no restart budget (a robot PC that reboots five times never ends the run) and
            # its replacement starts at once, waiting unscheduled until a node with that robot is back
            node_left = getattr(proc, "node_left", False)
            recent = [t for t in self._deaths.get(name, []) if now - t < runtime.restart_window_s]
            self._deaths[name] = recent = recent if node_left else recent + [now]
            if len(recent) > self._allowed(name):
                return (f"{name} exited unexpectedly (code {code}), its restart {len(recent)} within "
                        f"{runtime.restart_window_s:.0f} s (runtime.{self._limit_key(name)}="
                        f"{self._allowed(name)})")
            # killed once it was working (a crash, an OOM kill): back at once; dying again and again before it
            # gets going is a crash loop (a missing device, a bad config): wait 1, 3, 7, ... x backoff
            delay = 0.0  # a node leaving neither adds to a crash loop nor ends one
            if not node_left:
                looping = proc.pid not in self._ready_pids and not self._ready(name, proc)
                streak = self._unready_deaths[name] = self._unready_deaths.get(name, 0) + 1 if looping else 0
                delay = runtime.restart_backoff_s * (2 ** max(streak - 1, 0) - 1)
            if name == "learner":  # its counters start again at 0: the summary adds those of its last status
                last = read_json(self.run.status("learner")) or {}
                if last.get("pid") == proc.pid:  # (a learner that died before writing one counted nothing)
                    self.learner_counted[proc.pid] = {key: last.get(key, 0) for key in LEARNER_COUNTERS}
            if name.startswith("actor-"):
                what = f"freed {', '.join(self.leases.release_holder(name)) or 'no lease'}"
            elif name == "gui":
                what = "on the same ports (the robots act on meanwhile; the page reconnects)"
            else:
                what = "from its last checkpoint"
            counted = ("its node left: not counted" if node_left
                       else f"{len(recent)}/{self._allowed(name)} within {runtime.restart_window_s:.0f} s")
            print(f"[runtime] {name} exited (code {code}); restarting {what} in {delay:.1f} s ({counted})",
                  file=sys.stderr, flush=True)
            proc.release()  # its log (and a Ray host, with the resources it held)
            self._due[name] = now + delay
            entry = {"process": name, "exit_code": code, "at_s": round(elapsed_s, 2), "ready_after_s": None}
            if getattr(proc, "died_because", ""):  # a Ray host: why Ray says it died (killed, its node left)
                entry["error"] = proc.died_because
            if node_left:
                entry["node_left"] = True
            self.restarts.append(entry)
            self._waiting[name] = (entry, now)
        for name, at in list(self._due.items()):
            if now >= at:
                del self._due[name]
                spare = self._take_spare(name)
                if name.startswith("actor-") and name in self._waiting:
                    self._waiting[name][0]["from_spare"] = spare is not None
                self.procs[name] = spare or self.spawn(name, self.run)
                self._write_pids()
        for name, proc in self.procs.items():
            if name not in self._due and proc.pid not in self._ready_pids and self._ready(name, proc):
                self._ready_pids.add(proc.pid)
        for name, (entry, died) in list(self._waiting.items()):
            if name not in self._due and self.procs[name].pid in self._ready_pids:
                entry["ready_after_s"] = round(now - died, 2)
                del self._waiting[name]
                print(f"[runtime] {name} is back {entry['ready_after_s']:.1f} s after it exited", flush=True)
        self._keep_spares()
        return ""

    def close(self, timeout_s: float) -> None:
        """Stop the spare actors that wait."""
        self._drop_spares(timeout_s)

    def _take_spare(self, name: str) -> SpareActor | None:
        """The oldest waiting spare (the furthest through its imports), now actor ``name``; None when there is
        none (or it died: then spares stop)."""
        if not self._spares or not name.startswith("actor-"):
            return None
        spare = self._spares.pop(0)
        if not spare.become(name):
            self._spares_failed(f"a spare actor (pid {spare.pid}) had exited (code {spare.popen.wait()}) when "
                                f"{name}'s place was to go to it", spare)
            return None
        print(f"[runtime] {name}: a spare actor (pid {spare.pid}) takes its place", file=sys.stderr, flush=True)
        return spare

    def _keep_spares(self) -> None:
        """Keep ``runtime.spare_actors`` spares from the time every actor first acts (not sooner: their imports
        would slow the run's start); notice one that died while it waited."""
        if self._start_spare is None:
            return
        dead = next((s for s in self._spares if not s.alive()), None)
        if dead is not None:
            self._spares.remove(dead)
            self._spares_failed(f"a spare actor (pid {dead.pid}) exited (code {dead.returncode}) while it waited",
                                dead)
            return
        if not self._spares_on:
            actors = [name for name in self.procs if name.startswith("actor-")]
            self._spares_on = bool(actors) and all(self.procs[name].pid in self._ready_pids for name in actors)
        while self._spares_on and len(self._spares) < self.runtime.spare_actors:
            try:
                spare = self._start_spare(self.run)
            except OSError as exc:  # no process could be made now (EAGAIN, ENOMEM): spares are optional
                self._spares_failed(f"a spare actor could not be started ({exc})")
                return
            if spare is None:  # this placement keeps none
                self._start_spare = None
                return
            self._spares.append(spare)
            self._write_pids()

    def _spares_failed(self, why: str, spare: SpareActor | None = None) -> None:
        """A spare that exits while it waits (or cannot start) is broken in a way a restart would not mend (it
        imports what every actor imports; or the machine is out of memory or processes, and an idle spare is
        what the OOM killer picks first): say so once, stop the others and start dead actors cold from then on."""
        if spare is not None:
            spare.release()
        self._start_spare = None
        self._drop_spares(self.runtime.shutdown_timeout_s)
        print(f"[runtime] {why}; no more spares this run, dead actors start cold. The spares' log:\n"
              f"{tail(self.run.log('spare-actor'))}", file=sys.stderr, flush=True)

    def _drop_spares(self, timeout_s: float) -> None:
        for spare in self._spares:
            spare.stop(timeout_s)
        self._spares = []
        self._write_pids()

    def _write_pids(self) -> None:
        write_pids(self.run, {**self.procs, **{f"spare-actor-{k}": spare for k, spare in enumerate(self._spares)}})

    def counted_before(self, final_status: dict) -> dict[str, int]:
        """LEARNER_COUNTERS of the learners that died, less the one whose status is ``final_status`` (the run
        may end while it waits for its restart)."""
        out = dict.fromkeys(LEARNER_COUNTERS, 0)
        for pid, counts in self.learner_counted.items():
            if pid != final_status.get("pid"):
                for key, n in counts.items():
                    out[key] += n
        return out

    def _ready(self, name: str, proc: WorkerProcess) -> bool:
        pid = proc.pid
        if name == "learner":
            return (read_json(self.run.endpoints) or {}).get("learner_pid") == pid
        if name == "policy-server":
            return (read_json(self.run.policy_server) or {}).get("pid") == pid
        if name == "gui":
            return (read_json(self.run.root / "gui.json") or {}).get("pid") == pid
        status = read_json(self.run.status(name)) or {}
        return status.get("pid") == pid and status.get("env_steps", 0) > 0
