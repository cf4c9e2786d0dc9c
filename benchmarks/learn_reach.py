"""How many wall-clock minutes does ``robolearn run task=reach`` need to reach 90% success?

Runs the real CLI (learner and actor processes, zmq, on-disk buffer, rerun log) from scratch and
watches the learner's metrics: success over the last 50 episodes, per second. When it first reaches
90% the run is stopped with Ctrl-C (SIGINT), as a person would. Minutes count from launching the
command, so process start-up is included. Goal ``minutes_to_90pct_reach`` <= 5.

    make bench-reach                       # seed 0
    python benchmarks/learn_reach.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, run_until_success, write_result  # noqa: E402

GOAL_MINUTES = 5.0


def one_run(seed: int, cap_minutes: float, workdir: Path) -> dict:
    r = run_until_success(["task=reach", f"seed={seed}"], f"bench-reach-s{seed}", workdir, 0.9, cap_minutes,
                          label=f"seed {seed}")
    return {"seed": seed, "reached_90pct": r["reached"], "exit_code": r["exit_code"], "final": r["final"],
            "curve": r["curve"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--cap-minutes", type=float, default=8.0, help="stop a run that has not reached 90%% by then")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            runs.append(one_run(seed, args.cap_minutes, Path(tmp)))
    minutes = [r["reached_90pct"]["minutes"] if r["reached_90pct"] else None for r in runs]
    value = statistics.median(m if m is not None else float("inf") for m in minutes)
    value = None if value == float("inf") else round(value, 2)
    command = run_command(ap, args, "bench-reach", "learn_reach.py")
    path = write_result("learn_reach", command, [goal("minutes_to_90pct_reach", value, "<=", GOAL_MINUTES)],
                        seeds=args.seeds, minutes_per_seed=minutes, runs=runs,
                        note="wall-clock from launching `robolearn run task=reach` (process start-up included) "
                             "until success over the last 50 episodes >= 90%; median over seeds")
    print(f"{'seed':>6} {'minutes to 90%':>16} {'env steps':>10} {'updates':>8}")
    for r, m in zip(runs, minutes):
        reached = r["reached_90pct"] or {}
        print(f"{r['seed']:>6} {f'{m:.2f}' if m is not None else 'not reached':>16} "
              f"{reached.get('env_steps', '-'):>10} {reached.get('updates', '-'):>8}")
    print(f"minutes_to_90pct_reach = {value} (goal <= {GOAL_MINUTES}, ratio to goal "
          f"{(value / GOAL_MINUTES) if value else float('nan'):.2f}) -> {path}")


if __name__ == "__main__":
    main()
