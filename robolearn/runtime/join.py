"""``robolearn join tcp://WORKSTATION:PORT``: this machine's robots act in a run whose learner runs elsewhere.

The workstation runs ``robolearn run ... runtime.remote_actors=N`` (off loopback: with ``runtime.host`` and
``runtime.keys_dir``) and prints the address to join. Here, on the robot PC:

    ask the run for its config and ports (run_info) -> a local run directory (its config with this machine's
    client keys, endpoints on the workstation, spool, ledger, logs) -> this machine's own lease manager for
    its robots -> actor processes, supervised (a dead one restarts) -> until the run stops (the workstation
    says so) or Ctrl-C -> the actors drain their spools to the learner -> tell the workstation they left.

The actor processes are the same as in a local run (``actor.loop``): what is unacknowledged stays in this
machine's spool and goes out on the next join. ``--transitions`` / ``--weights`` replace the learner's
addresses where its ports are reached another way (an SSH tunnel, a NAT, the fault-injecting proxy of the
tests).
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from omegaconf import OmegaConf

from robolearn.builders import robot_type
from robolearn.config import ConfigError, load_run_config, validate
from robolearn.hardware.operator import name_person_terminal
from robolearn.hardware.resources import LeaseManager, resources_for
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.rundir import RunDir
from robolearn.runtime.run_info import RunInfo, ask
from robolearn.runtime.supervisor import SpareActor, Supervisor, WorkerProcess, install_stop_signals, write_pids
from robolearn.transport.security import load_keys


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="robolearn join", description=__doc__.split("\n\n")[0])
    ap.add_argument("endpoint", help="the address the workstation's robolearn run printed (tcp://host:port)")
    ap.add_argument("--keys-dir", default=None, help="this machine's CurveZMQ client folder (robolearn keys generate)")
    ap.add_argument("--actors", type=int, default=1, help="actor processes (robots) on this machine")
    ap.add_argument("--first-index", type=int, default=None, help="the first actor slot to take (default: the "
                    "run's first slot for robot PCs; two robot PCs take different slots)")
    ap.add_argument("--run-dir", default=None, help="local run directory (default: runs/<run name>@<hostname>)")
    ap.add_argument("--transitions", default=None, help="reach the learner's transitions port at this address")
    ap.add_argument("--weights", default=None, help="reach the learner's weights port at this address")
    args = ap.parse_args(argv)
    if urlparse(args.endpoint).scheme != "tcp" or not urlparse(args.endpoint).hostname:
        ap.error(f"endpoint must look like tcp://host:port, got {args.endpoint!r}")
    if args.actors < 1:
        ap.error("--actors must be >= 1")
    return args


def prepare(args: argparse.Namespace, info: RunInfo) -> RunDir:
    """The local run directory: the run's config (with this machine's keys) and where the learner is."""
    run = RunDir(Path(args.run_dir or f"runs/{info.run_name}@{socket.gethostname()}"))
    run.root.mkdir(parents=True, exist_ok=True)
    container = OmegaConf.to_container(OmegaConf.create(info.config_yaml))
    container["runtime"]["keys_dir"] = str(Path(args.keys_dir).resolve()) if args.keys_dir else None
    container["runtime"]["joined"] = args.endpoint
    container["runtime"]["policy_server"] = False  # the run's policy server serves its own machine: infer here
    validate(container)  # ConfigError names what this machine cannot build
    mine = run.root / "run_id"
    if mine.exists() and mine.read_text().strip() != info.run_id:  # its spool and kept weights are another run's
        raise ConfigError(f"{run.root} holds what this machine did in another run (also named "
                          f"{info.run_name!r}); give another --run-dir")
    mine.write_text(info.run_id + "\n")
    run.config.write_text(OmegaConf.to_yaml(OmegaConf.create(container)))
    write_endpoints(run, args, info)
    return run


def write_endpoints(run: RunDir, args: argparse.Namespace, info: RunInfo) -> None:
    """Where this machine's actors reach the learner: its ports on the workstation, or the given addresses."""
    host = urlparse(args.endpoint).hostname
    write_json_atomic(run.endpoints, {
        "transitions": args.transitions or f"tcp://{host}:{info.ports['transitions']}",
        "weights": args.weights or f"tcp://{host}:{info.ports['weights']}",
        "next_episode_id": info.next_episode_id, "joined": args.endpoint,
    })


