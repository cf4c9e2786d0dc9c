"""``robolearn estop RUN_DIR [--robot ID] [--reason TEXT]`` and ``robolearn rearm RUN_DIR [--robot ID]``: press or
release a run's e-stop from any shell (``hardware.safety.EStop``). Without ``--robot`` the e-stop holds every
robot of this machine's run directory. A latched e-stop holds the robot through restarts until re-armed here.
Robots on robot PCs that joined the run (``robolearn join``) read their own run directory: press it there."""

from __future__ import annotations

import argparse
import getpass
import re
import time
from pathlib import Path

from robolearn.hardware.safety import EStop
from robolearn.logging.status import read_json
from robolearn.rundir import RunDir


def main(argv: list[str], rearm: bool) -> int:
    name = "rearm" if rearm else "estop"
    ap = argparse.ArgumentParser(prog=f"robolearn {name}", description=__doc__)
    ap.add_argument("run_dir")
    ap.add_argument("--robot", default="all", help="one robot's id (robolearn resources RUN_DIR lists them); "
                                                   "default: every robot of the run")
    if not rearm:
        ap.add_argument("--reason", default="", help="said in the log and the status")
    args = ap.parse_args(argv)
    run = RunDir(Path(args.run_dir))
    if not run.config.exists():
        ap.error(f"{run.root} is not a run directory (no config.yaml)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.robot):
        ap.error(f"--robot {args.robot!r} is not a robot id (letters, digits, '_', '.', '-')")
    known = _robot_ids(run)
    if args.robot != "all" and known is not None and args.robot not in known:
        ap.error(f"--robot {args.robot!r} is not a robot of this run; its robots: {', '.join(sorted(known))}")
    estop = EStop(run.estop(args.robot))
    who = f"{getpass.getuser()} (robolearn {name})"
    if not rearm:
        estop.press(who, args.reason)
        print(f"e-stop latched for {'every robot' if args.robot == 'all' else args.robot} of {run.root}: "
              f"the robots hold until robolearn rearm {run.root}" + ("" if args.robot == "all" else
                                                                    f" --robot {args.robot}"))
        return 0
    state = estop.rearm()
    if not state.latched:
        print(f"the e-stop for {args.robot} of {run.root} was not latched")
    else:
        print(f"re-armed {args.robot} of {run.root} (latched by {state.by or 'unknown'} "
              f"{time.strftime('%H:%M:%S', time.localtime(state.at))}{': ' + state.reason if state.reason else ''})")
    others = sorted(p.stem for p in (run.root / "estop").glob("*.json"))
    if others:
        print(f"still latched: {', '.join(others)} (robolearn rearm {run.root} --robot ID; 'all' holds every robot)")
    return 0


def _robot_ids(run: RunDir) -> set[str] | None:
    """The robots this machine's actors hold (their status files), or None when none has said yet."""
    ids = {(read_json(path) or {}).get("robot_id") for path in (run.root / "status").glob("actor-*.json")}
    return {i for i in ids if i} or None
