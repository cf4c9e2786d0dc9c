"""A tanh-squashed Gaussian MLP policy that emits an action chunk (H actions) per observation.

Works in normalised units: observations are scaled to about [-1, 1] with the spec's bounds (fixed,
like lerobot's MIN_MAX normalisation; an unbounded element by running statistics of the data,
``ObsNormaliser``), actions live in [-1, 1] and the actor maps them to robot
units with ``ActionSpec.to_robot``. With ``chunk_horizon = 1`` this is the usual SAC actor.

Shapes: ``obs`` (B, obs_dim) float32; actions (B, H * A); log-probs (B,).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from robolearn.policies.encoders import ImageEncoder, image_keys
from robolearn.specs import ActionSpec, ObservationSpec


@dataclass
class MLPPolicyConfig:
    """``policy=mlp``."""

    name: str = "mlp"
    chunk_horizon: int = 1         # actions emitted per inference request (H)
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    image_feature_dim: int = 50    # per camera, when the task has cameras (policies.encoders.ImageEncoder)
    layer_norm: bool = False       # LayerNorm after each hidden layer of the actor (lerobot's SAC actor has it)
    state_encoder_dim: int = 0     # > 0: the normalised state passes Linear -> LayerNorm -> tanh of this width
                                   # (lerobot's SAC default, 256), trained by the critic loss as the image encoder
    use_cameras: bool = True       # false: act on the state alone, cameras or not (they may be there for a
                                   # success classifier, task.reward=classifier)
    discrete_gripper: bool = False  # the last action dim is a gripper chosen by a Q-head: close / stay / open
    gripper_epsilon: float = 0.1    # exploring actors pick a random gripper command this often

    def __post_init__(self) -> None:
        if self.chunk_horizon < 1:
            raise ValueError(f"policy.chunk_horizon must be >= 1, got {self.chunk_horizon}")
        if self.state_encoder_dim < 0:
            raise ValueError(f"policy.state_encoder_dim must be >= 0 (0: none), got {self.state_encoder_dim}")
        if not self.hidden_dims or any(h < 1 for h in self.hidden_dims):
            raise ValueError(f"policy.hidden_dims must be positive sizes, got {self.hidden_dims}")
        if self.log_std_min >= self.log_std_max:
            raise ValueError("policy.log_std_min must be < policy.log_std_max")
        if self.discrete_gripper and self.chunk_horizon != 1:
            raise ValueError("policy.discrete_gripper needs policy.chunk_horizon=1 (one gripper command per step)")
        if not 0 <= self.gripper_epsilon <= 1:
            raise ValueError(f"policy.gripper_epsilon must be in [0, 1], got {self.gripper_epsilon}")


def state_vector_spec(obs_spec: ObservationSpec):
    """The state-only policies here read ``state``; say so clearly when it is missing."""
    if "state" not in obs_spec.arrays:
        raise ValueError(f"the mlp policy needs an observation 'state', the task provides {sorted(obs_spec.arrays)}")
    spec = obs_spec.arrays["state"]
    if len(spec.shape) != 1 or spec.low is None or spec.high is None:
        raise ValueError("observation 'state' must be a bounded 1-D array")
    return spec


class ObsNormaliser(nn.Module):
    """x -> (x - centre) / half_range, (B, S) -> (B, S).

    An element with finite bounds in the spec is scaled by them (fixed, like lerobot's MIN_MAX). An element
    with an infinite bound is standardised with running statistics of the data instead: ``update`` takes each
    batch of observations the learner trains on and sets its centre to their mean and its half range to their
    standard deviation (Chan et al.'s parallel update; unscaled until the first batch), and the result is
    clipped to [-CLIP, CLIP]. Everything is a buffer, so the statistics travel with the weights to every actor
    and into checkpoints."""

    CLIP = 10.0
    MIN_STD = 1e-3

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
        self.register_buffer("learned", torch.as_tensor(~finite), persistent=False)  # from the spec: not saved
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(len(low), dtype=torch.float64))
        self.register_buffer("m2", torch.zeros(len(low), dtype=torch.float64))  # sum of squared deviations

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """Weights saved before the running statistics existed (a checkpoint, a kept weights file) load with
        none: their unbounded elements were unscaled, as they are here before the first batch."""
        for name, value in (("count", self.count), ("mean", self.mean), ("m2", self.m2)):
            state_dict.setdefault(prefix + name, torch.zeros_like(value))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch of raw observations (B, S) into the running statistics of the unbounded elements."""
        if not bool(self.learned.any()) or x.shape[0] == 0:
            return
        x = x.detach().to(torch.float64)
        b = x.shape[0]
        batch_mean = x.mean(dim=0)
        n = self.count + b
        delta = batch_mean - self.mean
        self.m2 += ((x - batch_mean) ** 2).sum(dim=0) + delta ** 2 * self.count * b / n
        self.mean += delta * b / n
        self.count.copy_(n)
        std = (self.m2 / n).sqrt().clamp_min(self.MIN_STD)
        self.centre[self.learned] = self.mean[self.learned].to(self.centre.dtype)
        self.half_range[self.learned] = std[self.learned].to(self.half_range.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = (x - self.centre) / self.half_range
        if bool(self.learned.any()):
            out = torch.where(self.learned, out.clamp(-self.CLIP, self.CLIP), out)
        return out


def mlp(sizes: list[int], layer_norm: bool = False, norm_last: bool = False) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last); ``layer_norm`` puts a LayerNorm after each
    hidden layer, before its ReLU (and after the last one too with ``norm_last``)."""
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        last = i == len(sizes) - 2
        if layer_norm and (not last or norm_last):
            layers.append(nn.LayerNorm(sizes[i + 1]))
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
GRIPPER_LEVELS = torch.tensor([-1.0, 0.0, 1.0])  # normalised gripper command per discrete choice


def gripper_class(command: torch.Tensor) -> torch.Tensor:
    """Normalised gripper commands (B,) -> the nearest of GRIPPER_LEVELS, as class indices (B,)."""
    return torch.bucketize(command.contiguous(), command.new_tensor([-1 / 3, 1 / 3]))  # on the command's device


class GaussianChunkPolicy(nn.Module):
    """``action_spec.chunk_horizon`` sets H; build with ``make_policy`` to take it from the config.

    Observations: a state tensor (B, S), or a dict {"state": (B, S), <camera>: uint8 (B, H, W, 3), ...}.
    With cameras the policy owns an ``ImageEncoder``; its features are concatenated to the normalised
    state (``features``), and SAC shares that encoder with the critic. With ``state_encoder_dim`` the
    normalised state is encoded first (Linear, LayerNorm, tanh), also shared with the critic.

    ``discrete_gripper`` (HIL-SERL): the Gaussian covers the other action dims (``continuous_dim``); the
    last one is a gripper command chosen by ``gripper_q`` (B, 3) over GRIPPER_LEVELS (normalised close,
    stay, open), greedily, or at random with probability ``gripper_epsilon`` when exploring. SAC trains
    that Q-head by double DQN."""

    def __init__(self, obs_spec: ObservationSpec, action_spec: ActionSpec, config: MLPPolicyConfig) -> None:
        super().__init__()
        self.obs_dim = state_vector_spec(obs_spec).size
        self.action_dim = action_spec.dim
        self.horizon = action_spec.chunk_horizon
        self.config = config
        self.continuous_dim = self.action_dim - 1 if config.discrete_gripper else self.action_dim
        out = self.horizon * self.continuous_dim
        self.normalise = ObsNormaliser(obs_spec)
        cameras = image_keys(obs_spec) and config.use_cameras
        self.encoder = ImageEncoder(obs_spec, config.image_feature_dim) if cameras else None
        d = config.state_encoder_dim
        self.state_encoder = nn.Sequential(nn.Linear(self.obs_dim, d), nn.LayerNorm(d), nn.Tanh()) if d else None
        self.feature_dim = (d or self.obs_dim) + (self.encoder.out_dim if self.encoder is not None else 0)
        self.trunk = mlp([self.feature_dim, *config.hidden_dims], config.layer_norm, norm_last=True)  # ReLU in head
        self.gaussian = nn.Linear(config.hidden_dims[-1], 2 * out)  # the mean, then the log std before squashing
        self.gripper_q = mlp([self.feature_dim, *config.hidden_dims, 3]) if config.discrete_gripper else None

    def features(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, F): the normalised (and maybe encoded) state, then the image features if the policy has cameras."""
        state = obs if isinstance(obs, torch.Tensor) else obs["state"]
        feat = self.normalise(state)
        if self.state_encoder is not None:
            feat = self.state_encoder(feat)
        if self.encoder is not None:
            feat = torch.cat([feat, self.encoder(obs)], dim=-1)
        return feat

    def shared_encoders(self) -> list[nn.Module]:
        """The encoders SAC trains with the critic loss (the actor reads their features with stop-gradient)."""
        return [m for m in (self.state_encoder, self.encoder) if m is not None]

    def head(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, F) features -> the Gaussian's mean and log std, each (B, H * A)."""
        mean, log_std = self.gaussian(torch.relu(self.trunk(feat))).chunk(2, dim=-1)
        lo, hi = self.config.log_std_min, self.config.log_std_max
        return mean, lo + 0.5 * (hi - lo) * (torch.tanh(log_std) + 1)  # soft-clamped log std

    def forward(self, obs) -> tuple[torch.Tensor, torch.Tensor]:
        return self.head(self.features(obs))

    def sample_features(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample a = tanh(mu + sigma * eps) (B, H * A) and its log-probability (B,)."""
        mean, log_std = self.head(feat)
        eps = torch.randn_like(mean)
        u = mean + log_std.exp() * eps
        # log N(u; mu, sigma) = -eps^2 / 2 - log sigma - log(2 pi) / 2, minus log(1 - tanh(u)^2) in a stable form
        log_prob = (-0.5 * eps.square() - log_std - HALF_LOG_2PI
                    - 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def sample(self, obs) -> tuple[torch.Tensor, torch.Tensor]:
        return self.sample_features(self.features(obs))

    @staticmethod
    def _batch(observations: dict[str, np.ndarray] | np.ndarray, add_axis: bool) -> torch.Tensor | dict:
        if not isinstance(observations, dict):
            x = torch.as_tensor(np.asarray(observations, np.float32))
            return x.unsqueeze(0) if add_axis else x
        out = {k: torch.as_tensor(v) for k, v in observations.items()}
        return {k: v.unsqueeze(0) for k, v in out.items()} if add_axis else out

    @torch.no_grad()
    def _chunks(self, obs, explore: bool) -> np.ndarray:
        """(B, H, A) normalised actions: sampled when exploring, else the mean (and the greedy gripper)."""
        feat = self.features(obs)
        a = self.sample_features(feat)[0] if explore else torch.tanh(self.head(feat)[0])
        if self.gripper_q is not None:
            level = self.gripper_q(feat).argmax(-1)
            if explore:
                rand = torch.rand(level.shape) < self.config.gripper_epsilon
                level = torch.where(rand, torch.randint(0, 3, level.shape), level)
            a = torch.cat([a, GRIPPER_LEVELS[level].unsqueeze(-1)], dim=-1)
        return a.reshape(-1, self.horizon, self.action_dim).numpy()

    def act(self, observation: dict[str, np.ndarray] | np.ndarray, deterministic: bool = False) -> np.ndarray:
        """One observation (a dict, or the state (obs_dim,)) -> a chunk (H, A) of normalised actions."""
        return self._chunks(self._batch(observation, add_axis=True), explore=not deterministic)[0]

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:
        """The serving interface (``inference.runner``): {"state": (B, S), cameras...} -> chunks (B, H, A) in
        [-1, 1], sampled when ``explore`` else the mean. Not prefix-conditioned: the committed prefix is ignored."""
        obs = self._batch(observations if self.encoder is not None else observations["state"], add_axis=False)
        return self._chunks(obs, explore)


def make_policy(obs_spec: ObservationSpec, action_spec: ActionSpec, config: MLPPolicyConfig) -> GaussianChunkPolicy:
    """Build the policy for a task's specs with the configured chunk horizon."""
    return GaussianChunkPolicy(obs_spec, ActionSpec(action_spec.array, config.chunk_horizon), config)
