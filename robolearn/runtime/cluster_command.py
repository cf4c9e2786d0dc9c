"""``robolearn cluster [RUN_DIR] [--address HOST:PORT]``: a Ray cluster's nodes, their robots and labels, and for a
live ``runtime=ray`` run the robots' leases and where each of its processes runs.

The address comes from ``--address``, else from the run directory (``ray.json``, written while the run is live),
else Ray's own discovery (``auto``: a cluster this machine is part of)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from robolearn.config import load_run_config
from robolearn.hardware.resources import LeaseClient
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir
from robolearn.runtime.ray_runtime import ROBOT_LABEL, TYPE_LABEL, placement_of, robots_held
from robolearn.transport.security import load_keys


def _leases(run: RunDir) -> dict[str, dict]:
    """Robot name -> its lease manager entry (holder, health), from the live run; {} when it is not live."""
    info = read_json(run.resources)
    if info is None:
        return {}
    keys = load_keys(load_run_config(run.config).runtime.keys_dir) if info.get("curve") else None
    client = LeaseClient(info["endpoint"], "robolearn-cluster", timeout_s=3.0, keys=keys)
    try:
        return {r["name"]: r for r in client.call({"op": "status"})["resources"]}
    except TimeoutError:
        return {}
    finally:
        client.close()


def _holder(lease: dict) -> str:
    """A robot's lease as the table shows it: its holder, free, or why it is unavailable."""
    if not lease.get("healthy", True):
        return f"unavailable ({lease.get('error') or 'node left'})"
    return lease.get("holder") or "free"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="robolearn cluster", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", nargs="?", help="a runtime=ray run directory (its leases and processes)")
    ap.add_argument("--address", default=None, help="the cluster's head (HOST:PORT); default: the run's, or auto")
    args = ap.parse_args(argv)
    run = RunDir(Path(args.run_dir)) if args.run_dir else None
    address = args.address or ((read_json(run.root / "ray.json") or {}).get("address") if run else None) or "auto"
    import ray

    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False,
                 namespace="robolearn")
    except ConnectionError as exc:
        ap.error(f"no Ray cluster at {address}: {exc}")
    try:
        nodes = ray.nodes()
    finally:
        ray.shutdown()
    console = Console()
    placement = placement_of(run) if run else None
    procs = (placement or {}).get("processes", {})
    leases = _leases(run) if run else {}
    table = Table(title=f"Ray cluster at {address}", title_justify="left")
    for col in ("node", "address", "state", "robots", "robot type", "held by", "CPU", "GPU", "processes here"):
        table.add_column(col)
    for n in sorted(nodes, key=lambda n: (not n.get("Alive"), n["NodeManagerAddress"])):
        labels, res = n.get("Labels") or {}, n.get("Resources") or {}
        # a dead node may list no resources any more; its label still names its robot
        robots = sorted({*(robots_held(n) if TYPE_LABEL in labels else []),
                         *([labels[ROBOT_LABEL]] if ROBOT_LABEL in labels else [])})
        held = ", ".join(_holder(leases.get(robot, {})) for robot in robots)
        here = [f"{name} (pid {w.get('pid')}{', GPU ' + ','.join(w['gpus']) if w.get('gpus') else ''})"
                for name, w in procs.items() if w.get("node_id") == n["NodeID"]]
        table.add_row(n["NodeID"][:12], n["NodeManagerAddress"], "alive" if n.get("Alive") else "[red]dead[/red]",
                      ", ".join(robots) or "-", labels.get(TYPE_LABEL, "-"), held if robots and leases else "-",
                      f"{res.get('CPU', 0):g}", f"{res.get('GPU', 0):g}", ", ".join(here) or "-")
    console.print(table)
    waiting = [name for name, w in procs.items() if w.get("state") != "running"]
    for name in waiting:
        console.print(f"{name}: {procs[name]['state']}")
    if run and placement is None:
        console.print(f"{run.root} has no placement.json: not a runtime=ray run, or it has not started its processes")
    return 0
