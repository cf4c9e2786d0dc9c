"""Evaluate a run's latest checkpoint in its task, in-process, on seeded episodes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from robolearn.config import load_run_config
from robolearn.registry import build_task_and_policy
from robolearn.runtime.rundir import RunDir


def evaluate(run_dir: Path, episodes: int = 20, seed: int = 12345, deterministic: bool = True) -> dict:
    run = RunDir(run_dir)
    cfg = load_run_config(run.config)
    if not run.checkpoint.exists():
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet ({run.checkpoint})")
    env, policy = build_task_and_policy(cfg)
    state = torch.load(run.checkpoint, weights_only=True)
    policy.load_state_dict(state["algo"]["actor"])
    policy.eval()
    successes, returns = 0, []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        total, done, info = 0.0, False, {}
        while not done:
            for a in env.action_spec.to_robot(policy.act(obs, deterministic=deterministic)):
                obs, r, term, trunc, info = env.step(a)
                total += r
                done = term or trunc
                if done:
                    break
        successes += int(bool(info.get("success", False)))
        returns.append(total)
    env.close()
    return {"episodes": episodes, "success_rate": successes / episodes, "mean_return": float(np.mean(returns)),
            "policy_version": int(state["version"])}
