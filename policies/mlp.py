"""A tanh-squashed Gaussian MLP policy that emits an action chunk (H actions) per observation.

Works in normalised units: observations are scaled to about [-1, 1] with the spec's bounds (fixed,
like lerobot's MIN_MAX normalisation), actions live in [-1, 1] and the actor maps them to robot
units with ``ActionSpec.to_robot``. With ``chunk_horizon = 1`` this is the usual SAC actor.

Shapes: ``obs`` (B, obs_dim) float32; actions (B, H * A); log-probs (B,).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from robolearn.registry import register
from robolearn.specs import ActionSpec, ObservationSpec


@dataclass
class MLPPolicyConfig:
    """``policy=mlp``."""

    name: str = "mlp"
    chunk_horizon: int = 1         # actions emitted per inference request (H)
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    def __post_init__(self) -> None:
        if self.chunk_horizon < 1:
            raise ValueError(f"policy.chunk_horizon must be >= 1, got {self.chunk_horizon}")
        if not self.hidden_dims or any(h < 1 for h in self.hidden_dims):
            raise ValueError(f"policy.hidden_dims must be positive sizes, got {self.hidden_dims}")
        if self.log_std_min >= self.log_std_max:
            raise ValueError("policy.log_std_min must be < policy.log_std_max")


def state_vector_spec(obs_spec: ObservationSpec):
    """The state-only policies here read ``state``; say so clearly when it is missing."""
    if "state" not in obs_spec.arrays:
        raise ValueError(f"the mlp policy needs an observation 'state', the task provides {sorted(obs_spec.arrays)}")
    spec = obs_spec.arrays["state"]
    if len(spec.shape) != 1 or spec.low is None or spec.high is None:
        raise ValueError("observation 'state' must be a bounded 1-D array")
    return spec


class ObsNormaliser(nn.Module):
    """x -> (x - centre) / half_range, from the spec's bounds (saved with the weights).
    An element with an infinite bound is left unscaled (centre 0, half range 1)."""

    def __init__(self, obs_spec: ObservationSpec) -> None:
        super().__init__()
        spec = state_vector_spec(obs_spec)
        low, high = spec.low_array(), spec.high_array()
        finite = np.isfinite(low) & np.isfinite(high)
        centre, half = np.zeros_like(low), np.ones_like(low)
        centre[finite] = (low[finite] + high[finite]) / 2
        half[finite] = np.maximum((high[finite] - low[finite]) / 2, 1e-6)
        self.register_buffer("centre", torch.as_tensor(centre))
        self.register_buffer("half_range", torch.as_tensor(half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.centre) / self.half_range


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class GaussianChunkPolicy(nn.Module):
    """``action_spec.chunk_horizon`` sets H; build with ``make_policy`` to take it from the config."""

    def __init__(self, obs_spec: ObservationSpec, action_spec: ActionSpec, config: MLPPolicyConfig) -> None:
        super().__init__()
        self.obs_dim = state_vector_spec(obs_spec).size
        self.action_dim = action_spec.dim
        self.horizon = action_spec.chunk_horizon
        self.config = config
        out = self.horizon * self.action_dim
        self.normalise = ObsNormaliser(obs_spec)
        self.trunk = mlp([self.obs_dim, *config.hidden_dims])
        self.mean = nn.Linear(config.hidden_dims[-1], out)
        self.log_std = nn.Linear(config.hidden_dims[-1], out)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.trunk(self.normalise(obs)))
        log_std = torch.tanh(self.log_std(h))
        lo, hi = self.config.log_std_min, self.config.log_std_max
        return self.mean(h), lo + 0.5 * (hi - lo) * (log_std + 1)  # soft-clamped log std

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample a = tanh(mu + sigma * eps) and its log-probability (B,)."""
        mean, log_std = self(obs)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        # log N(u; mu, sigma) - sum log(1 - tanh(u)^2), the latter in a stable form
        log_prob = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return a, log_prob

    @torch.no_grad()
    def act(self, state: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """One observation (obs_dim,) -> a chunk (H, A) of normalised actions in [-1, 1]."""
        obs = torch.as_tensor(state, dtype=torch.float32).unsqueeze(0)
        if deterministic:
            a = torch.tanh(self(obs)[0])
        else:
            a = self.sample(obs)[0]
        return a.reshape(self.horizon, self.action_dim).numpy()

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:
        """The serving interface (``inference.runner``): {"state": (B, S)} -> chunks (B, H, A) in [-1, 1],
        sampled when ``explore`` else the mean. Not prefix-conditioned: the committed prefix is ignored."""
        obs = torch.as_tensor(observations["state"], dtype=torch.float32)
        with torch.no_grad():
            a = self.sample(obs)[0] if explore else torch.tanh(self(obs)[0])
        return a.reshape(-1, self.horizon, self.action_dim).numpy()


def make_policy(obs_spec: ObservationSpec, action_spec: ActionSpec, config: MLPPolicyConfig) -> GaussianChunkPolicy:
    """Build the policy for a task's specs with the configured chunk horizon."""
    return GaussianChunkPolicy(obs_spec, ActionSpec(action_spec.array, config.chunk_horizon), config)


register("policy", "mlp", MLPPolicyConfig, make_policy)
