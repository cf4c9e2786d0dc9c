"""Behaviour-cloning pretraining of chunk policies from demonstrations.

Demos become (state, chunk) pairs: the state at tick t and the next H actions a_t..a_{t+H-1},
normalised to [-1, 1]; a chunk running past the episode end is padded with the hold action (no
change) and those positions are masked out of the loss. The policy's own ``loss`` does the rest
(for the flow policy: prefix-masked flow matching). For policies that take a mid-inference
observation each pair also keeps where the observations 0..D ticks earlier are (``past_index``, held at
the episode start). A policy that reads more than the state (``policy.observation_keys``, e.g. the VLA's
cameras and instruction) gets those observations too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from robolearn.hardware.task import TaskEnv


@dataclass
class ChunkDataset:
    states: np.ndarray   # (N, S) float32
    chunks: np.ndarray   # (N, H, A) float32, normalised
    valid: np.ndarray    # (N, H) float32, 1 where the chunk position is a real demo action
    episodes: int
    successes: int
    past_index: np.ndarray | None = None  # (N, D+1) int64: the rows of the observations 0..D ticks earlier
    observations: dict[str, np.ndarray] = field(default_factory=dict)  # other keys than the state, (N, ...)


def past_rows(t_len: int, max_offset: int, start: int = 0) -> np.ndarray:
    """One episode of ``t_len`` ticks whose first row is ``start`` -> (T, max_offset + 1): row t holds the rows of
    ticks t, t - 1 .. t - D, the first tick repeated before the episode start."""
    return start + np.maximum(np.arange(t_len)[:, None] - np.arange(max_offset + 1)[None, :], 0)


def chunk_pairs(states: list[np.ndarray], actions: list[np.ndarray], horizon: int) -> tuple[np.ndarray, ...]:
    """One episode's states (T, S) and normalised actions (T, A) -> states, chunks (T, H, A), valid (T, H)."""
    s, a = np.asarray(states, np.float32), np.asarray(actions, np.float32)
    t_len, dim = a.shape
    padded = np.concatenate([a, np.zeros((horizon, dim), np.float32)])
    idx = np.arange(t_len)[:, None] + np.arange(horizon)[None, :]
    return s, padded[idx], (idx < t_len).astype(np.float32)


def expert_demos(env: TaskEnv, episodes: int, horizon: int, seed: int = 0, action_noise: float = 0.0,
                 past: int = 0, keys: tuple[str, ...] | list[str] = (), log_every: int = 0) -> ChunkDataset:
    """Run the env's scripted expert for ``episodes`` seeded episodes and cut them into chunks.

    ``action_noise`` > 0 (normalised units) executes ``expert + N(0, noise)`` while recording the expert's
    own action as the label (DART): the demos then show how to recover from small mistakes, which a
    cloned policy makes. ``past`` = D > 0 also keeps where the observations 0..D ticks before each pair are.
    ``keys``: observations kept besides the state (cameras, the instruction)."""
    rng = np.random.default_rng(seed)
    all_s, all_c, all_v, all_f, successes, n = [], [], [], [], 0, 0
    kept: dict[str, list[np.ndarray]] = {k: [] for k in keys if k != "state"}
    t0 = time.perf_counter()
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        states, actions, done, info = [], [], False, {}
        while not done:
            action = env.expert_action()
            states.append(obs["state"])
            for k in kept:
                kept[k].append(obs[k])
            label = env.action_spec.to_normalised(action)
            actions.append(label)
            if action_noise > 0:
                noisy = np.clip(label + rng.normal(0.0, action_noise, label.shape), -1, 1)
                action = env.action_spec.to_robot(noisy.astype(np.float32))
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        successes += int(bool(info.get("success")))
        s, c, v = chunk_pairs(states, actions, horizon)
        all_s.append(s), all_c.append(c), all_v.append(v)
        if past:
            all_f.append(past_rows(len(s), past, n))
        n += len(s)
        if log_every and (ep + 1) % log_every == 0:
            print(f"  demos {ep + 1}/{episodes}  {n} steps  {successes} successes  ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    return ChunkDataset(np.concatenate(all_s), np.concatenate(all_c), np.concatenate(all_v), episodes, successes,
                        np.concatenate(all_f) if past else None, {k: np.stack(v) for k, v in kept.items()})


def train_bc(policy: torch.nn.Module, data: ChunkDataset, steps: int, batch_size: int = 256, lr: float = 1e-3,
             seed: int = 0, log_every: int = 0) -> list[float]:
    """Adam on the policy's per-example ``loss(observation, chunk, valid=...)``; returns the loss per step. The
    observation is the state (B, S), or a dict of it and ``data.observations`` when there are any."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    states = torch.as_tensor(data.states)
    chunks = torch.as_tensor(data.chunks)
    valid = torch.as_tensor(data.valid)
    past_index = None if data.past_index is None else torch.as_tensor(data.past_index)
    others = {k: torch.as_tensor(v) for k, v in data.observations.items()}

    def observation(rows: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        return {"state": states[rows], **{k: v[rows] for k, v in others.items()}} if others else states[rows]
    opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.05)
    policy.train()
    losses, t0 = [], time.perf_counter()
    for step in range(steps):
        idx = torch.randint(0, len(states), (batch_size,), generator=gen)
        extra = {} if past_index is None else {"past": observation(past_index[idx])}
        loss = policy.loss(observation(idx), chunks[idx], valid=valid[idx], **extra).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if log_every and (step + 1) % log_every == 0:
            print(f"  bc step {step + 1}/{steps}  loss {np.mean(losses[-log_every:]):.4f}  "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    policy.eval()
    return losses
