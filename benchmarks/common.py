"""Shared by the benchmarks: the machine they ran on and the results file in the agreed shape."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROBOLEARN = Path(sys.executable).parent / "robolearn"


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def commit() -> str:
    """The commit the code under test was at, with ``+dirty`` when the work tree had uncommitted changes (results
    files aside: a benchmark run before this one in the same checkout rewrote its own)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            f":!{RESULTS.relative_to(Path(__file__).parent.parent)}"], capture_output=True,
                           text=True, cwd=Path(__file__).parent.parent).stdout.strip()
    return f"{head}+dirty" if dirty else head


COMMIT = commit()  # taken when the benchmark starts: the code it imported, not what changed while it ran


def goal(name: str, value: float | None, op: str, target: float) -> dict:
    checks = {"<=": value is not None and value <= target, ">=": value is not None and value >= target,
              "<": value is not None and value < target, ">": value is not None and value > target}
    if op not in checks:
        raise ValueError(f"goal operator must be one of {sorted(checks)}, got {op!r}")
    met = checks[op]
    return {"name": name, "value": value, "target": f"{op} {target}", "met": bool(met)}


def spread(values: Sequence[float | None], digits: int | None = None) -> dict:
    """The median over runs or seeds, with the min and max beside it (the agreed way to report a figure).

    ``None`` is a run that never got there (a time to a target it did not reach; for figures where lower is better):
    it counts as the worst, infinitely late, in the median, so the median is ``None`` when most runs did not get
    there; min and max are over the runs that did (``None`` when none did). ``digits`` rounds the three."""
    if not values:
        raise ValueError("spread needs at least one value")
    reached = [v for v in values if v is not None]
    median = statistics.median(v if v is not None else float("inf") for v in values)

    def fmt(v: float | None) -> float | None:
        return None if v is None or v == float("inf") else (round(v, digits) if digits is not None else v)

    return {"median": fmt(median), "min": fmt(min(reached) if reached else None),
            "max": fmt(max(reached) if reached else None)}


def run_command(ap: argparse.ArgumentParser, args: argparse.Namespace, make_target: str, script: str) -> str:
    """The command that repeats this run, for its results file: ``make <make_target>`` when every option
    has its default, else ``python benchmarks/<script>`` with the options that differ."""
    defaults = vars(ap.parse_args([]))
    options = []
    for key, value in vars(args).items():
        if value == defaults[key]:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):  # store_true options, and --no-<flag> of those on by default
            options.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            options.append(" ".join([flag, *map(str, value)]))
        else:
            options.append(f"{flag} {value}")
    return f"python benchmarks/{script} {' '.join(options)}" if options else f"make {make_target}"


def write_result(name: str, command: str, goals: list[dict], folder: Path = RESULTS, **details) -> Path:
    """``<folder>/<name>.json``: the committed results folder, or another one for a development run (one on seeds
    used while developing must not replace the figure)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "command": command, "commit": COMMIT, "goals": goals,
                                "machine": machine(), **details}, indent=2) + "\n")
    return path


def eval_success(run_dir: Path, episodes: int, seed: int) -> dict:
    """``robolearn eval``'s deterministic evaluation of a run's latest checkpoint on ``episodes`` seeds from
    ``seed``, in this process: success rate, mean return, the checkpoint's policy version."""
    from robolearn.evaluate import evaluate
    from robolearn.runtime.builtins import register_builtins

    register_builtins()  # as the CLI's entry point does (idempotent)
    return evaluate(run_dir, episodes=episodes, seed=seed, deterministic=True)


def run_until_success(overrides: list[str], name: str, workdir: Path, target: float, cap_minutes: float,
                      label: str = "", stop: bool = True,
                      each_second: Callable[[float, dict], None] | None = None) -> dict:
    """Launch ``robolearn run <overrides>`` and watch its learner metrics each second; when success over the
    last 50 episodes first reaches ``target`` (with at least 50 episodes) stop it with SIGINT, as a person
    would (``stop=False``: let it run to ``cap_minutes``). Minutes count from launching the command (start-up
    included). ``each_second`` is called each second with the launch time and the learner's latest metrics record
    read so far ({} before the first)."""
    metrics = workdir / "runs" / name / "metrics.jsonl"
    log_path = workdir / f"{name}.log"  # a file, not a pipe: nobody reads a pipe while the run goes, and it fills
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([str(ROBOLEARN), "run", *overrides, f"run_name={name}",
                                 f"budget.minutes={cap_minutes}", "runtime.live_console=false"],
                                cwd=workdir, stdout=log, stderr=subprocess.STDOUT, text=True)
    reached, last, curve, last_print = None, {}, [], 0.0
    while proc.poll() is None:
        time.sleep(1.0)
        if each_second is not None:
            each_second(t0, last)
        if not metrics.exists():
            continue
        for line in metrics.read_text().splitlines()[len(curve):]:
            rec = json.loads(line)
            curve.append({"minutes": round((rec["time"] - t0) / 60, 3), "env_steps": rec["env_steps"],
                          "episodes": rec["episodes"], "success_rate_50": rec["success_rate_50"],
                          "updates": rec["updates"], "updates_per_s": round(rec["updates_per_s"], 1)})
            last = rec
            if reached is None and rec["episodes"] >= 50 and rec["success_rate_50"] >= target:
                reached = {"minutes": (rec["time"] - t0) / 60, "env_steps": rec["env_steps"],
                           "episodes": rec["episodes"], "updates": rec["updates"]}
                if stop:
                    proc.send_signal(signal.SIGINT)
        if time.time() - last_print >= 15:
            last_print = time.time()
            print(f"  {label or name}: {(time.time() - t0) / 60:4.1f} min, steps {last.get('env_steps', 0)}, "
                  f"episodes {last.get('episodes', 0)}, success(50) {last.get('success_rate_50', 0):.0%}, "
                  f"updates/s {last.get('updates_per_s', 0):.0f}", flush=True)
    if proc.returncode != 0:
        print(log_path.read_text()[-3000:])
    summary_path = workdir / "runs" / name / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return {"reached": reached, "exit_code": proc.returncode,
            "final": {k: last.get(k) for k in ("env_steps", "episodes", "success_rate_50", "updates")},
            "waited_for_learner_s": summary.get("waited_for_learner_s"), "curve": curve[::5]}


