"""Task success under inference delay: sync vs naive async vs latency-aware, one-stage and honest two-stage.

    make bench-delay-sweep        (python benchmarks/delay_sweep.py [--policies 3] [--episodes 200] [--demos 1000])

1. The scripted expert records ``--demos`` seeded push_cube episodes (seeds from 100000); ``--policies``
   independently trained policies of each kind are behaviour-cloned on them (``learner.bc``; seed i sets the
   initial weights and the batch order):
       one_stage   a flow-matching chunk policy (H = 12, prefix-conditioned up to 6 committed actions)
       two_stage   the same flow as a heavy trunk on the first observation and a light head that alone sees the
                   mid-inference state (ARLI late binding, ``FlowChunkPolicyConfig.mid_observation``); its head's
                   share of the FLOPs is counted and must be <= mid_ticks / d at every two-stage d
2. Under a simulated clock each inference takes exactly d ticks, d in {0, 1, 2, 4, 6}; every cell runs the same
   ``--episodes`` evaluation episodes on seeds from 500000, never used while developing (development used 0..199):

       sync                       one_stage policies: stop, infer (d ticks holding still), execute s = 5 actions
       naive_async                one_stage policies: lerobot's rule (ask when queued / H <= 0.5), blend 0.3/0.7
       latency_aware_one_stage    one_stage policies: ask when the queue would run out within the measured delay
                                  (or after s = 5), the committed actions are the chunk's clamped prefix
       latency_aware_two_stage    two_stage policies: the same, and the trunk runs when the request is made; the
                                  robot's state d_RL = 1 tick before the chunk is due goes to the head, which is
                                  charged that tick (for d >= 2; below that a request is one-stage)

Per cell: the mean success over the policies with its standard error (across policies) and each policy's figure.
Goal ``latency_aware_success_ratio_d4``: for the better of the two latency-aware modes, the mean over its policies
of success at d = 4 over success at d = 0 (each policy's own ratio), >= 0.95. Both modes' ratios and the baselines'
are in the results.
"""

from __future__ import annotations

import argparse
import math
import statistics
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
H, MAX_PREFIX, EXECUTE, MID_TICKS = 12, 6, 5, 1  # H - d >= d at the largest delay (6): one chunk per inference
DEMO_SEED, EVAL_SEED = 100_000, 500_000
ONE_STAGE = FlowChunkPolicyConfig(chunk_horizon=H, max_prefix=MAX_PREFIX)
# a trunk of 3 x 1024 and a head of 2 x 64 (every flow step): the head is ~11% of the FLOPs (<= 1/6 for d = 6)
TWO_STAGE = FlowChunkPolicyConfig(chunk_horizon=H, max_prefix=MAX_PREFIX, mid_observation=True,
                                  hidden_dims=[1024, 1024, 1024], head_dims=[64, 64], trunk_features=128)
# mode -> (policy kind, chunking mode, splice, mid_observation_ticks)
MODES = {"sync": ("one_stage", "sync", "replace", 0), "naive_async": ("one_stage", "naive_async", "blend", 0),
         "latency_aware_one_stage": ("one_stage", "latency_aware", "prefix", 0),
         "latency_aware_two_stage": ("two_stage", "latency_aware", "prefix", MID_TICKS)}
KINDS = {"one_stage": ONE_STAGE, "two_stage": TWO_STAGE}


def make_policy(env, config: FlowChunkPolicyConfig, seed: int) -> FlowChunkPolicy:
    torch.manual_seed(seed)  # the initial weights
    return FlowChunkPolicy(env.observation_spec, env.action_spec, config)


def evaluate(env, runner, mode: str, delay: int, episodes: int) -> dict:
    _, kind, splice, mid = MODES[mode]
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
    return {"success": successes / episodes, "mean_ticks": ticks / episodes, "stalled_ticks": m["stalled_ticks"],
            "delay_histogram": m["delay_histogram"]}


