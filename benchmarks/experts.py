"""Success of each sim task's scripted expert over 100 seeded episodes (goal ``min_expert_success`` >= 0.95).

    make bench-experts        (python benchmarks/experts.py [--episodes 100])

Tasks with a scripted expert: reach, push_cube, pick_cube, pick_cube_color (domain randomisation on,
as configured by default).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

from robolearn.registry import lookup  # noqa: E402
from robolearn.runtime.builtins import register_builtins  # noqa: E402

TASKS_WITH_EXPERTS = ["reach", "push_cube", "pick_cube", "pick_cube_color"]


def run_expert(task: str, episodes: int) -> dict:
    entry = lookup("task", task)
    env = entry.factory(entry.config_cls(), lookup("robot", "sim_so101").config_cls())
    successes, steps, t0 = 0, 0, time.perf_counter()
    for seed in range(episodes):
        env.reset(seed=seed)
        done, info = False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(env.expert_action())
            done = terminated or truncated
            steps += 1
        successes += int(bool(info.get("success")))
    env.close()
    return {"task": task, "episodes": episodes, "success_rate": successes / episodes,
            "mean_steps": steps / episodes, "seconds": time.perf_counter() - t0}


def main() -> None:
    register_builtins()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100)
    args = ap.parse_args()
    results = [run_expert(t, args.episodes) for t in TASKS_WITH_EXPERTS]
    print(f"{'task':>16} {'success':>8} {'mean steps':>11}")
    for r in results:
        print(f"{r['task']:>16} {r['success_rate']:8.0%} {r['mean_steps']:11.1f}")
    worst = min(r["success_rate"] for r in results)
    command = run_command(ap, args, "bench-experts", "experts.py")
    path = write_result("experts", command, [goal("min_expert_success", worst, ">=", 0.95)], tasks=results,
                        note="seeded episodes 0..N-1 of each task with a scripted expert")
    print(f"min_expert_success = {worst:.2f} (goal >= 0.95) -> {path}")


if __name__ == "__main__":
    main()
