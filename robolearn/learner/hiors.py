"""Hi-ORS: rejection sampling with reward-weighted supervision (docs/algorithms.md, "Hi-ORS").

An episode is accepted when its return R >= m; the threshold m never decreases. The policy is trained
by its BC loss (flow matching for ``policy=flow_chunk``; a lerobot policy's own loss) on windows of accepted
episodes only (interventions inside them are kept):

    L = E[ 1[R >= m] * || v_theta(x_u, u, s) - (x_1 - x_0) ||^2 ]

Rejected episodes are simply not sampled (the buffer's ``min_return`` filter), so every sampled window
has weight 1. Episodes shorter than ``min_episode_steps`` are dropped, and so are windows whose first
action is a no-op (every normalised element within ``noop_tolerance`` of the hold action, 0 for delta
tasks).

The threshold rule (ours, the simpler one the section leaves open): after each finished episode,
m <- max(m, the ``threshold_quantile`` of the returns of the last ``threshold_window`` episodes), starting
from ``initial_threshold``. The accepted set thus tightens as the policy improves. Update-to-data ratio
about 1.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.learner.chunk_batch import observation_keys, policy_input, require_bc_policy, sample_chunk_windows
from robolearn.specs import ActionSpec


@dataclass
class HiORSConfig:
    """``algo=hiors``."""

    name: str = "hiors"
    actor_lr: float = 3e-4
    initial_threshold: float = -math.inf
    threshold_quantile: float = 0.5
    threshold_window: int = 50          # episodes
    min_episode_steps: int = 5
    noop_tolerance: float = 1e-3        # normalised action units

    def __post_init__(self) -> None:
        if not 0 <= self.threshold_quantile <= 1:
            raise ValueError(f"algo.threshold_quantile must be in [0, 1], got {self.threshold_quantile}")
        if self.threshold_window < 1:
            raise ValueError(f"algo.threshold_window must be >= 1, got {self.threshold_window}")


class AcceptanceThreshold:
    """The non-decreasing return threshold m."""

    def __init__(self, initial: float, quantile: float, window: int) -> None:
        self.value = initial
        self.quantile = quantile
        self.returns: deque[float] = deque(maxlen=window)

    def observe(self, episode_return: float) -> float:
        self.returns.append(float(episode_return))
        self.value = max(self.value, float(np.quantile(np.fromiter(self.returns, float), self.quantile)))
        return self.value


def not_noop(actions: torch.Tensor, tolerance: float) -> torch.Tensor:
    """(B, H, A) normalised chunks -> (B,) 1 where the first action moves something."""
    return (actions[:, 0].abs() > tolerance).any(-1).float()


class HiORS:
    def __init__(self, policy: nn.Module, config: HiORSConfig, seed: int = 0) -> None:
        self.cfg = config
        require_bc_policy(policy, "hiors")
        self.actor = policy
        self.horizon = policy.horizon
        self.threshold = AcceptanceThreshold(config.initial_threshold, config.threshold_quantile,
                                             config.threshold_window)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr)
        self.num_updates = 0

    def on_episode(self, episode_return: float, partition: str = "online") -> None:
        """Called for every finished online episode (demos do not move the threshold)."""
        if partition != "demo":
            self.threshold.observe(episode_return)

    def sample_batch(self, buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int) -> dict[str, torch.Tensor]:
        m = self.threshold.value
        return sample_chunk_windows(buffer, action_spec, batch_size, self.horizon, observation_keys(self.actor),
                                    min_return=None if m == -math.inf else m,
                                    min_episode_steps=self.cfg.min_episode_steps)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.actor.normalise.update(batch["obs"])  # running statistics of unbounded state elements
        keep = not_noop(batch["actions"], self.cfg.noop_tolerance)
        self.actor.train()
        # sum(keep * l) / max(sum(keep), 1), as a weighted mean: w = keep / max(mean(keep), 1 / B)
        w = keep / keep.mean().clamp(min=1.0 / keep.shape[0])
        loss = self.actor.weighted_loss(policy_input(batch), batch["actions"], batch["valid"], w)
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.actor_opt.step()
        self.actor.eval()
        self.num_updates += 1
        return {"actor_loss": loss.item(), "threshold": self.threshold.value, "noop_fraction": 1 - keep.mean().item()}

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "actor_opt": self.actor_opt.state_dict(),
                "num_updates": self.num_updates, "threshold": self.threshold.value,
                "threshold_returns": torch.tensor(list(self.threshold.returns), dtype=torch.float64)}

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.num_updates = int(state["num_updates"])
        self.threshold.value = float(state["threshold"])
        self.threshold.returns.clear()
        self.threshold.returns.extend(state["threshold_returns"].tolist())


