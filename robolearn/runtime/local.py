"""The embedded local runtime: a learner process and actor processes on this machine (and, with
``runtime.policy_server=true``, a policy server process the actors ask for chunks).

    start learner -> wait for its endpoints.json -> [start the policy server] -> start actors -> watch:
        live console line from the processes' status files; restart a process that dies (``Supervisor``);
        stop when the budget is spent, on Ctrl-C, or when a process is out of restarts -> stop actors
        (they flush), then the policy server, then the learner
        (it drains, persists, checkpoints) -> print and write the summary.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from robolearn.builders import robot_type
from robolearn.config import RunConfig, to_yaml
from robolearn.hardware.resources import LeaseManager, Resource, resources_for
from robolearn.inference.protocol import check_mid_timeout
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.rundir import RunDir
from robolearn.runtime.run_info import RunInfo, RunInfoServer
from robolearn.runtime.supervisor import (
    SpareActor,
    Supervisor,
    WorkerProcess,
    install_stop_signals,
    tail,
    write_pids,
)
from robolearn.transport.security import CurveKeys, load_keys
from robolearn.transport.sockets import endpoint_port, is_loopback


@dataclass
class LocalRuntimeConfig:
    """``runtime=local``: a learner and ``num_actors`` actor processes on this machine (and ``remote_actors``
    joined from robot PCs), over zmq on ``host``."""

    name: str = "local"
    host: str = "127.0.0.1"       # bind address; a non-loopback host needs keys_dir (CurveZMQ)
    keys_dir: str | None = None   # CurveZMQ keys (robolearn keys generate): every socket encrypted, clients
                                  # admitted by key; the server folder on the machine that runs the learner
    num_actors: int = 1           # actor processes on this machine (0: every robot joins from elsewhere)
    remote_actors: int = 0        # actor slots for robot PCs (robolearn join); their indices follow num_actors
    join_port: int = 0            # where robot PCs ask for the run (robolearn join tcp://host:port); 0: any free
    joined: str | None = None     # set by robolearn join in a robot PC's copy: the run it joined (its keys_dir is
                                  # then that machine's client folder)
    learner_nice: int = 5         # the learner's CPU priority below the actors' (os.nice): on a busy machine the
                                  # robots' control loops (and the page's) come first, the updates wait
    policy_server: bool = False   # true: this machine's actors ask one policy server process for their chunks
                                  # (needs actor.realtime=true) instead of each running the policy itself
    mid_timeout_s: float = 1.0    # a two-stage request whose mid observation has not come this long after is
                                  # answered from its first observation alone (the run's policy server, or an
                                  # actor's own inference thread)
    lease_ttl_s: float = 5.0      # an actor's robot lease expires this long after its last heartbeat
    status_every_s: float = 0.5   # each process rewrites its status file this often
    startup_timeout_s: float = 120.0
    shutdown_timeout_s: float = 30.0
    live_console: bool = True     # rich live line on a terminal; plain lines every 10 s otherwise
    actor_restarts: int = 5       # a dead actor is restarted (its lease freed at once), at most this often ...
    learner_restarts: int = 5     # ... and a dead learner (from its last checkpoint) ...
    server_restarts: int = 5      # ... and a dead policy server (the newest weights, then the learner's) ...
    gui_restarts: int = 5         # ... and a dead GUI process (gui.enabled) ...
    restart_window_s: float = 600.0  # ... within this many seconds; one more ends the run
    restart_backoff_s: float = 1.0  # at once, unless it died k times in a row before it was acting (or the
                                    # learner listening): then after backoff * (2^(k-1) - 1), so a crash loop
                                    # does not spin
    spare_actors: int = 1         # actor processes kept waiting with their imports done (most of a start-up)
                                  # from the time every actor acts: a dead actor's place goes to one at once

    def __post_init__(self) -> None:
        if not 0 <= self.learner_nice <= 19:
            raise ValueError(f"runtime.learner_nice must be in [0, 19] (os.nice), got {self.learner_nice}")
        if self.num_actors < 0 or self.remote_actors < 0 or self.total_actors < 1:
            raise ValueError(f"runtime.num_actors ({self.num_actors}) and runtime.remote_actors "
                             f"({self.remote_actors}) must be >= 0, with at least one actor in all")
        check_mid_timeout(self.mid_timeout_s, "runtime.mid_timeout_s")
        if min(self.actor_restarts, self.learner_restarts, self.server_restarts, self.gui_restarts,
               self.restart_window_s, self.restart_backoff_s, self.spare_actors) < 0:
            raise ValueError("runtime.actor_restarts, learner_restarts, server_restarts, gui_restarts, "
                             "restart_window_s, restart_backoff_s and spare_actors must be >= 0")
        if not is_loopback(self.host) and self.keys_dir is None:
            raise ValueError(f"runtime.host={self.host!r} is not a loopback address: a non-loopback bind needs "
                             "CurveZMQ keys (robolearn keys generate DIR, then runtime.keys_dir=DIR/server)")
        if self.keys_dir is not None:
            keys = CurveKeys.load(self.keys_dir)  # KeysError (a ValueError) names the missing file
            if not keys.can_serve and self.joined is None:
                raise ValueError(f"runtime.keys_dir={self.keys_dir!r} is a client folder; the learner's machine "
                                 "needs the server folder (server.key_secret and authorized/)")


    @property
    def total_actors(self) -> int:
        return self.num_actors + self.remote_actors


def _print_gui_url(run: RunDir, gui: WorkerProcess, console: Console, timeout_s: float) -> None:
    """Wait for the page to be served and say where (the robots start meanwhile only once it is)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        served = read_json(run.root / "gui.json")
        if served and served.get("pid") == gui.pid:
            console.print(f"[bold]GUI:[/bold] {served['url']}")
            return
        if not gui.alive():
            raise RuntimeError("the GUI exited during start-up:\n" + tail(run.log("gui")))
        time.sleep(0.05)
    raise RuntimeError(f"the GUI did not start within {timeout_s:.0f} s:\n" + tail(run.log("gui")))


