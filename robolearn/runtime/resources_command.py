"""``robolearn resources RUN_DIR``: each resource of a live run, its health, and who holds it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from robolearn.config import load_run_config
from robolearn.hardware.resources import LeaseClient
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir
from robolearn.transport.security import load_keys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="robolearn resources", description=__doc__)
    ap.add_argument("run_dir", help="a run directory whose run is live (robolearn run ...)")
    args = ap.parse_args(argv)
    info = read_json(RunDir(Path(args.run_dir)).resources)
    if info is None:
        ap.error(f"{args.run_dir} has no live run serving resources (start it with robolearn run)")
    run = RunDir(Path(args.run_dir))
    keys = load_keys(load_run_config(run.config).runtime.keys_dir) if run.config.exists() else None
    client = LeaseClient(info["endpoint"], "robolearn-resources", timeout_s=3.0, keys=keys)
    try:
        status = client.call({"op": "status"})["resources"]
    except TimeoutError as exc:
        ap.error(str(exc))
    finally:
        client.close()
    table = Table(title=f"resources of {args.run_dir}", title_justify="left")
    for col in ("name", "kind", "type", "cameras", "health", "held by"):
        table.add_column(col)
    for r in status:
        health = "ok" if r["healthy"] else f"[red]failing[/red] {r['error']}"
        table.add_row(r["name"], r["kind"], r["type"], ", ".join(r["cameras"]) or "-", health, r["holder"] or "-")
    Console().print(table)
    return 0