def run_with_snapshots(overrides: list[str], name: str, workdir: Path, minutes: float, target: float,
                       label: str = "", stop_at: float | None = None) -> tuple[list[dict], dict]:
    """One ``robolearn run <overrides>`` of up to ``minutes``, its checkpoints copied aside as the learner writes
    them ([{"minutes", "dir", "env_steps"}], minutes since the command was launched, so start-up counts, and the
    learner's env-step count when it was copied; with the one written as the run stopped, unless that was after
    ``minutes``), and the run's record from ``run_until_success`` (``reached``: when the rolling training success
    first reached ``target``, or ``stop_at`` when given).
    ``stop_at``: stop the run once the rolling training success reaches this (None: run the whole ``minutes``)."""
    run_dir = workdir / "runs" / name
    ckpt = run_dir / "checkpoints" / "latest.pt"
    snapshots: list[dict] = []
    seen_mtime, launched = [0.0], [time.time()]

    def copy_a_new_checkpoint(t0: float, metrics_record: dict) -> None:
        launched[0] = t0
        if ckpt.exists() and ckpt.stat().st_mtime != seen_mtime[0]:
            snap = workdir / "snapshots" / name / f"{len(snapshots):03d}"
            (snap / "checkpoints").mkdir(parents=True)
            shutil.copy2(run_dir / "config.yaml", snap / "config.yaml")
            copied = shutil.copy2(ckpt, snap / "checkpoints" / "latest.pt")  # written atomically: whole, old or new
            # the time of what was copied (copy2 keeps its mtime), not of what was seen: the learner may have
            # replaced it in between
            seen_mtime[0] = Path(copied).stat().st_mtime
            # the learner writes a metrics line each second: its latest one read gives about the checkpoint's steps
            snapshots.append({"minutes": (seen_mtime[0] - t0) / 60, "dir": snap,
                              "env_steps": metrics_record.get("env_steps")})

    run = run_until_success(overrides, name, workdir, target if stop_at is None else stop_at, minutes,
                            label=label or name, stop=stop_at is not None, each_second=copy_a_new_checkpoint)
    if run["exit_code"] != 0:
        raise RuntimeError(f"robolearn run {' '.join(overrides)} exited with {run['exit_code']}")
    copy_a_new_checkpoint(launched[0], run["final"])  # the one written as the run stopped
    return [s for s in snapshots if s["minutes"] <= minutes], run


def first_evaluated_at(snapshots: list[dict], target: float, episodes: int, seed: int,
                       coarse_minutes: float = 0.0, confirm_seed: int | None = None) -> tuple[dict | None, list[dict]]:
    """The first checkpoint copy (time order) whose deterministic evaluation on ``episodes`` seeds from ``seed``
    succeeds on at least ``target``: (that one or None, every evaluation made; ``copy`` is the index in
    ``snapshots``). With ``coarse_minutes`` > 0 only
    one copy per that many minutes is evaluated until one reaches the target; then the copies between it and the
    last coarse one below the target are evaluated in order. The answer is the exhaustive search's unless a copy
    before that last coarse one below the target already reached it; then it is later than the first (against
    the learner, never for it). With ``confirm_seed``, a copy counts only if it also reaches the target on
    ``episodes`` other seeds from ``confirm_seed`` (its ``confirmed`` success); one that does not is passed over and
    the search goes on: the first of many noisy evaluations to pass is biased early, a second one is not."""
    evaluated: dict[int, dict] = {}

    def score(i: int) -> float:
        if i not in evaluated:
            result = eval_success(snapshots[i]["dir"], episodes, seed)
            evaluated[i] = {"copy": i, "minutes": round(snapshots[i]["minutes"], 3),
                            "env_steps": snapshots[i].get("env_steps"), "success": result["success_rate"],
                            "mean_return": round(result["mean_return"], 3),
                            "policy_version": result["policy_version"]}
        return evaluated[i]["success"]

    def passes(i: int) -> bool:
        if score(i) < target:
            return False
        if confirm_seed is None:
            return True
        if "confirmed" not in evaluated[i]:
            evaluated[i]["confirmed"] = eval_success(snapshots[i]["dir"], episodes, confirm_seed)["success_rate"]
        return evaluated[i]["confirmed"] >= target

    coarse, last_minutes = [], -float("inf")
    for i, snap in enumerate(snapshots):
        if snap["minutes"] - last_minutes >= coarse_minutes or i == len(snapshots) - 1:
            coarse.append(i)
            last_minutes = snap["minutes"]
    below = -1
    for i in coarse:
        if score(i) >= target:
            for j in range(below + 1, i + 1):
                if passes(j):
                    return evaluated[j], [evaluated[k] for k in sorted(evaluated)]
        below = i
    return None, [evaluated[k] for k in sorted(evaluated)]
