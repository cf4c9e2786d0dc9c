"""Asynchronous vs synchronous learning on a robot paced in wall-clock time: SAC from scratch on ``reach``.

    make bench-learn-async      (python benchmarks/learn_async.py [--hz 50] [--target 0.8] [--seed 0])
    python benchmarks/learn_async.py --task push_cube --cap-minutes 30    (-> learn_async_push_cube.json)

Both runs are the real ``robolearn run`` (learner and actor processes, zmq, on-disk buffer) with the
simulated robot paced by a real clock at ``--hz`` ticks per second (``actor.realtime=true``), as
hardware would be, the same SAC settings and the same update-to-data ratio (1):

    async   the robot acts while the learner updates (``learner.learning=async``)
    sync    at each episode end the robot waits while the learner does the updates due for the steps
            collected, and the learner does not update while the robot acts (``learner.learning=sync``)

Success (last 50 episodes) is followed against env steps and wall clock; each run stops when it first
reaches ``--target``. Goal ``async_over_sync_time_ratio`` <= 0.6: wall-clock to the target of async over
sync (perfect overlap of acting and learning would give about 0.5). When the async run does not reach the
target within ``--cap-minutes``, the sync run (slower by construction) is skipped and the ratio is left
undefined.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, run_until_success, write_result  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hz", type=float, default=50.0)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cap-minutes", type=float, default=15.0)
    ap.add_argument("--task", default="reach")
    args = ap.parse_args()
    common = [f"task={args.task}", f"seed={args.seed}", f"robot.control_hz={args.hz}", "actor.realtime=true",
              "learner.utd_ratio=1"]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("async", "sync"):
            if mode == "sync" and not runs["async"]["reached"]:
                print(f"async did not reach {args.target:.0%} within {args.cap_minutes} min: sync skipped", flush=True)
                runs[mode] = {"reached": None, "skipped": "async did not reach the target within the cap"}
                continue
            runs[mode] = run_until_success([*common, f"learner.learning={mode}"], f"learn-{mode}", Path(tmp),
                                           args.target, args.cap_minutes, label=mode)
            r = runs[mode]["reached"]
            reached = f"{r['minutes']:.2f} min, {r['env_steps']} env steps" if r else "not reached"
            print(f"{mode}: {reached} (robot waited {runs[mode]['waited_for_learner_s'] or 0:.0f} s for the learner)",
                  flush=True)
    a, s = runs["async"]["reached"], runs["sync"]["reached"]
    ratio = round(a["minutes"] / s["minutes"], 3) if a and s else None
    steps_ratio = round(a["env_steps"] / s["env_steps"], 3) if a and s else None
    command = run_command(ap, args, "bench-learn-async", "learn_async.py")
    name = "learn_async" if args.task == "reach" else f"learn_async_{args.task}"
    path = write_result(name, command, [goal("async_over_sync_time_ratio", ratio, "<=", 0.6)],
                        task=args.task, cap_minutes=args.cap_minutes, control_hz=args.hz, target_success=args.target,
                        seed=args.seed,
                        env_steps_ratio=steps_ratio, runs=runs,
                        note="wall clock from launching each run until success over the last 50 episodes first "
                             "reaches the target; same SAC settings and UTD 1 in both modes")
    print(f"\nasync_over_sync_time_ratio = {ratio} (goal <= 0.6); env steps ratio {steps_ratio} -> {path}")


if __name__ == "__main__":
    main()