def main(argv: list[str]) -> int:
    args = _parse(argv)
    keys = load_keys(args.keys_dir)
    try:
        probe = RunInfo.from_dict(ask(args.endpoint, {"op": "info"}, keys))
    except (TimeoutError, ValueError) as exc:
        print(f"robolearn join: {exc}", file=sys.stderr)
        return 2
    first = probe.first_index if args.first_index is None else args.first_index
    names = [f"actor-{i}" for i in range(first, first + args.actors)]
    if first < probe.first_index or first + args.actors > probe.first_index + probe.remote_actors:
        print(f"robolearn join: the run has actor slots {probe.first_index}.."
              f"{probe.first_index + probe.remote_actors - 1} for robot PCs; {', '.join(names)} do not fit",
              file=sys.stderr)
        return 2
    try:
        info = RunInfo.from_dict(ask(args.endpoint, {"op": "info", "actors": names}, keys))
        run = prepare(args, info)
    except (TimeoutError, ValueError) as exc:  # ConfigError is a ValueError
        print(f"robolearn join: {exc}", file=sys.stderr)
        return 2
    cfg = load_run_config(run.config)
    name_person_terminal(getattr(cfg.teleop, "tty", ""))  # auto: the person sits at this robot PC's terminal
    interrupted = install_stop_signals()
    kind = robot_type(cfg)
    leases = LeaseManager(resources_for(cfg.robot, kind, args.actors), cfg.runtime.lease_ttl_s)
    write_json_atomic(run.resources, {"endpoint": leases.serve("127.0.0.1"), "type": kind, "curve": False})
    procs = {name: WorkerProcess(name, run) for name in names}
    write_pids(run, procs)
    supervisor = Supervisor(run, procs, leases, cfg.runtime, spare=SpareActor if cfg.runtime.spare_actors else None)
    print(f"joined run {info.run_name!r} at {args.endpoint} as {', '.join(names)}; local run directory {run.root}",
          flush=True)
    failure, last_ask, unreachable_since, t0 = "", 0.0, None, time.monotonic()
    try:
        while not interrupted:
            time.sleep(0.25)
            failure = supervisor.check(time.monotonic() - t0)
            if failure:
                break
            if time.monotonic() - last_ask >= 2.0:
                last_ask = time.monotonic()
                try:
                    now = RunInfo.from_dict(ask(args.endpoint, {"op": "info"}, keys, timeout_s=2.0))
                except (TimeoutError, ValueError) as exc:  # the workstation restarts, the network is down
                    if unreachable_since is None:
                        unreachable_since = time.monotonic()
                        print(f"the run at {args.endpoint} does not answer ({exc}); the actors go on and spool",
                              file=sys.stderr, flush=True)
                    continue
                unreachable_since = None
                if now.stopping:
                    print("the run is stopping; draining", flush=True)
                    break
                if now.ports != info.ports and not (args.transitions or args.weights):
                    # the workstation's run was resumed on new ports: the actors restart on them
                    print(f"the learner moved to ports {now.ports}; restarting the actors on them", flush=True)
                    info = now
                    write_endpoints(run, args, info)
                    for proc in procs.values():
                        proc.terminate()  # the supervisor starts each again
    finally:
        supervisor.close(cfg.runtime.shutdown_timeout_s)
        for proc in procs.values():
            proc.stop(cfg.runtime.shutdown_timeout_s)  # SIGTERM: each drains its spool (actor.drain_timeout_s)
        leases.close()
        run.resources.unlink(missing_ok=True)
        for name in names:
            unacked = (read_json(run.status(name)) or {}).get("batches_unacked", 0)
            try:
                ask(args.endpoint, {"op": "leave", "actor": name, "unacked": unacked}, keys, timeout_s=2.0)
            except (TimeoutError, ValueError):
                break  # the workstation is gone; nothing waits for us
    for name in names:
        status = read_json(run.status(name)) or {}
        print(f"{name}: {status.get('env_steps', 0)} steps, {status.get('episodes', 0)} episodes, "
              f"{status.get('batches_unacked', 0)} batches left unacknowledged (kept in {run.spool(name)})")
    if failure:
        print(f"robolearn join: {failure}", file=sys.stderr)
    return 1 if failure else 0