class LocalPlacement:
    """Where the processes of a run start: here, subprocesses of the runtime on this machine. The Ray runtime's
    placement (``runtime.ray_runtime``) puts each on a node of a Ray cluster instead; the rest of the runtime
    (start order, supervision, the summary) is the same."""

    def robots(self, cfg: RunConfig, kind: str) -> list[Resource]:
        """The robots (and cameras) the lease manager hands out; one actor process per robot."""
        return resources_for(cfg.robot, kind, cfg.runtime.num_actors)

    def assigned(self) -> dict[str, str]:
        """actor-<i> -> the robot it must lease (the one on its node); empty: any free one of the type."""
        return {}

    def spawn(self, name: str, run: RunDir) -> WorkerProcess:
        return WorkerProcess(name, run)

    def spare(self, run: RunDir) -> SpareActor:
        """A spare actor process (``runtime.spare_actors``), started here like any actor."""
        return SpareActor(run)

    def sync(self, run: RunDir, procs: dict) -> None:
        """Called each time the runtime looks at its processes (the Ray placement copies status files)."""

    def describe(self, procs: dict) -> dict | None:
        """Where each process runs, for the summary (None: all here)."""
        return None


def run_local(cfg: RunConfig, run: RunDir, placement: LocalPlacement | None = None) -> dict:
    """Run until the budget is spent or Ctrl-C; return the summary (also written to summary.json)."""
    runtime: LocalRuntimeConfig = cfg.runtime
    placement = placement or LocalPlacement()
    for stale in [run.endpoints, run.resources, run.policy_server, run.root / "gui.json",
                  *run.root.glob("status/*.json")]:
        stale.unlink(missing_ok=True)
    console = Console()
    t0 = time.monotonic()
    interrupted = install_stop_signals()
    kind = robot_type(cfg)
    leases = LeaseManager(placement.robots(cfg, kind), runtime.lease_ttl_s)
    write_json_atomic(run.resources, {"endpoint": leases.serve(runtime.host, load_keys(runtime.keys_dir)),
                                      "type": kind, "curve": runtime.keys_dir is not None,
                                      "assigned": placement.assigned()})
    procs: dict[str, WorkerProcess] = {"learner": placement.spawn("learner", run)}
    write_pids(run, procs)
    failure = ""
    stop_reason = ""
    joins: RunInfoServer | None = None
    supervisor = Supervisor(run, procs, leases, runtime, placement.spawn,
                            placement.spare if runtime.spare_actors else None)
    try:
        while not run.endpoints.exists() and not interrupted:
            if not procs["learner"].alive():
                raise RuntimeError("the learner exited during start-up:\n" + tail(run.log("learner"))
                                   + getattr(procs["learner"], "died_because", ""))
            if time.monotonic() - t0 > runtime.startup_timeout_s:
                raise RuntimeError(f"the learner did not start within {runtime.startup_timeout_s} s")
            time.sleep(0.05)
        if runtime.remote_actors:
            joins = _serve_run_info(cfg, run, console)
        if interrupted:
            stop_reason = f"interrupted ({interrupted[0]}) during start-up"
        else:
            if runtime.policy_server:  # the actors wait for its policy_server.json
                procs["policy-server"] = placement.spawn("policy-server", run)
            if cfg.gui.on_for(cfg.robot.name):  # the page; the actors find it through gui.json
                procs["gui"] = placement.spawn("gui", run)
                _print_gui_url(run, procs["gui"], console, runtime.startup_timeout_s)
            for i in range(runtime.num_actors):
                procs[f"actor-{i}"] = placement.spawn(f"actor-{i}", run)
            write_pids(run, procs)
            stop_reason, failure = _watch(cfg, run, procs, console, interrupted, supervisor, placement)
    except RuntimeError as exc:
        failure = str(exc)
    finally:
        codes = {}
        supervisor.close(runtime.shutdown_timeout_s)  # the spare actor holds nothing: it just goes
        if joins is not None:
            joins.announce_stop()  # joined actors stop and drain while the learner is still up
        for name, proc in procs.items():  # actors first (they flush), then the policy server, then the learner
            if name.startswith("actor-"):
                codes[name] = proc.stop(runtime.shutdown_timeout_s)
        if joins is not None:
            missing = joins.wait_for_leaves(runtime.shutdown_timeout_s)
            if missing:
                print(f"[runtime] {', '.join(sorted(missing))} (joined from elsewhere) did not say it drained within "
                      f"{runtime.shutdown_timeout_s:.0f} s; what it holds stays in its spool there", file=sys.stderr)
            joins.close()
        for name in ("gui", "policy-server", "learner"):
            if name in procs:
                codes[name] = procs[name].stop(runtime.shutdown_timeout_s)
        leases.close()
        run.resources.unlink(missing_ok=True)
    summary = _summary(run, procs, time.monotonic() - t0, stop_reason, failure, codes)
    summary["restarts"] = supervisor.restarts
    where = placement.describe(procs)
    if where is not None:
        summary["placement"] = where
    for key, count in supervisor.counted_before(read_json(run.status("learner")) or {}).items():
        summary[key] += count
    write_json_atomic(run.summary, summary)
    _print_summary(console, summary)
    if failure:
        for name in procs:
            last = tail(run.log(name))
            if last:
                console.print(f"[dim]--- last lines of {run.log(name)} ---[/dim]\n{last}", markup=True,
                              highlight=False)
    return summary