def mean_se(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error across policies."""
    return statistics.fmean(values), (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", type=int, default=3, help="independently trained policies of each kind")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--demos", type=int, default=1000)
    ap.add_argument("--bc-steps", type=int, default=6000)
    args = ap.parse_args()
    torch.set_num_threads(2)
    env = PushCubeEnv()
    t0 = time.perf_counter()
    data = expert_demos(env, args.demos, H, seed=DEMO_SEED, past=MAX_PREFIX)
    print(f"{args.demos} expert demos ({data.successes} successful, {len(data.states)} frames, "
          f"{time.perf_counter() - t0:.0f} s)", flush=True)
    flops = make_policy(env, TWO_STAGE, 0).trunk_head_flops()
    print(f"two-stage: trunk {flops['trunk'] / 1e6:.2f} MFLOP, head {flops['head'] / 1e6:.2f} MFLOP per request: "
          f"head share {flops['head_share']:.3f}", flush=True)
    per_policy: dict[str, list[dict]] = {m: [] for m in MODES}  # mode -> one entry per policy: {delay: result}
    bc = []
    for seed in range(args.policies):
        for kind, config in KINDS.items():
            policy = make_policy(env, config, seed)
            t1 = time.perf_counter()
            losses = train_bc(policy, data, args.bc_steps, seed=seed).losses
            bc.append({"kind": kind, "seed": seed, "final_loss": round(sum(losses[-100:]) / 100, 4),
                       "seconds": round(time.perf_counter() - t1, 1)})
            print(f"policy {kind} seed {seed}: bc loss {bc[-1]['final_loss']} ({bc[-1]['seconds']:.0f} s)", flush=True)
            runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim)
            for mode in [m for m, spec in MODES.items() if spec[0] == kind]:
                cells = {}
                for d in DELAYS:
                    t1 = time.perf_counter()
                    cells[d] = evaluate(env, runner, mode, d, args.episodes)
                    print(f"  d={d} {mode:>24}: success {cells[d]['success']:.3f}  stalled "
                          f"{cells[d]['stalled_ticks']:>5}  ({time.perf_counter() - t1:.0f} s)", flush=True)
                per_policy[mode].append(cells)
    env.close()
    table, ratios = {}, {}
    for mode, runs in per_policy.items():
        table[mode] = {}
        for d in DELAYS:
            mean, se = mean_se([r[d]["success"] for r in runs])
            table[mode][d] = {"mean": round(mean, 4), "se": round(se, 4),
                              "per_policy": [r[d]["success"] for r in runs]}
        per = [r[4]["success"] / r[0]["success"] if r[0]["success"] > 0 else 0.0 for r in runs]
        mean, se = mean_se(per)
        ratios[mode] = {"mean": round(mean, 4), "se": round(se, 4), "per_policy": [round(x, 4) for x in per]}
    print(f"\n{'mode':>24} " + " ".join(f"{'d=' + str(d):>13}" for d in DELAYS) + f" {'d4/d0':>13}")
    for mode in MODES:
        cells = [f"{table[mode][d]['mean']:.3f}+-{table[mode][d]['se']:.3f}" for d in DELAYS]
        print(f"{mode:>24} " + " ".join(f"{c:>13}" for c in cells)
              + f" {ratios[mode]['mean']:>7.3f}+-{ratios[mode]['se']:.3f}")
    best = max(("latency_aware_one_stage", "latency_aware_two_stage"), key=lambda m: ratios[m]["mean"])
    two_stage_ds = [d for d in DELAYS if d > MID_TICKS]
    command = run_command(ap, args, "bench-delay-sweep", "delay_sweep.py")
    goals = [goal("latency_aware_success_ratio_d4", ratios[best]["mean"], ">=", 0.95),
             goal("two_stage_head_flops_share", round(flops["head_share"], 4), "<=",
                  round(MID_TICKS / max(two_stage_ds), 4))]
    path = write_result("delay_sweep", command, goals, task="push_cube", best_latency_aware_mode=best,
                        ratios_d4_over_d0=ratios, success=table, two_stage_flops=flops, bc=bc,
                        settings={"chunk_horizon": H, "max_prefix": MAX_PREFIX, "execute_horizon": EXECUTE,
                                  "mid_observation_ticks": MID_TICKS, "delays": DELAYS, "demos": args.demos,
                                  "demo_seeds": f"{DEMO_SEED}..{DEMO_SEED + args.demos - 1}",
                                  "bc_steps": args.bc_steps, "policies_per_kind": args.policies,
                                  "eval_seeds": f"{EVAL_SEED}..{EVAL_SEED + args.episodes - 1}",
                                  "one_stage": vars(ONE_STAGE), "two_stage": vars(TWO_STAGE)},
                        details_per_policy={m: [{d: {k: v for k, v in c.items() if k != "success"}
                                                 for d, c in r.items()} for r in runs]
                                            for m, runs in per_policy.items()})
    print(f"\nlatency_aware_success_ratio_d4 = {ratios[best]['mean']} ({best}; goal >= 0.95) -> {path}")


if __name__ == "__main__":
    main()
