"""SAC updates per second: robolearn's SAC vs lerobot's ``SACAlgorithm`` (default Gaussian actor), one run.

    make bench-learner-speed        (python benchmarks/learner_speed.py [--rounds 5 --updates 100])

Three learners on the same in-memory batches (only the update is timed), the reach task's sizes (state 18,
action 6), batch 256, UTD 1 (one critic + actor + temperature update per call), fp32, the same torch thread
count for all:

    lerobot            lerobot's defaults: a shared state encoder (Linear 18->256, LayerNorm, tanh) that the
                       critics (input 256 + 6) and the actor read, 2 critics and an actor of 256x256 with a
                       LayerNorm after every layer, gradient clipping at norm 40
    robolearn_matched  robolearn's SAC configured like that: ``policy.state_encoder_dim=256``,
                       ``policy.layer_norm=true``, ``algo.grad_clip_norm=40`` (the goal's arm)
    robolearn          robolearn's defaults: the critics read the normalised state (input 18 + 6), no encoder,
                       no actor LayerNorm, no clipping (reported beside it, not the goal)

Left different: the activations (lerobot SiLU, robolearn ReLU) and lerobot's separate mean and std layers
(robolearn has one layer for both); neither is a measurable share of the work. Rounds interleave the three
(so machine drift hits each) and the figures are medians over rounds with min/max. Measured in the same run:
each update's floating-point work (``torch.utils.flop_counter``: every matmul, forward and backward), this
CPU's fp32 matmul peak (1024x1024 GEMMs), and from both the compute-bound limit of each learner. Goal
``sac_updates_ratio_vs_lerobot`` >= 3: robolearn_matched over lerobot, medians. Also reported: robolearn's
image SAC (one 96x96 camera through the shared CNN encoder, random shift of 4 pixels), updates/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

STATE, ACTION, BATCH = 18, 6, 256


def batches(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"obs": torch.randn(BATCH, STATE, generator=g), "next_obs": torch.randn(BATCH, STATE, generator=g),
             "action": torch.rand(BATCH, ACTION, generator=g) * 2 - 1, "reward": torch.randn(BATCH, generator=g),
             "discount": torch.full((BATCH,), 0.97)} for _ in range(n)]


LEROBOT_LAYOUT = {"policy": {"state_encoder_dim": 256, "layer_norm": True}, "algo": {"grad_clip_norm": 40.0}}


def robolearn_sac(policy_kw: dict | None = None, algo_kw: dict | None = None):
    from robolearn.learner.sac import SAC, SACConfig
    from robolearn.policies.mlp import MLPPolicyConfig, make_policy
    from robolearn.sim.reach import ReachEnv

    env = ReachEnv()
    policy = make_policy(env.observation_spec, env.action_spec,
                         MLPPolicyConfig(hidden_dims=[256, 256], **(policy_kw or {})))
    env.close()
    algo = SAC(policy, SACConfig(num_critics=2, critic_subset=2, critic_hidden_dims=[256, 256], **(algo_kw or {})))
    return algo.update


def robolearn_image_sac(size: int = 96):
    """Image SAC update on in-memory batches: the state plus one uint8 camera, random-shifted per batch."""
    from robolearn.learner.sac import SAC, SACConfig
    from robolearn.policies.encoders import random_shift
    from robolearn.policies.mlp import MLPPolicyConfig, make_policy
    from robolearn.sim.reach import ReachEnv
    from robolearn.specs import ArraySpec, ObservationSpec

    env = ReachEnv()
    obs_spec = ObservationSpec({"state": env.observation_spec.arrays["state"],
                                "front": ArraySpec((size, size, 3), dtype="uint8")})
    policy = make_policy(obs_spec, env.action_spec, MLPPolicyConfig(hidden_dims=[256, 256]))
    env.close()
    algo = SAC(policy, SACConfig(num_critics=2, critic_subset=2, critic_hidden_dims=[256, 256]))
    rng = np.random.default_rng(0)
    frames = torch.from_numpy(rng.integers(0, 256, (BATCH, size, size, 3), dtype=np.uint8))

    def update(b):
        obs = {"state": b["obs"], "front": random_shift(frames, rng)}
        next_obs = {"state": b["next_obs"], "front": random_shift(frames, rng)}
        return algo.update({**b, "obs": obs, "next_obs": next_obs})

    return update


def lerobot_sac():
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.gaussian_actor.configuration_gaussian_actor import GaussianActorConfig
    from lerobot.policies.gaussian_actor.modeling_gaussian_actor import GaussianActorPolicy
    from lerobot.rl.algorithms.sac.configuration_sac import SACAlgorithmConfig
    from lerobot.rl.algorithms.sac.sac_algorithm import SACAlgorithm
    from lerobot.utils.constants import ACTION as ACTION_KEY
    from lerobot.utils.constants import OBS_STATE

    cfg = GaussianActorConfig(input_features={OBS_STATE: PolicyFeature(type=FeatureType.STATE, shape=(STATE,))},
                              output_features={ACTION_KEY: PolicyFeature(type=FeatureType.ACTION, shape=(ACTION,))},
                              device="cpu", dataset_stats=None)
    algo = SACAlgorithm(GaussianActorPolicy(cfg), SACAlgorithmConfig.from_policy_config(cfg))
    algo.make_optimizers_and_scheduler()

    def update(b):
        item = {"state": {OBS_STATE: b["obs"]}, "action": b["action"], "reward": b["reward"],
                "next_state": {OBS_STATE: b["next_obs"]}, "done": torch.zeros(BATCH), "truncated": torch.zeros(BATCH)}
        return algo.update(iter([item]))

    return update


def time_updates(update, data: list[dict]) -> float:
    t0 = time.perf_counter()
    for b in data:
        update(b)
    return len(data) / (time.perf_counter() - t0)


def gflop_per_update(update, batch: dict) -> float:
    """The floating-point work of one update as torch counts it (matmuls and convolutions, forward and
    backward), GFLOP."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        update(batch)
    return counter.get_total_flops() / 1e9