def _serve_run_info(cfg: RunConfig, run: RunDir, console: Console) -> RunInfoServer:
    """``runtime.remote_actors``: tell robot PCs how to join (``robolearn join``)."""
    runtime = cfg.runtime

    def current(info: RunInfo) -> RunInfo:  # the learner's endpoints.json, rewritten by each (re)start
        endpoints = read_json(run.endpoints) or {}
        ports = {ch: endpoint_port(endpoints.get(ch)) for ch in ("transitions", "weights")}
        return replace(info, ports=ports, next_episode_id=int(endpoints.get("next_episode_id", 0)))

    info = current(RunInfo(cfg.run_name, run.run_id(), to_yaml(cfg), {}, 0, runtime.num_actors,
                           runtime.remote_actors, stopping=False))
    ports = info.ports
    server = RunInfoServer(info, runtime.host, load_keys(runtime.keys_dir), runtime.join_port, refresh=current)
    keys = " --keys-dir <this machine's client keys folder>" if runtime.keys_dir else ""
    console.print(f"[bold]robot PCs join this run with:[/bold] robolearn join {server.endpoint}{keys} "
                  f"(actor slots {runtime.num_actors}..{runtime.total_actors - 1}; the learner listens on ports "
                  f"{ports['transitions']} and {ports['weights']})", highlight=False)
    return server


