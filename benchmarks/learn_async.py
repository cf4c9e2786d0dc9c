"""Asynchronous vs synchronous learning on a robot paced in wall-clock time: SAC from scratch on ``reach``.

    make bench-learn-async      (python benchmarks/learn_async.py [--hz 50] [--target 0.8] [--seeds 0 1 2])
    python benchmarks/learn_async.py --task push_cube --cap-minutes 30    (-> learn_async_push_cube.json)

Both runs are the real ``robolearn run`` (learner and actor processes, zmq, on-disk buffer) with the
simulated robot paced by a real clock at ``--hz`` ticks per second (``actor.realtime=true``), as
hardware would be, the same SAC settings and the same update-to-data ratio (1):

    async   the robot acts while the learner updates (``learner.learning=async``)
    sync    at each episode end the robot waits while the learner does the updates due for the steps
            collected, and the learner does not update while the robot acts (``learner.learning=sync``)

Success (last 50 episodes) is followed against env steps and wall clock; each run stops when it first
reaches ``--target``. For each seed the two modes run one after the other (async first). Goal
``async_over_sync_time_ratio`` <= 0.6: the median over seeds of each seed's wall-clock to the target, async over
sync (perfect overlap of acting and learning would give about 0.5), min and max beside it. When a seed's async
run does not reach the target within ``--cap-minutes``, its sync run (slower by construction) is skipped and
its ratio is undefined (counted as a failure in the median).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, run_until_success, spread, write_result  # noqa: E402


def one_seed(args: argparse.Namespace, seed: int, workdir: Path) -> dict:
    common = [f"task={args.task}", f"seed={seed}", f"robot.control_hz={args.hz}", "actor.realtime=true",
              "learner.utd_ratio=1"]
    runs = {}
    for mode in ("async", "sync"):
        if mode == "sync" and not runs["async"]["reached"]:
            print(f"seed {seed}: async did not reach {args.target:.0%} within {args.cap_minutes} min: sync skipped",
                  flush=True)
            runs[mode] = {"reached": None, "skipped": "async did not reach the target within the cap"}
            continue
        runs[mode] = run_until_success([*common, f"learner.learning={mode}"], f"learn-{mode}-s{seed}", workdir,
                                       args.target, args.cap_minutes, label=f"{mode} seed {seed}")
        r = runs[mode]["reached"]
        reached = f"{r['minutes']:.2f} min, {r['env_steps']} env steps" if r else "not reached"
        print(f"seed {seed} {mode}: {reached} (robot waited {runs[mode]['waited_for_learner_s'] or 0:.0f} s for the "
              "learner)", flush=True)
    a, s = runs["async"]["reached"], runs["sync"]["reached"]
    return {"seed": seed, "time_ratio": round(a["minutes"] / s["minutes"], 3) if a and s else None,
            "env_steps_ratio": round(a["env_steps"] / s["env_steps"], 3) if a and s else None, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hz", type=float, default=50.0)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cap-minutes", type=float, default=15.0)
    ap.add_argument("--task", default="reach")
    args = ap.parse_args()
    if len(args.seeds) < 3:
        ap.error("--seeds needs at least 3 seeds (the figure is a median)")
    with tempfile.TemporaryDirectory() as tmp:
        seeds = [one_seed(args, seed, Path(tmp)) for seed in args.seeds]
    ratios = [r["time_ratio"] for r in seeds]
    ratio = spread(ratios, 3)
    command = run_command(ap, args, "bench-learn-async", "learn_async.py")
    name = "learn_async" if args.task == "reach" else f"learn_async_{args.task}"
    path = write_result(name, command, [goal("async_over_sync_time_ratio", ratio["median"], "<=", 0.6)],
                        task=args.task, cap_minutes=args.cap_minutes, control_hz=args.hz, target_success=args.target,
                        seeds=args.seeds, time_ratio_per_seed=ratios,
                        time_ratio_min_max=[ratio["min"], ratio["max"]] if ratio["min"] is not None else None,
                        env_steps_ratio_per_seed=[r["env_steps_ratio"] for r in seeds], per_seed=seeds,
                        note="wall clock from launching each run until success over the last 50 episodes first "
                             "reaches the target; same SAC settings and UTD 1 in both modes; median over seeds of "
                             "each seed's async / sync ratio")
    print(f"\nasync_over_sync_time_ratio = {ratio['median']} (median over seeds {ratios}; goal <= 0.6) -> {path}")


if __name__ == "__main__":
    main()