def matmul_peak_gflops(seconds: float = 2.0) -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    return n * 2 * 1024 ** 3 / (time.perf_counter() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--image-updates", type=int, default=5)
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds must be >= 3 (the figures are medians over rounds)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = batches(args.updates)
    learners = {"lerobot": lerobot_sac(), "robolearn_matched": robolearn_sac(LEROBOT_LAYOUT["policy"],
                                                                             LEROBOT_LAYOUT["algo"]),
                "robolearn": robolearn_sac()}
    for fn in learners.values():  # warm-up
        time_updates(fn, data[:10])
    gflop = {name: gflop_per_update(fn, data[0]) for name, fn in learners.items()}
    rates: dict[str, list[float]] = {name: [] for name in learners}
    for r in range(args.rounds):
        order = list(learners) if r % 2 == 0 else list(reversed(learners))  # none always runs first
        for name in order:
            rates[name].append(time_updates(learners[name], data))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in learners)
              + " updates/s", flush=True)
    image_data = data[:args.image_updates]
    image_update = robolearn_image_sac()
    time_updates(image_update, image_data[:1])  # warm-up
    image_rate = time_updates(image_update, image_data)
    print(f"robolearn image SAC (96x96 camera, batch {BATCH}): {image_rate:.2f} updates/s", flush=True)
    peak = matmul_peak_gflops()
    med = {k: float(np.median(v)) for k, v in rates.items()}
    ratio = med["robolearn_matched"] / med["lerobot"]
    unmatched = med["robolearn"] / med["lerobot"]
    limit = {k: peak / g for k, g in gflop.items()}
    print("\nmedian updates/s: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
          + f"; matched ratio {ratio:.2f}, robolearn's defaults over lerobot's {unmatched:.2f}")
    for k in learners:
        print(f"  {k}: {gflop[k]:.3f} GFLOP per update, compute-bound limit ~{limit[k]:.0f} updates/s at "
              f"{peak:.0f} GFLOP/s; reaches {med[k] / limit[k]:.0%} of it")
    command = run_command(ap, args, "bench-learner-speed", "learner_speed.py")
    path = write_result(
        "learner_speed", command, [goal("sac_updates_ratio_vs_lerobot", round(ratio, 3), ">=", 3.0)],
        matched="robolearn configured like lerobot's default (state encoder 256 + LayerNorm + tanh shared with "
                "the critics, actor LayerNorm, gradient clipping 40); activations and lerobot's split mean/std "
                "layers left different",
        ratio_robolearn_defaults_vs_lerobot=round(unmatched, 3),
        updates_per_s={k: [round(x, 2) for x in v] for k, v in rates.items()},
        median_updates_per_s={k: round(v, 2) for k, v in med.items()},
        min_max_updates_per_s={k: [round(min(v), 2), round(max(v), 2)] for k, v in rates.items()},
        gflop_per_update={k: round(v, 4) for k, v in gflop.items()}, matmul_peak_gflops=round(peak, 1),
        compute_bound_updates_per_s={k: round(v, 1) for k, v in limit.items()},
        fraction_of_compute_bound={k: round(med[k] / limit[k], 3) for k in learners},
        image_sac_updates_per_s=round(image_rate, 3), image_sac="one 96x96 camera, 4-px random shift",
        settings={"critics": "2 x 256x256", "actor": "256x256", "batch": BATCH, "state": STATE, "action": ACTION,
                  "threads": args.threads, "utd": 1, "rounds": args.rounds, "updates_per_round": args.updates})
    print(f"sac_updates_ratio_vs_lerobot = {ratio:.2f} (goal >= 3, matched) -> {path}")


if __name__ == "__main__":
    main()
