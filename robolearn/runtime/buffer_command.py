"""``robolearn buffer info RUN_DIR``, ``robolearn buffer audit RUN_DIR`` and ``robolearn buffer export RUN_DIR OUT``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.builders import task_specs
from robolearn.config import RunConfig, load_run_config
from robolearn.rundir import RunDir


def open_run_buffer(run_dir: Path, read_only: bool = True) -> tuple[ReplayBuffer, RunConfig]:
    """The run's buffer, with the specs of its task (built unconnected: this opens no robot)."""
    run = RunDir(run_dir)
    cfg = load_run_config(run.config)
    obs_spec, action_spec = task_specs(cfg)
    store = cfg.buffer
    return ReplayBuffer(run.buffer, obs_spec, action_spec, store.capacity, store.ram_budget_mb,
                        segment_mb=store.segment_mb, read_only=read_only), cfg


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def info(args: argparse.Namespace) -> int:
    buf, _ = open_run_buffer(Path(args.run_dir))
    i = buf.info()
    if args.json:
        print(json.dumps(i, indent=2))
        return 0
    t = Table(title=f"buffer of {args.run_dir}", show_header=False, title_justify="left")
    t.add_row("steps (online / demo)", f"{i['steps']['online']} / {i['steps']['demo']}")
    t.add_row("sampleable by partition", ", ".join(f"{k} {v}" for k, v in i["sampleable_by_partition"].items()))
    t.add_row("steps by action source", ", ".join(f"{k} {v}" for k, v in i["steps_by_source"].items()))
    t.add_row("episodes (committed / open)", f"{i['episodes']} ({i['episodes_committed']} / {i['episodes_open']})")
    t.add_row("episodes with interventions", str(i["episodes_with_interventions"]))
    t.add_row("episodes recovered after a crash", str(i["episodes_recovered_after_crash"]))
    t.add_row("success rate (committed)", f"{i['success_rate']:.1%}")
    t.add_row("disk", f"{_mb(i['disk_bytes'])} in {i['records']} records")
    t.add_row("RAM", f"{_mb(i['ram_image_bytes'])} images (lz4) + {_mb(i['ram_table_bytes'])} step table (allocated)")
    for p in i["problems"]:
        t.add_row("[red]problem[/red]", p)
    Console().print(t)
    return 0


def export(args: argparse.Namespace) -> int:
    from robolearn.buffer.lerobot_io import export_lerobot

    buf, cfg = open_run_buffer(Path(args.run_dir))
    n = export_lerobot(buf, args.out, args.repo_id, fps=int(round(cfg.robot.control_hz)), only=args.only,
                       task=cfg.task.name)
    print(f"exported {n} episodes to {args.out}")
    return 0


def audit(args: argparse.Namespace) -> int:
    from robolearn.runtime.audit import audit_run

    report = audit_run(Path(args.run_dir), tuple(args.joined))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        t = Table(title=f"audit of {args.run_dir}: the actors' ledgers against the buffer", show_header=False,
                  title_justify="left")
        t.add_row("steps recorded (ledgers)", f"{report['produced_steps']} "
                  f"({', '.join(f'{k} {v}' for k, v in report['produced_by_actor'].items())})")
        for key, label in (("stored_steps", "stored in the buffer"), ("lost_steps", "lost"),
                           ("duplicate_steps", "stored twice"), ("pending_steps", "still spooled (sent on restart)"),
                           ("interrupted_steps", "cut by a kill inside the step (never recorded)"),
                           ("steps_taken_twice", "taken twice (a reused episode id)"),
                           ("unledgered_steps", "stored, in no ledger")):
            t.add_row(label, str(report[key]))
        for p in report["problems"]:
            t.add_row("[red]problem[/red]", p)
        Console().print(t)
    return 1 if report["lost_steps"] or report["duplicate_steps"] else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="robolearn buffer", description="inspect or export a run's replay buffer")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="counts by partition and source, episodes, success rate, disk and RAM use")
    p.add_argument("run_dir")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=info)
    p = sub.add_parser("audit", help="every step the actors' ledgers say was taken against the buffer: lost, "
                                     "duplicated, still spooled (exit 1 when any is lost or duplicated)")
    p.add_argument("run_dir")
    p.add_argument("--joined", nargs="*", default=[], help="run directories of robot PCs that joined (copied here)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=audit)
    p = sub.add_parser("export", help="write the buffer (or a filter of it) as a LeRobotDataset v3 folder")
    p.add_argument("run_dir")
    p.add_argument("out", help="folder to create")
    p.add_argument("--only", choices=["successes", "interventions"], default=None)
    p.add_argument("--repo-id", default="robolearn/export")
    p.set_defaults(func=export)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, FileExistsError) as exc:
        ap.error(str(exc))
    return 2
