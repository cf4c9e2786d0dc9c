"""Human-in-the-loop improvement on pick_cube with a human who is no oracle: a BC-pretrained flow chunk policy,
then HABC and Hi-ORS online, against a control arm, for several seeds.

    make bench-hil        (python benchmarks/hil.py [--seeds 0 1 2] [--demos 20] [--rounds 8] [--episodes-per-round 10])
    python benchmarks/hil.py --oracle       (an oracle human: reacts at once, exact expert actions, 2 takeovers)

Per seed s:
1. The scripted expert records ``--demos`` seeded pick_cube episodes; a flow-matching chunk policy (H = 10, execute
   5 per chunk) is behaviour-cloned on them (``learner.bc``, initial weights and batches from s). This is the start.
2. For each arm, from a copy of that start: ``--rounds`` rounds of (collect ``--episodes-per-round`` episodes with
   the policy under the scripted human, every step into a persistent ``ReplayBuffer`` with the demos,
   interventions flagged) then (updates = env steps collected x ``--utd``, each on a batch the algorithm samples
   from the buffer: ``algo.sample_batch`` / ``algo.update``, the learner's own calls). Arms: HABC, Hi-ORS, and
   the control, plain behaviour cloning on the human's data only (demos and intervention windows, weight 1:
   HG-DAgger), so the gain of the weighting shows apart from the gain of more expert data.
3. Start and end success on the same 100 evaluation episodes (no human), seeds from 600000: never used while
   developing (the oracle human's runs evaluated on 0..99).

The human (``sim.intervention.ScriptedHuman``) is the same for every arm and seed, and is no oracle: it takes
over only when the robot is clearly failing (``--drift-threshold``, or no success after ``--stuck-after`` of
the episode), ``--reaction-ticks`` late, drives with noisy actions (``--action-noise``), at most
``--max-takeovers`` times an episode, each a nudge of ``--takeover-ticks``; so a real share of the collected
episodes fail. Its effort (intervention steps) is reported per arm. The defaults were chosen on development seeds
(400000+, one BC start, 30 episodes each): with one takeover of 25 ticks (the oracle's length) the human finished
every episode, driving 61% of the ticks; with 10 ticks and noise 0.3 it finished 80%, driving 16%.

Goals, means over seeds: ``habc_success_gain`` and ``hiors_success_gain`` (end - start) > 0, and
``habc_gain_over_control`` and ``hiors_gain_over_control`` (end success minus the control's end success) > 0.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig  # noqa: E402
from robolearn.actor.episode import EpisodeLoop, SeedTorch  # noqa: E402
from robolearn.actor.transition_recorder import TransitionRecorder  # noqa: E402
from robolearn.buffer.replay_buffer import ReplayBuffer  # noqa: E402
from robolearn.clock import SimClock  # noqa: E402
from robolearn.inference.client import SimulatedLatencyClient  # noqa: E402
from robolearn.inference.runner import ChunkPolicyRunner  # noqa: E402
from robolearn.learner.bc import expert_demos, train_bc  # noqa: E402
from robolearn.learner.chunk_batch import sample_chunk_windows  # noqa: E402
from robolearn.learner.config import LearnerConfig  # noqa: E402
from robolearn.learner.habc import HABC, HABCConfig  # noqa: E402
from robolearn.learner.hiors import HiORS, HiORSConfig  # noqa: E402
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig  # noqa: E402
from robolearn.sim.cube_tasks import PickCubeEnv  # noqa: E402
from robolearn.sim.intervention import ScriptedHuman, ScriptedHumanConfig  # noqa: E402
from robolearn.transition import ActionSource, TransitionWriter  # noqa: E402

H, EXECUTE = 10, 5
BATCH_SIZE = LearnerConfig().batch_size  # learner.batch_size with algo=habc / hiors
DEMO_SEED, TRAIN_SEED, EVAL_SEED = 200_000, 300_000, 600_000


def episode_loop(policy, env, human=None, subscribers=(), policy_version=lambda: 0) -> EpisodeLoop:
    """The actors' episode loop: sync chunks of H, s = EXECUTE executed, inference without delay."""
    clock = SimClock()
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim)
    cfg = ChunkingConfig(mode="sync", splice="replace", execute_horizon=EXECUTE, max_prefix=0)
    executor = ChunkExecutor(SimulatedLatencyClient(runner, clock), env.action_spec, H, cfg)
    return EpisodeLoop(env, executor, clock, human, subscribers=[SeedTorch(), *subscribers],
                       policy_version=policy_version)


def evaluate(policy, env, episodes: int) -> float:
    loop = episode_loop(policy, env)
    return sum(loop.run(seed=EVAL_SEED + ep, episode_id=ep).success for ep in range(episodes)) / episodes


