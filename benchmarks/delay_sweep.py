"""Task success under inference delay: sync vs naive async vs latency-aware (state augmentation + prefix).

    make bench-delay-sweep        (python benchmarks/delay_sweep.py [--episodes 200] [--demos 1000])

1. The scripted expert records ``--demos`` seeded push_cube episodes (different seeds from the
   evaluation); a flow-matching chunk policy (H = 12, prefix-conditioned up to 6 committed actions,
   taking an optional mid-inference state) is behaviour-cloned on them (``learner.bc``).
2. Under a simulated clock each inference takes exactly d ticks, d in {0, 1, 2, 4, 6}; every mode
   runs the same ``--episodes`` seeded evaluation episodes at every d with the same policy:

       sync           stop, infer (d ticks holding still), execute s = 5 actions
       naive_async    lerobot: ask when queued / H <= 0.5, drop stale actions, blend overlaps 0.3/0.7
       latency_aware  ask when the queue would run out within the measured delay (or after s = 5),
                      send the committed actions, the policy keeps them as its chunk's prefix; two-stage
                      (ARLI): d_RL = 1 tick before the chunk is due the robot's then-current state is
                      sent and the chunk is finished with it (for d >= 2; the total delay is still d)
       latency_aware_one_stage   the same without the mid-inference state (an ablation)

Goal ``latency_aware_success_ratio_d4``: success at d = 4 >= 0.95 of success at d = 0. The same ratio is
printed for the baselines.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig  # noqa: E402
from robolearn.actor.episode import EpisodeLoop, SeedTorch  # noqa: E402
from robolearn.clock import DelaySampler, SimClock  # noqa: E402
from robolearn.inference.client import SimulatedLatencyClient  # noqa: E402
from robolearn.inference.runner import ChunkPolicyRunner  # noqa: E402
from robolearn.learner.bc import expert_demos, train_bc  # noqa: E402
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig  # noqa: E402
from robolearn.sim.cube_tasks import PushCubeEnv  # noqa: E402

DELAYS = [0, 1, 2, 4, 6]
# mode -> (chunking mode, splice, mid_observation_ticks)
MODES = {"sync": ("sync", "replace", 0), "naive_async": ("naive_async", "blend", 0),
         "latency_aware": ("latency_aware", "prefix", 1),
         "latency_aware_one_stage": ("latency_aware", "prefix", 0)}
H, MAX_PREFIX, EXECUTE = 12, 6, 5  # H - d >= d at the largest delay (6): one chunk per inference suffices
DEMO_SEED, EVAL_SEED = 100_000, 0


def evaluate(env, runner, mode: str, delay: int, episodes: int) -> dict:
    kind, splice, mid = MODES[mode]
    clock = SimClock(DelaySampler("fixed", ticks=delay))
    cfg = ChunkingConfig(mode=kind, splice=splice, max_prefix=MAX_PREFIX, execute_horizon=EXECUTE,
                         mid_observation_ticks=mid)
    executor = ChunkExecutor(SimulatedLatencyClient(runner, clock), env.action_spec, H, cfg)
    loop = EpisodeLoop(env, executor, clock, subscribers=[SeedTorch()])  # the actors' episode loop
    successes, ticks = 0, 0
    for ep in range(episodes):
        r = loop.run(seed=EVAL_SEED + ep, episode_id=ep)
        successes, ticks = successes + r.success, ticks + r.ticks
    m = executor.metrics.summary()
    return {"mode": mode, "delay": delay, "success": successes / episodes, "episodes": episodes,
            "mean_ticks": ticks / episodes, "stalled_ticks": m["stalled_ticks"],
            "chunk_utilisation": m["chunk_utilisation"], "delay_histogram": m["delay_histogram"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--demos", type=int, default=1000)
    ap.add_argument("--bc-steps", type=int, default=6000)
    ap.add_argument("--action-noise", type=float, default=0.0,
                    help="DART: the expert's actions are executed with this N(0, sigma) noise (normalised units)")
    ap.add_argument("--policy", help="reuse a trained state dict instead of training (for quick reruns)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    env = PushCubeEnv()
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec,
                             FlowChunkPolicyConfig(chunk_horizon=H, max_prefix=MAX_PREFIX, mid_observation=True))
    t0 = time.perf_counter()
    if args.policy:
        policy.load_state_dict(torch.load(args.policy, weights_only=True))
        bc = {"loaded": args.policy}
    else:
        data = expert_demos(env, args.demos, H, seed=DEMO_SEED, action_noise=args.action_noise, past=MAX_PREFIX)
        print(f"{args.demos} expert demos ({data.successes} successful, {len(data.states)} frames); "
              f"behaviour cloning for {args.bc_steps} steps...", flush=True)
        losses = train_bc(policy, data, args.bc_steps, log_every=1000)
        bc = {"demos": args.demos, "action_noise": args.action_noise, "frames": len(data.states),
              "steps": args.bc_steps,
              "final_loss": round(sum(losses[-100:]) / 100, 4), "seconds": round(time.perf_counter() - t0, 1)}
        out = Path(__file__).parent / "results" / "delay_sweep_policy.pt"
        torch.save(policy.state_dict(), out)
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim)
    rows = []
    for d in DELAYS:
        for mode in MODES:
            t1 = time.perf_counter()
            rows.append(evaluate(env, runner, mode, d, args.episodes))
            r = rows[-1]
            print(f"  d={d} {mode:>24}: success {r['success']:.3f}  stalled {r['stalled_ticks']:>5}  "
                  f"({time.perf_counter() - t1:.0f} s)", flush=True)
    env.close()
    success = {(r["mode"], r["delay"]): r["success"] for r in rows}
    ratio = {m: (success[(m, 4)] / success[(m, 0)] if success[(m, 0)] > 0 else None) for m in MODES}
    print(f"\n{'mode':>24} " + " ".join(f"{'d=' + str(d):>7}" for d in DELAYS) + f" {'d4/d0':>7}")
    for m in MODES:
        print(f"{m:>24} " + " ".join(f"{success[(m, d)]:>7.3f}" for d in DELAYS)
              + f" {'-' if ratio[m] is None else round(ratio[m], 3):>7}")
    command = run_command(ap, args, "bench-delay-sweep", "delay_sweep.py")
    goals = [goal("latency_aware_success_ratio_d4", ratio["latency_aware"], ">=", 0.95)]
    path = write_result("delay_sweep", command, goals,
                        task="push_cube", ratios_d4_over_d0=ratio, results=rows, bc=bc,
                        settings={"chunk_horizon": H, "max_prefix": MAX_PREFIX, "execute_horizon": EXECUTE,
                                  "mid_observation_ticks": MODES["latency_aware"][2],
                                  "delays": DELAYS, "eval_seeds": f"{EVAL_SEED}..{EVAL_SEED + args.episodes - 1}"})
    print(f"\nlatency_aware_success_ratio_d4 = {ratio['latency_aware']} (goal >= 0.95) -> {path}")


if __name__ == "__main__":
    main()
