"""``robolearn eval``: a run's latest checkpoint in its task, in-process, on seeded episodes, through the same
``EpisodeLoop`` and chunk executor the actors use (each chunk executed whole, no inference delay, no
exploration noise with ``deterministic=true``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig
from robolearn.actor.episode import EpisodeLoop
from robolearn.builders import build_policy, build_task
from robolearn.checkpoint import load_checkpoint
from robolearn.clock import SimClock
from robolearn.config import load_run_config
from robolearn.inference.client import SimulatedLatencyClient
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.rundir import RunDir


def _judged_by_the_simulator(env):
    """A ``task=real`` run is evaluated on its sim twin: a scripted person who says success the tick the hidden
    sim success holds, whatever reward the run learned from (a person's labels or a classifier's)."""
    from robolearn.hardware.operator import ScriptedPerson, ScriptedPersonConfig

    if env.scene is None:
        raise ValueError("robolearn eval runs on the sim twin (robot=sim_so101); on hardware, run the policy with a "
                         "person labelling it")
    env.classifier = None
    env.attach_operator(ScriptedPerson(ScriptedPersonConfig(reaction_ticks=0), env.scene))
    return env


def evaluate(run_dir: Path, episodes: int = 20, seed: int = 12345, deterministic: bool = True) -> dict:
    run = RunDir(run_dir)
    cfg = load_run_config(run.config)
    ckpt = load_checkpoint(run.checkpoint)
    env = build_task(cfg)
    policy = build_policy(cfg, env.observation_spec, env.action_spec)
    policy.load_state_dict(ckpt.policy_weights)
    policy.eval()
    runner = ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim, version=ckpt.version,
                               explore=not deterministic)
    clock = SimClock()
    executor = ChunkExecutor(SimulatedLatencyClient(runner, clock), env.action_spec, getattr(policy, "horizon", 1),
                             ChunkingConfig(mode="sync", splice="replace", max_prefix=0))
    if hasattr(env, "attach_operator"):  # task=real: judged by the sim twin's own success, never a learned reward
        env = _judged_by_the_simulator(env)
    loop = EpisodeLoop(env, executor, clock, policy_version=lambda: ckpt.version)
    env.robot.connect()
    try:
        results = [loop.run(seed=seed + ep, episode_id=ep) for ep in range(episodes)]
    finally:
        env.close()
    return {"episodes": episodes, "success_rate": sum(r.success for r in results) / episodes,
            "mean_return": float(np.mean([r.episode_return for r in results])), "policy_version": ckpt.version,
            "stalled_ticks": sum(r.stalled_ticks for r in results)}