def record_demos(env, buffer: ReplayBuffer, n: int) -> None:
    """The same expert episodes BC saw, into the buffer's demo partition."""
    for ep in range(n):
        obs, _ = env.reset(seed=DEMO_SEED + ep)
        writer, done, step = TransitionWriter(env.observation_spec), False, 0
        while not done:
            action = env.expert_action()
            nxt, reward, term, trunc, info = env.step(action)
            done = term or trunc
            writer.add(obs, action, action_source=ActionSource.SCRIPTED, intervention=False, reward=reward,
                       terminated=term, truncated=trunc, success=bool(info.get("success")), episode_id=ep,
                       step=step, tick=step, t_obs=0.0, t_act=0.0, policy_version=0, chunk_id=-1,
                       chunk_index=0, delay_ticks=0)
            obs, step = nxt, step + 1
        buffer.add("expert", writer.flush(final_obs=obs), partition="demo")


class HumanDataBC:
    """The control arm (HG-DAgger): flow-matching BC on windows that start on a demo or intervention step,
    drawn in proportion to their counts, every window weight 1; the robot's own steps are never imitated."""

    def __init__(self, policy: FlowChunkPolicy, lr: float = 3e-4) -> None:
        self.actor = policy
        self.actor_opt = torch.optim.Adam(policy.parameters(), lr=lr)

    def sample_batch(self, buffer: ReplayBuffer, action_spec, batch_size: int) -> dict[str, torch.Tensor]:
        sizes = buffer.partition_sizes()
        return sample_chunk_windows(buffer, action_spec, batch_size, self.actor.horizon,
                                    mix={"demo": sizes["demo"], "intervention": sizes["intervention"]})

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.actor.train()
        loss = self.actor.loss(batch["obs"], batch["actions"], valid=batch["valid"]).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        self.actor.eval()
        return {"actor_loss": loss.item()}


ARMS = {"habc": lambda p: HABC(p, HABCConfig()), "hiors": lambda p: HiORS(p, HiORSConfig()),
        "human_data_bc": HumanDataBC}


def human_config(args, seed: int) -> ScriptedHumanConfig:
    if args.oracle:
        return ScriptedHumanConfig(seed=seed)
    return ScriptedHumanConfig(drift_threshold=args.drift_threshold, stuck_after=args.stuck_after,
                               takeover_ticks=args.takeover_ticks, max_takeovers=args.max_takeovers,
                               reaction_ticks=args.reaction_ticks, action_noise=args.action_noise, seed=seed)


def improve(name: str, algo, env, buffer: ReplayBuffer, args, seed: int) -> dict:
    human = ScriptedHuman(env, human_config(args, seed))
    rnd = 0
    recorder = TransitionRecorder(env.observation_spec, lambda arrays: buffer.add("robot", arrays))
    loop = episode_loop(algo.actor, env, human, [recorder], policy_version=lambda: rnd)
    steps, updates, human_ticks, collected_wins, log = 0, 0, 0, 0, []
    t0 = time.perf_counter()
    for rnd in range(args.rounds):
        wins, rnd_steps = 0, 0
        for k in range(args.episodes_per_round):
            episode_id = rnd * args.episodes_per_round + k
            r = loop.run(seed=TRAIN_SEED + episode_id, episode_id=episode_id)
            if hasattr(algo, "on_episode"):
                algo.on_episode(r.episode_return)
            wins, rnd_steps, human_ticks = wins + r.success, rnd_steps + r.ticks, human_ticks + r.intervention_ticks
        steps, collected_wins = steps + rnd_steps, collected_wins + wins
        n_updates = int(args.utd * rnd_steps)
        metrics = {}
        for _ in range(n_updates):
            metrics = algo.update(algo.sample_batch(buffer, env.action_spec, BATCH_SIZE))
        updates += n_updates
        log.append({"round": rnd, "collect_success": wins / args.episodes_per_round, "env_steps": steps,
                    "updates": updates, **{k: round(v, 4) for k, v in metrics.items()}})
        print(f"  {name} round {rnd}: collected {args.episodes_per_round} episodes ({wins} successes, "
              f"{rnd_steps} steps), {n_updates} updates  {metrics}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"env_steps": steps, "updates": updates, "intervention_steps": human_ticks,
            "intervention_fraction": round(human_ticks / max(1, steps), 4),
            "collected_success": round(collected_wins / (args.rounds * args.episodes_per_round), 4),
            "minutes": round((time.perf_counter() - t0) / 60, 2), "rounds": log}


