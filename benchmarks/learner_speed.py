"""SAC updates per second: robolearn's SAC vs lerobot's ``SACAlgorithm`` (default Gaussian actor), one run.

    make bench-learner-speed        (python benchmarks/learner_speed.py [--rounds 3 --updates 100])

Identical settings: 2 critics of 256x256, an actor of 256x256, batch 256, the reach task's sizes
(state 18, action 6), UTD 1 (one critic + actor + temperature update per call), fp32, the same torch
thread count, batches prepared in memory beforehand (only the update is timed). Rounds alternate
(robolearn, lerobot, ...) so machine drift hits both; medians over rounds. Also measured in the same
run: this CPU's fp32 matmul peak (1024x1024 GEMMs), and from it the compute-bound limit of one update
taken as 0.6 GFLOP (the issue's estimate for these sizes). Goal ``sac_updates_ratio_vs_lerobot`` >= 4.
Also reported: robolearn's image SAC (one 96x96 camera through the shared CNN encoder, random shift of
4 pixels, same critics and batch), updates/s.
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
GFLOP_PER_UPDATE = 0.6


def batches(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"obs": torch.randn(BATCH, STATE, generator=g), "next_obs": torch.randn(BATCH, STATE, generator=g),
             "action": torch.rand(BATCH, ACTION, generator=g) * 2 - 1, "reward": torch.randn(BATCH, generator=g),
             "discount": torch.full((BATCH,), 0.97)} for _ in range(n)]


def robolearn_sac():
    from robolearn.learner.sac import SAC, SACConfig
    from robolearn.policies.mlp import MLPPolicyConfig, make_policy
    from robolearn.sim.reach import ReachEnv

    env = ReachEnv()
    policy = make_policy(env.observation_spec, env.action_spec, MLPPolicyConfig(hidden_dims=[256, 256]))
    env.close()
    algo = SAC(policy, SACConfig(num_critics=2, critic_subset=2, critic_hidden_dims=[256, 256]))
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
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--updates", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--image-updates", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = batches(args.updates)
    ours, theirs = robolearn_sac(), lerobot_sac()
    for fn in (ours, theirs):  # warm-up
        time_updates(fn, data[:10])
    rates: dict[str, list[float]] = {"robolearn": [], "lerobot": []}
    for r in range(args.rounds):
        rates["robolearn"].append(time_updates(ours, data))
        rates["lerobot"].append(time_updates(theirs, data))
        print(f"round {r + 1}/{args.rounds}: robolearn {rates['robolearn'][-1]:.1f} updates/s, "
              f"lerobot {rates['lerobot'][-1]:.1f} updates/s", flush=True)
    image_data = data[:args.image_updates]
    image_update = robolearn_image_sac()
    time_updates(image_update, image_data[:1])  # warm-up
    image_rate = time_updates(image_update, image_data)
    print(f"robolearn image SAC (96x96 camera, batch {BATCH}): {image_rate:.2f} updates/s", flush=True)
    peak = matmul_peak_gflops()
    med = {k: float(np.median(v)) for k, v in rates.items()}
    ratio = med["robolearn"] / med["lerobot"]
    limit = peak / GFLOP_PER_UPDATE
    print(f"\nmedian updates/s: robolearn {med['robolearn']:.1f}, lerobot {med['lerobot']:.1f}, ratio {ratio:.2f}")
    print(f"fp32 matmul peak {peak:.0f} GFLOP/s -> compute-bound limit ~{limit:.0f} updates/s; "
          f"robolearn reaches {med['robolearn'] / limit:.0%} of it")
    command = run_command(ap, args, "bench-learner-speed", "learner_speed.py")
    path = write_result("learner_speed", command, [goal("sac_updates_ratio_vs_lerobot", round(ratio, 3), ">=", 4.0)],
                        updates_per_s={k: [round(x, 2) for x in v] for k, v in rates.items()},
                        median_updates_per_s={k: round(v, 2) for k, v in med.items()},
                        matmul_peak_gflops=round(peak, 1), compute_bound_updates_per_s=round(limit, 1),
                        fraction_of_compute_bound=round(med["robolearn"] / limit, 3),
                        image_sac_updates_per_s=round(image_rate, 3), image_sac="one 96x96 camera, 4-px random shift",
                        settings={"critics": "2 x 256x256", "actor": "256x256", "batch": BATCH, "state": STATE,
                                  "action": ACTION, "threads": args.threads, "utd": 1})
    print(f"sac_updates_ratio_vs_lerobot = {ratio:.2f} (goal >= 4) -> {path}")


if __name__ == "__main__":
    main()
