"""Human-in-the-loop improvement on pick_cube: a BC-pretrained flow chunk policy, then HABC and Hi-ORS
online with the scripted human.

    make bench-hil        (python benchmarks/hil.py [--demos 20] [--rounds 8] [--episodes-per-round 10])
    python benchmarks/hil.py --takeover-ticks 8 --max-takeovers 1    (a gentler human -> hil_takeover8x1.json)

1. The scripted expert records ``--demos`` seeded pick_cube episodes; a flow-matching chunk policy
   (H = 10, execute 5 per chunk) is behaviour-cloned on them (``learner.bc``). This is the start.
2. For each of HABC and Hi-ORS, from a copy of that start: ``--rounds`` rounds of (collect
   ``--episodes-per-round`` episodes with the policy, where ``sim.intervention.ScriptedHuman`` takes over
   when the robot drifts off course; every step goes into a persistent ``ReplayBuffer`` with the demos,
   interventions flagged) then (updates = env steps collected x ``--utd``, each on a batch the algorithm
   samples from the buffer: ``algo.sample_batch`` / ``algo.update``, the learner's own calls).
3. Start and end success are measured on the same 100 seeded evaluation episodes (no human).

A control arm runs the same loop with plain behaviour cloning on the human's data only (demos and
intervention windows, weight 1: HG-DAgger), so the report shows how much of each gain is the weighting
and how much is simply more expert data.

Goals ``habc_success_gain`` and ``hiors_success_gain`` (end - start success) > 0.
"""

from __future__ import annotations

import argparse
import copy
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
DEMO_SEED, TRAIN_SEED, EVAL_SEED = 200_000, 300_000, 0


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


def improve(name: str, algo, env, buffer: ReplayBuffer, args) -> dict:
    human = ScriptedHuman(env, ScriptedHumanConfig(takeover_ticks=args.takeover_ticks,
                                                   max_takeovers=args.max_takeovers))
    rnd = 0
    recorder = TransitionRecorder(env.observation_spec, lambda arrays: buffer.add("robot", arrays))
    loop = episode_loop(algo.actor, env, human, [recorder], policy_version=lambda: rnd)
    steps, updates, human_ticks, log = 0, 0, 0, []
    t0 = time.perf_counter()
    for rnd in range(args.rounds):
        wins, rnd_steps = 0, 0
        for k in range(args.episodes_per_round):
            episode_id = rnd * args.episodes_per_round + k
            r = loop.run(seed=TRAIN_SEED + episode_id, episode_id=episode_id)
            if hasattr(algo, "on_episode"):
                algo.on_episode(r.episode_return)
            wins, rnd_steps, human_ticks = wins + r.success, rnd_steps + r.ticks, human_ticks + r.intervention_ticks
        steps += rnd_steps
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
            "minutes": round((time.perf_counter() - t0) / 60, 2), "rounds": log}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demos", type=int, default=20)
    ap.add_argument("--bc-steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--episodes-per-round", type=int, default=10)
    ap.add_argument("--utd", type=float, default=1.0)
    ap.add_argument("--eval-episodes", type=int, default=100)
    ap.add_argument("--takeover-ticks", type=int, default=ScriptedHumanConfig.takeover_ticks)
    ap.add_argument("--max-takeovers", type=int, default=ScriptedHumanConfig.max_takeovers)
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    env = PickCubeEnv()
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec,
                             FlowChunkPolicyConfig(chunk_horizon=H, max_prefix=0))
    t0 = time.perf_counter()
    data = expert_demos(env, args.demos, H, seed=DEMO_SEED)
    train_bc(policy, data, args.bc_steps, log_every=1000)
    bc_minutes = (time.perf_counter() - t0) / 60
    start = evaluate(policy, env, args.eval_episodes)
    print(f"BC on {args.demos} demos ({data.successes} successful): success {start:.2f} "
          f"over {args.eval_episodes} episodes", flush=True)

    results = {}
    for name, make in ARMS.items():
        with tempfile.TemporaryDirectory() as tmp:
            buffer = ReplayBuffer(Path(tmp) / name, env.observation_spec, env.action_spec, fsync="off")
            record_demos(env, buffer, args.demos)
            algo = make(copy.deepcopy(policy))
            torch.manual_seed(1)
            run = improve(name, algo, env, buffer, args)
            buffer.close()
        end = evaluate(algo.actor, env, args.eval_episodes)
        results[name] = {"start_success": start, "end_success": end, "gain": round(end - start, 4), **run}
        print(f"{name}: success {start:.2f} -> {end:.2f} after {run['env_steps']} env steps "
              f"({run['intervention_fraction']:.0%} by the human), {run['minutes']:.1f} min", flush=True)
    env.close()
    goals = [goal("habc_success_gain", results["habc"]["gain"], ">", 0.0),
             goal("hiors_success_gain", results["hiors"]["gain"], ">", 0.0)]
    control = results["human_data_bc"]["end_success"]
    command = run_command(ap, args, "bench-hil", "hil.py")
    default_human = (ScriptedHumanConfig.takeover_ticks, ScriptedHumanConfig.max_takeovers)
    gentler = (args.takeover_ticks, args.max_takeovers) != default_human
    name = f"hil_takeover{args.takeover_ticks}x{args.max_takeovers}" if gentler else "hil"
    path = write_result(name, command, goals, task="pick_cube", eval_episodes=args.eval_episodes,
                        eval_seeds=f"{EVAL_SEED}..{EVAL_SEED + args.eval_episodes - 1}",
                        bc={"demos": args.demos, "steps": args.bc_steps, "minutes": round(bc_minutes, 2),
                            "start_success": start},
                        settings=vars(args) | {"chunk_horizon": H, "execute_horizon": EXECUTE}, results=results,
                        end_success_over_control={k: round(results[k]["end_success"] - control, 4)
                                                  for k in ("habc", "hiors")},
                        control="human_data_bc: BC on demo + intervention windows only, weight 1 (HG-DAgger)")
    print(f"\nhabc_success_gain = {results['habc']['gain']}, hiors_success_gain = {results['hiors']['gain']}; "
          f"control (BC on the human's data) ended at {control:.2f} -> {path}")


if __name__ == "__main__":
    main()
