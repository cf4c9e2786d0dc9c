"""How many wall-clock minutes does ``robolearn run task=reach`` need to reach 90% success?

Runs the real CLI (learner and actor processes, zmq, on-disk buffer, rerun log) from scratch and
watches the learner's metrics: success over the last 50 episodes, per second. When it first reaches
90% the run is stopped with Ctrl-C (SIGINT), as a person would. Minutes count from launching the
command, so process start-up is included. That rolling figure is the training episodes' (exploring,
and the first crossing is biased low), so each run's checkpoint at the stop is then evaluated
deterministically on 100 seeds never used in development (from 900000). Goals, over seeds 0, 1, 2:
``minutes_to_90pct_reach`` <= 5 (median, min/max beside it) and ``min_eval_success_at_90pct`` >= 0.9
(the worst seed's evaluation).

    make bench-reach                       (python benchmarks/learn_reach.py [--seeds 0 1 2])
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import eval_success, goal, run_command, run_until_success, write_result  # noqa: E402

GOAL_MINUTES = 5.0
EVAL_SEED = 900000


def one_run(seed: int, cap_minutes: float, workdir: Path, eval_episodes: int) -> dict:
    name = f"bench-reach-s{seed}"
    r = run_until_success(["task=reach", f"seed={seed}"], name, workdir, 0.9, cap_minutes, label=f"seed {seed}")
    evaluation = eval_success(workdir / "runs" / name, eval_episodes, EVAL_SEED + 1000 * seed)
    print(f"  seed {seed}: deterministic evaluation {evaluation['success_rate']:.0%} over {eval_episodes} episodes "
          f"(checkpoint v{evaluation['policy_version']})", flush=True)
    return {"seed": seed, "reached_90pct": r["reached"], "exit_code": r["exit_code"], "final": r["final"],
            "eval": evaluation, "curve": r["curve"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cap-minutes", type=float, default=8.0, help="stop a run that has not reached 90%% by then")
    ap.add_argument("--eval-episodes", type=int, default=100)
    args = ap.parse_args()
    if len(args.seeds) < 3:
        ap.error("--seeds needs at least 3 seeds (the figure is a median)")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            runs.append(one_run(seed, args.cap_minutes, Path(tmp), args.eval_episodes))
    minutes = [r["reached_90pct"]["minutes"] if r["reached_90pct"] else None for r in runs]
    value = statistics.median(m if m is not None else float("inf") for m in minutes)
    value = None if value == float("inf") else round(value, 2)
    worst_eval = min(r["eval"]["success_rate"] for r in runs)
    reached = [m for m in minutes if m is not None]
    command = run_command(ap, args, "bench-reach", "learn_reach.py")
    path = write_result("learn_reach", command, [goal("minutes_to_90pct_reach", value, "<=", GOAL_MINUTES),
                                                 goal("min_eval_success_at_90pct", worst_eval, ">=", 0.9)],
                        seeds=args.seeds, minutes_per_seed=minutes,
                        minutes_min_max=[round(min(reached), 2), round(max(reached), 2)] if reached else None,
                        eval_success_per_seed=[r["eval"]["success_rate"] for r in runs],
                        eval_seeds=[EVAL_SEED + 1000 * s for s in args.seeds], runs=runs,
                        note="wall-clock from launching `robolearn run task=reach` (process start-up included) "
                             "until success over the last 50 training episodes >= 90%; median over seeds; each "
                             "run's checkpoint at the stop evaluated deterministically on fresh seeds")
    print(f"{'seed':>6} {'minutes to 90%':>16} {'env steps':>10} {'updates':>8} {'eval':>6}")
    for r, m in zip(runs, minutes):
        at = r["reached_90pct"] or {}
        print(f"{r['seed']:>6} {f'{m:.2f}' if m is not None else 'not reached':>16} "
              f"{at.get('env_steps', '-'):>10} {at.get('updates', '-'):>8} {r['eval']['success_rate']:>6.0%}")
    print(f"minutes_to_90pct_reach = {value} (goal <= {GOAL_MINUTES}, ratio to goal "
          f"{(value / GOAL_MINUTES) if value else float('nan'):.2f}) -> {path}")


if __name__ == "__main__":
    main()
