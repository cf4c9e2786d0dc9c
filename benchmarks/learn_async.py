"""Asynchronous vs synchronous learning on a robot paced in wall-clock time: SAC from scratch on ``reach``.

    make bench-learn-async      (python benchmarks/learn_async.py [--hz 50] [--target 0.8] [--seeds 0 1 2])

Both runs are the real ``robolearn run`` (learner and actor processes, zmq, on-disk buffer) with the
simulated robot paced by a real clock at ``--hz`` ticks per second (``actor.realtime=true``), as
hardware would be, the same SAC settings and the same update-to-data ratio (1):

    async   the robot acts while the learner updates (``learner.learning=async``)
    sync    at each episode end the robot waits while the learner does the updates due for the steps
            collected, and the learner does not update while the robot acts (``learner.learning=sync``)

For each seed the two modes run one after the other, the order alternating from seed to seed (async first for
the first seed, sync first for the next, ...), so machine drift does not fall on one mode. Each run writes a
checkpoint every 10 s, copied aside with the time since the command was launched (start-up counts); a run stops
when success over its last 50 *training* episodes first reaches ``--stop-at`` (above the target, so the
deterministic policy has had its chance to pass the target before), or at ``--cap-minutes``. After both runs of a
seed, and not while they compete for the CPU, the copies are evaluated in time order, deterministically, on
``--eval-episodes`` episodes from seeds never used in development (910000 + 1000 x seed), by the same
``robolearn.evaluate`` as ``robolearn eval``: a run's time is that of its first checkpoint that succeeds on at
least ``--target`` of them. Beside it, ``rolling_training_target``: when the rolling training success reached
``--stop-at`` (what stopped the run; a rolling crossing is biased early, the first time a noisy figure crosses a
line it is more likely above its true value).

Goal ``async_over_sync_time_ratio`` <= 0.6: the median over seeds of each seed's async time over its sync time
(perfect overlap at equal env steps gives t_act / (t_act + t_learn) per env step: 0.5 only when an update takes
as long as a tick; at 50 Hz with UTD 1 and ~80 updates/s here, about 0.62), min and max beside it; a seed where
either mode never evaluates at the target within the cap has no ratio (counted as a failure in the median). Also:
each seed's env-steps ratio at those checkpoints (how much of the time ratio is one run needing fewer steps than
the other, not the overlap) and how long the robot waited for the learner in sync mode (over the whole run, to its
stop).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import first_evaluated_at, goal, run_command, run_with_snapshots, spread, write_result  # noqa: E402

EVAL_SEED = 910000  # + 1000 x seed; learn_reach evaluates from 900000


def one_seed(args: argparse.Namespace, seed: int, order: tuple[str, str], workdir: Path) -> dict:
    common = [f"task={args.task}", f"seed={seed}", f"robot.control_hz={args.hz}", "actor.realtime=true",
              "learner.utd_ratio=1", "learner.checkpoint_every_s=10"]
    runs, snapshots = {}, {}
    for mode in order:
        snapshots[mode], run = run_with_snapshots([*common, f"learner.learning={mode}"], f"learn-{mode}-s{seed}",
                                                  workdir, args.cap_minutes, args.target, label=f"{mode} seed {seed}",
                                                  stop_at=args.stop_at)
        runs[mode] = {"rolling_training_target": run["reached"], "final": run["final"],
                      "waited_for_learner_s": run["waited_for_learner_s"], "checkpoints": len(snapshots[mode])}
    for mode in order:  # after both runs: the evaluations never compete with a run for the CPU
        reached, evaluated = first_evaluated_at(snapshots[mode], args.target, args.eval_episodes,
                                                EVAL_SEED + 1000 * seed, coarse_minutes=0.5)
        runs[mode].update(reached=reached, evaluations=evaluated)
        shown = f"{reached['minutes']:.2f} min, {reached['env_steps']} env steps" if reached else "not reached"
        print(f"seed {seed} {mode}: evaluated at {args.target:.0%} after {shown} (robot waited "
              f"{runs[mode]['waited_for_learner_s'] or 0:.0f} s for the learner)", flush=True)
    a, s = runs["async"]["reached"], runs["sync"]["reached"]
    steps = a and s and a["env_steps"] and s["env_steps"]
    return {"seed": seed, "order": list(order),
            "time_ratio": round(a["minutes"] / s["minutes"], 3) if a and s else None,
            "env_steps_ratio": round(a["env_steps"] / s["env_steps"], 3) if steps else None, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hz", type=float, default=50.0)
    ap.add_argument("--target", type=float, default=0.8, help="deterministic evaluation success to reach")
    ap.add_argument("--stop-at", type=float, default=0.9, help="rolling training success that stops a run")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cap-minutes", type=float, default=12.0)
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--task", default="reach")
    args = ap.parse_args()
    if len(args.seeds) < 3 or len(set(args.seeds)) != len(args.seeds):
        ap.error("--seeds needs at least 3 different seeds (the figure is a median)")
    orders = [("async", "sync"), ("sync", "async")]
    with tempfile.TemporaryDirectory() as tmp:
        seeds = [one_seed(args, seed, orders[i % 2], Path(tmp)) for i, seed in enumerate(args.seeds)]
    ratios = [r["time_ratio"] for r in seeds]
    ratio = spread(ratios, 3)
    command = run_command(ap, args, "bench-learn-async", "learn_async.py")
    name = "learn_async" if args.task == "reach" else f"learn_async_{args.task}"
    path = write_result(name, command, [goal("async_over_sync_time_ratio", ratio["median"], "<=", 0.6)],
                        task=args.task, cap_minutes=args.cap_minutes, control_hz=args.hz, target_success=args.target,
                        stop_at_rolling_training_success=args.stop_at, seeds=args.seeds,
                        eval_seeds=[EVAL_SEED + 1000 * s for s in args.seeds], eval_episodes=args.eval_episodes,
                        time_ratio_per_seed=ratios,
                        time_ratio_min_max=[ratio["min"], ratio["max"]] if ratio["min"] is not None else None,
                        env_steps_ratio_per_seed=[r["env_steps_ratio"] for r in seeds], per_seed=seeds,
                        note="wall clock from launching each run (start-up included) until its first checkpoint "
                             "whose deterministic evaluation on fresh seeds succeeds >= the target; checkpoints "
                             "every 10 s, evaluated after both of a seed's runs; the modes' order alternating by "
                             "seed; same SAC settings and UTD 1 in both modes; median over seeds of each seed's "
                             "async / sync ratio")
    print(f"\nasync_over_sync_time_ratio = {ratio['median']} (median over seeds {ratios}; goal <= 0.6) -> {path}")


if __name__ == "__main__":
    main()