def _watch(cfg: RunConfig, run: RunDir, procs: dict, console: Console, interrupted: list[str],
           supervisor: Supervisor, placement: LocalPlacement) -> tuple[str, str]:
    """Show progress until the budget is spent, a stop signal arrives or the run cannot go on (a process ran
    out of restarts). Returns (why it stopped, failure message or "")."""
    t_run = time.monotonic()
    live = cfg.runtime.live_console and console.is_terminal
    with Live(Text("starting..."), console=console, refresh_per_second=4) if live else _NoLive() as display:
        last_plain = 0.0
        while True:
            time.sleep(0.25)
            placement.sync(run, procs)
            status = _collect(run, procs)
            elapsed = time.monotonic() - t_run
            line = _status_line(status, elapsed)
            if live:
                display.update(line)
            elif time.monotonic() - last_plain >= 10.0:
                print(line.plain, flush=True)
                last_plain = time.monotonic()
            failure = supervisor.check(elapsed)
            if failure:
                return "", failure
            if interrupted:
                return f"interrupted ({interrupted[0]})", ""
            if elapsed >= cfg.budget.minutes * 60:
                return f"time budget of {cfg.budget.minutes} min spent", ""
            if cfg.budget.env_steps is not None and status["env_steps"] >= cfg.budget.env_steps:
                return f"env-step budget of {cfg.budget.env_steps} reached", ""


class _NoLive:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _collect(run: RunDir, procs: dict) -> dict:
    learner = read_json(run.status("learner")) or {}
    actors = [read_json(run.status(n)) or {} for n in procs if n.startswith("actor-")]
    return {
        "learner": learner, "actors": actors,
        "env_steps": learner.get("env_steps", 0),
        "actor_steps": sum(a.get("env_steps", 0) for a in actors),
    }


def _status_line(status: dict, elapsed: float) -> Text:
    learner = status["learner"]
    actors = status["actors"]
    actor_version = min((a.get("version", 0) for a in actors), default=0)
    lag = max(0, learner.get("version", 0) - actor_version) if actors else 0
    return Text.assemble(
        (f"{elapsed / 60:5.1f} min ", "bold"),
        f"env steps {learner.get('env_steps', 0):>7}  ",
        f"episodes {learner.get('episodes', 0):>5}  ",
        ("success(50) ", ""), (f"{100 * learner.get('success_rate_50', 0.0):5.1f}%  ", "green"),
        f"updates {learner.get('updates', 0):>7} ({learner.get('updates_per_s', 0.0):5.1f}/s)  ",
        f"policy v{learner.get('version', 0)} lag {lag}",
        *_person_lines(actors),
    )


def _person_lines(actors: list[dict]) -> list:
    """What a person must know at once: a robot held by the e-stop, and what a robot waits for from them."""
    out: list = []
    for a in actors:
        robot = a.get("robot_id", "?")
        if a.get("estop_latched"):
            out.append((f"\n{robot}: E-STOP latched, holding (robolearn rearm RUN_DIR)", "bold white on red"))
        elif a.get("operator_prompt"):
            out.append((f"\n{robot}: {a['operator_prompt']}", "bold yellow"))
    return out