def run_seed(env, args, seed: int) -> dict:
    """One seed: its BC start, then every arm from a copy of it."""
    torch.manual_seed(seed)
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec,
                             FlowChunkPolicyConfig(chunk_horizon=H, max_prefix=0))
    t0 = time.perf_counter()
    data = expert_demos(env, args.demos, H, seed=DEMO_SEED)
    train_bc(policy, data, args.bc_steps, seed=seed, log_every=1000)
    bc_minutes = (time.perf_counter() - t0) / 60
    start = evaluate(policy, env, args.eval_episodes)
    print(f"seed {seed}: BC on {args.demos} demos ({data.successes} successful): success {start:.2f} "
          f"over {args.eval_episodes} episodes", flush=True)
    arms = {}
    for name, make in ARMS.items():
        with tempfile.TemporaryDirectory() as tmp:
            buffer = ReplayBuffer(Path(tmp) / name, env.observation_spec, env.action_spec, fsync="off")
            record_demos(env, buffer, args.demos)
            algo = make(copy.deepcopy(policy))
            torch.manual_seed(1000 + seed)
            run = improve(name, algo, env, buffer, args, seed)
            buffer.close()
        end = evaluate(algo.actor, env, args.eval_episodes)
        arms[name] = {"start_success": start, "end_success": end, "gain": round(end - start, 4), **run}
        print(f"seed {seed} {name}: success {start:.2f} -> {end:.2f} after {run['env_steps']} env steps "
              f"({run['intervention_fraction']:.0%} by the human, {run['collected_success']:.0%} of the collected "
              f"episodes succeeded), {run['minutes']:.1f} min", flush=True)
    control = arms["human_data_bc"]["end_success"]
    return {"seed": seed, "bc_minutes": round(bc_minutes, 2), "start_success": start, "arms": arms,
            "gain_over_control": {k: round(arms[k]["end_success"] - control, 4) for k in ("habc", "hiors")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--demos", type=int, default=20)
    ap.add_argument("--bc-steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--episodes-per-round", type=int, default=10)
    ap.add_argument("--utd", type=float, default=1.0)
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--drift-threshold", type=float, default=0.5, help="the human's: clearly failing (oracle 0.35)")
    ap.add_argument("--stuck-after", type=float, default=0.75, help="the human's (oracle 0.6)")
    ap.add_argument("--takeover-ticks", type=int, default=10,
                    help=f"the human's nudge (oracle {ScriptedHumanConfig.takeover_ticks})")
    ap.add_argument("--max-takeovers", type=int, default=1, help="the human's budget per episode (oracle 2)")
    ap.add_argument("--reaction-ticks", type=int, default=5, help="the human's (oracle 0)")
    ap.add_argument("--action-noise", type=float, default=0.3, help="the human's, normalised units (oracle 0)")
    ap.add_argument("--oracle", action="store_true", help="an oracle human instead (ScriptedHumanConfig())")
    args = ap.parse_args()
    torch.set_num_threads(2)
    env = PickCubeEnv()
    seeds = [run_seed(env, args, seed) for seed in args.seeds]
    env.close()

    def mean_min_max(values: list[float]) -> dict:
        return {"mean": round(statistics.fmean(values), 4), "min": min(values), "max": max(values)}

    summary = {"gain": {k: mean_min_max([s["arms"][k]["gain"] for s in seeds]) for k in ARMS},
               "gain_over_control": {k: mean_min_max([s["gain_over_control"][k] for s in seeds])
                                     for k in ("habc", "hiors")},
               "intervention_steps": {k: mean_min_max([s["arms"][k]["intervention_steps"] for s in seeds])
                                      for k in ARMS},
               "collected_success": {k: mean_min_max([s["arms"][k]["collected_success"] for s in seeds])
                                     for k in ARMS}}
    goals = [goal("habc_success_gain", summary["gain"]["habc"]["mean"], ">", 0.0),
             goal("hiors_success_gain", summary["gain"]["hiors"]["mean"], ">", 0.0),
             goal("habc_gain_over_control", summary["gain_over_control"]["habc"]["mean"], ">", 0.0),
             goal("hiors_gain_over_control", summary["gain_over_control"]["hiors"]["mean"], ">", 0.0)]
    command = run_command(ap, args, "bench-hil", "hil.py")
    name = "hil_oracle" if args.oracle else "hil"
    path = write_result(name, command, goals, task="pick_cube", eval_episodes=args.eval_episodes,
                        eval_seeds=f"{EVAL_SEED}..{EVAL_SEED + args.eval_episodes - 1}",
                        human=vars(human_config(args, 0)) | {"seed": "the benchmark seed"},
                        settings=vars(args) | {"chunk_horizon": H, "execute_horizon": EXECUTE}, summary=summary,
                        seeds=seeds,
                        control="human_data_bc: BC on demo + intervention windows only, weight 1 (HG-DAgger)")
    print(f"\nmeans over seeds {args.seeds}: {json.dumps(summary)} -> {path}")


if __name__ == "__main__":
    main()