def _summary(run: RunDir, procs: dict, wall_s: float, stop_reason: str, failure: str, codes: dict) -> dict:
    status = _collect(run, procs)
    learner = status["learner"]
    return {
        "run_dir": str(run.root), "wall_minutes": wall_s / 60, "stopped_because": failure or stop_reason,
        "ok": not failure, "exit_codes": codes,
        # the end of the log of each process that did not exit cleanly: its traceback, when it raised
        "process_errors": {name: tail(run.log(name), 30) for name, code in codes.items() if code != 0},
        "env_steps": learner.get("env_steps", 0), "episodes": learner.get("episodes", 0),
        "success_rate_last_50": learner.get("success_rate_50", 0.0), "updates": learner.get("updates", 0),
        "updates_per_s": learner.get("updates_per_s", 0.0), "policy_version": learner.get("version", 0),
        "buffer_records": learner.get("buffer_records", 0), "rejected_messages": learner.get("rejected_messages", 0),
        "resumed_from": learner.get("resumed_from"),
        "policy_lag_p95": learner.get("policy_lag_p95", 0), "policy_lag_max": learner.get("policy_lag_max", 0),
        "policy_lag_histogram": learner.get("policy_lag_histogram", {}),
        "intervention_steps": sum(a.get("intervention_steps", 0) for a in status["actors"]),
        "throttled_s": sum(a.get("throttled_s", 0.0) for a in status["actors"]),
        "waited_for_learner_s": sum(a.get("waited_for_learner_s", 0.0) for a in status["actors"]),
        "stalled_ticks": sum(a.get("stalled_ticks", 0) for a in status["actors"]),
        "p99_period_error_ms": max((a.get("p99_period_error_ms", 0.0) for a in status["actors"]), default=0.0),
        "chunk_utilisation": min((a.get("chunk_utilisation", 0.0) for a in status["actors"]), default=0.0),
        "duplicate_batches": learner.get("duplicate_batches", 0),
        "policy_server": read_json(run.status("policy-server")) if "policy-server" in procs else None,
        "out_of_order_batches": learner.get("out_of_order_batches", 0), "cut_episodes": learner.get("cut_episodes", 0),
        "batches_unacked": sum(a.get("batches_unacked", 0) for a in status["actors"]),
        "actors": [{k: a.get(k) for k in ("robot_id", "env_steps", "episodes", "versions_received", "stalled_ticks",
                                          "p50_period_error_ms", "p99_period_error_ms", "chunk_utilisation",
                                          "delay_histogram", "rejected_messages", "batches_sent", "batches_acked",
                                          "batches_rejected", "batches_unacked", "batches_duplicate",
                                          "batches_later", "reconnects", "spool_full_s")}
                   for a in status["actors"]],
    }


def _print_summary(console: Console, s: dict) -> None:
    table = Table(title="robolearn run summary", show_header=False, title_justify="left")
    for key, label, fmt in (
        ("stopped_because", "stopped because", "{}"), ("wall_minutes", "wall clock", "{:.2f} min"),
        ("env_steps", "env steps", "{}"), ("episodes", "episodes", "{}"),
        ("success_rate_last_50", "success (last 50 episodes)", "{:.0%}"), ("updates", "learner updates", "{}"),
        ("policy_version", "policy version", "{}"), ("buffer_records", "buffer records on disk", "{}"),
        ("stalled_ticks", "stalled ticks", "{}"), ("p99_period_error_ms", "tick period error p99", "{:.2f} ms"),
        ("chunk_utilisation", "chunk utilisation", "{:.2f}"),
        ("policy_lag_p95", "policy lag p95 (versions)", "{}"), ("policy_lag_max", "policy lag max", "{}"),
        ("throttled_s", "actors throttled by lag", "{:.1f} s"),
        ("waited_for_learner_s", "robot waited for learner (sync)", "{:.1f} s"),
        ("intervention_steps", "intervention steps", "{}"),
        ("rejected_messages", "rejected messages", "{}"),
        ("batches_unacked", "batches left unacknowledged (spooled)", "{}"),
        ("duplicate_batches", "re-sent batches dropped as duplicates", "{}"), ("run_dir", "run directory", "{}"),
    ):
        table.add_row(label, fmt.format(s.get(key)))
    console.print(table)
