"""A flow-matching action-chunk policy with prefix conditioning (training-time RTC / REMAC).

The policy maps an observation to a chunk of H actions by integrating a learned velocity field from
Gaussian noise (flow time tau = 0) to actions (tau = 1). Each chunk position has its own flow time,
which is how the committed prefix enters: positions i < d (actions that will execute while the
chunk is being computed) are given clean, with tau_i = 1, and the network predicts the rest
consistent with them. docs/algorithms.md, "Prefix conditioning and sampling":

    training    x0 ~ N(0, I), x1 = demo chunk, tau = 1 - Beta(1.5, 1), d ~ U{0..D}
                x_tau = tau * x1 + (1 - tau) * x0 for i >= d;  x_i = x1_i and tau_i = 1 for i < d
                L = sum_i m_i ||v(x_tau, tau, s)_i - (x1 - x0)_i||^2 / max(1, sum_i m_i),  m_i = 1[i >= d]
    sampling    A <- sigma * noise; n Euler steps A <- A + v / n, then A <- m * A + (1 - m) * A_prefix
                (sigma = noise_scale, 1 by default: the training distribution)

So the prefix is clamped at every integration step and no inference-time guidance is needed.

Two choices of ours, both measured on push_cube BC (200 demos, 3000 steps, 30 episodes):
- The flow runs around a state-conditioned centre: a mean head mu(s) is fitted by least squares and
  the flow models the residual x1 - mu(s) (x1 above is that residual; the prefix is shifted the
  same way). Without it the same network reached 7-40% success where plain regression reached 87%;
  with it 77-93%. The flow still carries what a mean cannot (spread, several modes).
- The network predicts the clean residual (x-prediction, v = (x1_hat - x_tau) / (1 - tau)) and the
  loss is taken in that space, i.e. the velocity loss weighted by (1 - tau)^2: same minimiser.
The backbone is an MLP over [normalised state; tau-gated noisy chunk; per-position time features].

Two-stage requests (ARLI late binding, docs/algorithms.md, "Two-stage requests"), ``mid_observation=True``: the
policy is a heavy trunk and a light head, and only the head sees the mid-inference state.

    trunk  f, mu_T = T([s_first; k / D; committed actions from the mid tick; their mask])      at request time
    head   cond = [f; s_mid; k / D],  mu = mu_T + M(cond),  flow velocity v(cond, x, tau)      after s_mid arrives

s_first is the request's observation, s_mid the state k ticks later (the chunk starts from it, and its prefix is
the committed actions from s_mid's tick on: p = d - k clean positions). The trunk (``hidden_dims``) runs once, as
soon as the request is made; the head (``head_dims``, the flow's every Euler step) is all that runs after s_mid
arrives, so the client charges it ``mid_ticks`` from then. Late binding is only real when the head is a small
share of the compute (at most mid_ticks / d of it; ``trunk_head_flops`` counts both). Trained with d ~ U{0..D},
k ~ U{0..d} from the demos' own earlier states; k = 0 (s_mid = s_first) is a one-stage request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from robolearn.policies.mlp import ObsNormaliser, mlp, state_vector_spec
from robolearn.specs import ActionSpec, ObservationSpec

TIME_FREQS = 3  # sin/cos features of each position's flow time
MIN_REMAINING_TIME = 0.05  # 1 - tau is clamped here when turning a clean-chunk estimate into a velocity


@dataclass
class FlowChunkPolicyConfig:
    """``policy=flow_chunk``."""

    name: str = "flow_chunk"
    chunk_horizon: int = 10        # H, actions per chunk
    max_prefix: int = 6            # D, the longest committed prefix trained for (>= the largest delay in ticks)
    hidden_dims: list[int] = field(default_factory=lambda: [512, 512, 512])
    flow_steps: int = 10           # Euler steps at inference
    noise_scale: float = 1.0       # the drawn start noise's standard deviation at inference (< 1: akin to a lower
                                   # temperature; training and a given noise, DSRL's, are unaffected)
    mid_observation: bool = False  # two-stage: a trunk (hidden_dims) on the first state, a head (head_dims)
                                   # on the mid-inference state that anchors the chunk
    head_dims: list[int] = field(default_factory=lambda: [64, 64])  # two-stage: the light head's hidden sizes
    trunk_features: int = 128      # two-stage: the trunk's summary f handed to the head

    def __post_init__(self) -> None:
        if self.chunk_horizon < 1:
            raise ValueError(f"policy.chunk_horizon must be >= 1, got {self.chunk_horizon}")
        if not 0 <= self.max_prefix < self.chunk_horizon:
            raise ValueError(f"policy.max_prefix must be in [0, chunk_horizon), got {self.max_prefix}")
        if self.flow_steps < 1:
            raise ValueError(f"policy.flow_steps must be >= 1, got {self.flow_steps}")
        if not 0.0 <= self.noise_scale <= 1.0:
            raise ValueError(f"policy.noise_scale must be in [0, 1], got {self.noise_scale}")
        for key in ("hidden_dims", "head_dims"):
            if not getattr(self, key) or any(h < 1 for h in getattr(self, key)):
                raise ValueError(f"policy.{key} must be positive sizes, got {getattr(self, key)}")
        if self.trunk_features < 1:
            raise ValueError(f"policy.trunk_features must be >= 1, got {self.trunk_features}")


def time_features(tau: torch.Tensor) -> torch.Tensor:
    """(B, H) flow times -> (B, H * (1 + 2 * TIME_FREQS)) features."""
    k = torch.arange(1, TIME_FREQS + 1, dtype=tau.dtype, device=tau.device)
    angle = 2 * math.pi * tau.unsqueeze(-1) * k
    return torch.cat([tau.unsqueeze(-1), torch.sin(angle), torch.cos(angle)], dim=-1).flatten(1)


def past_length(past: torch.Tensor | dict[str, torch.Tensor]) -> int:
    """D + 1 of past observations (B, D+1, ...), a tensor or a dict of them."""
    return next(iter(past.values())).shape[1] if isinstance(past, dict) else past.shape[1]


def prefix_mask(prefix_len: torch.Tensor, horizon: int) -> torch.Tensor:
    """(B,) prefix lengths -> (B, H) float mask m_i = 1[i >= d] (1 where the policy predicts)."""
    return (torch.arange(horizon, device=prefix_len.device) >= prefix_len.unsqueeze(-1)).float()


class FlowChunkPolicy(nn.Module):
    def __init__(self, obs_spec: ObservationSpec, action_spec: ActionSpec, config: FlowChunkPolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.obs_dim = state_vector_spec(obs_spec).size
        self.action_dim = action_spec.dim
        self.horizon = config.chunk_horizon
        self.max_prefix = config.max_prefix
        self.takes_mid_observation = config.mid_observation
        self.normalise = ObsNormaliser(obs_spec)
        encoded = self.encoded_dim = self._build_encoder(obs_spec)
        n_chunk = self.horizon * self.action_dim
        self._time_dist = torch.distributions.Beta(torch.tensor(1.5), torch.tensor(1.0))
        flow_in = n_chunk + self.horizon * (1 + 2 * TIME_FREQS)   # the tau-gated chunk and its time features
        if config.mid_observation:
            f = config.trunk_features
            self.trunk = mlp([encoded + 1 + n_chunk + self.horizon, *config.hidden_dims, f + n_chunk])
            cond_dim, head = f + self.obs_dim + 1, config.head_dims
        else:
            cond_dim, head = encoded, config.hidden_dims
        self.mean_head = mlp([cond_dim, *head, n_chunk])
        self.net = mlp([cond_dim + flow_in, *head, n_chunk])

    # --- what an observation is to this policy (a subclass that reads more than the state overrides these) ---------
    def _build_encoder(self, obs_spec: ObservationSpec) -> int:
        """Build the modules ``encode`` uses; returns the width of its output."""
        return self.obs_dim

    def encode(self, obs: torch.Tensor) -> torch.Tensor:
        """An observation -> the features (B, E) a one-stage chunk is conditioned on and a two-stage trunk reads:
        here the normalised state (B, S)."""
        return self.normalise(obs)

    def mid_state(self, obs: torch.Tensor) -> torch.Tensor:
        """The raw state (B, S) of an observation: all a two-stage head sees of the mid observation."""
        return obs

    def observation_tensors(self, observations: dict[str, np.ndarray]) -> torch.Tensor:
        """The serving interface's arrays -> what ``encode`` takes."""
        return torch.as_tensor(observations["state"], dtype=torch.float32)

    def at_offset(self, past: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        """Row b of ``past`` (B, D+1, ...) at ``offset[b]``: the observation k ticks before the current one."""
        return past[torch.arange(len(offset), device=offset.device), offset]

    def zero_observation(self) -> torch.Tensor:
        """A one-row observation of zeros (for counting FLOPs)."""
        return torch.zeros(1, self.obs_dim)
    # ----------------------------------------------------------------------------------------------------------------

    def condition(self, obs: torch.Tensor) -> torch.Tensor:
        """A one-stage policy's condition, (B, E): the encoded observation the chunk starts from."""
        return self.encode(obs)

    def trunk_features(self, first: torch.Tensor, prefix: torch.Tensor, prefix_len: torch.Tensor,
                       offset: torch.Tensor) -> torch.Tensor:
        """Two-stage: the trunk on what is known when the request is made, (B, F + H * A): the first observation,
        the committed actions from the mid tick on, ``prefix`` (B, D', A) of which ``prefix_len`` (B,) count, and
        the mid state's offset k (B,) ticks. Never the mid observation itself."""
        committed = 1 - prefix_mask(prefix_len, self.horizon)
        k = self._offset_feature(offset)
        inp = [self.encode(first), k, (committed.unsqueeze(-1) * self._pad_prefix(prefix)).flatten(1), committed]
        return self.trunk(torch.cat(inp, dim=-1))

    def _offset_feature(self, offset: torch.Tensor) -> torch.Tensor:
        """The mid state's offset k (B,) ticks as the input k / D, (B, 1)."""
        return offset.float().clamp(0, self.max_prefix).unsqueeze(-1) / max(1, self.max_prefix)

    def head_condition(self, features: torch.Tensor, mid: torch.Tensor,
                       offset: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Two-stage: the head's condition [f; s_mid; k / D] (B, C) and the trunk's chunk estimate mu_T (B, H, A).
        ``mid`` is the mid observation; only its state is read."""
        f, mu_trunk = features.split([self.config.trunk_features, self.horizon * self.action_dim], dim=-1)
        k = self._offset_feature(offset)
        return (torch.cat([f, self.normalise(self.mid_state(mid)), k], dim=-1),
                mu_trunk.view(-1, self.horizon, self.action_dim))

    def denoise(self, cond: torch.Tensor, x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """The network's estimate of the clean chunk x1 from x_tau: cond (B, C), x (B, H, A), tau (B, H).

        The chunk enters scaled by its flow time (tau * x_tau): near tau = 0 it is mostly noise and the
        answer must come from the state, near tau = 1 (and for the clean prefix) it is the answer. A
        ReLU MLP cannot easily learn that multiplicative gate itself (it underfits badly without it)."""
        gated = (tau.unsqueeze(-1) * x).flatten(1)
        inp = torch.cat([cond, gated, time_features(tau)], dim=-1)
        return self.net(inp).view_as(x)

    def mean_chunk(self, cond: torch.Tensor, base: torch.Tensor | None = None) -> torch.Tensor:
        """mu(s): the state-conditioned centre of the flow's noise, (B, H, A) (plus the trunk's ``base``)."""
        mu = self.mean_head(cond).view(-1, self.horizon, self.action_dim)
        return mu if base is None else base + mu

    def velocity(self, cond: torch.Tensor, x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """v(x_tau, tau, s) = (x1_hat - x_tau) / (1 - tau), the flow's velocity, (B, H, A)."""
        one_minus = (1 - tau).clamp(min=MIN_REMAINING_TIME).unsqueeze(-1)
        return (self.denoise(cond, x, tau) - x) / one_minus

    def _pad_prefix(self, prefix: torch.Tensor) -> torch.Tensor:
        """(B, D', A) -> (B, H, A), zero beyond D'."""
        out = prefix.new_zeros(prefix.shape[0], self.horizon, self.action_dim)
        n = min(prefix.shape[1], self.horizon)
        out[:, :n] = prefix[:, :n]
        return out

    def loss(self, obs: torch.Tensor, actions: torch.Tensor, prefix_len: torch.Tensor | None = None,
             valid: torch.Tensor | None = None, past: torch.Tensor | None = None) -> torch.Tensor:
        """Per-example flow-matching loss (B,) on demo chunks ``actions`` (B, H, A) in [-1, 1] from the
        observations ``obs`` (the state (B, S) here).

        ``prefix_len`` (B,) int: the clean prefix given to the network (drawn uniformly from 0..D when
        None). ``valid`` (B, H) optional mask of real (not padded) chunk positions. ``past`` (B, D+1, ...):
        the observations 0..D ticks before ``obs``, needed with ``mid_observation``: with d the drawn prefix,
        k ~ U{0..d}, the trunk's context is past[k] and the prefix d - k (the committed actions from ``obs`` on).
        """
        b = actions.shape[0]
        if prefix_len is None:
            prefix_len = torch.randint(0, self.max_prefix + 1, (b,), device=actions.device)
        valid = torch.ones(actions.shape[:2], device=actions.device) if valid is None else valid
        if self.takes_mid_observation:
            if past is None or past_length(past) < self.max_prefix + 1:
                raise ValueError(f"{self.config.name} with mid_observation needs the past observations "
                                 f"(B, {self.max_prefix + 1}, ...)")
            offset = (torch.rand(b, device=actions.device) * (prefix_len + 1)).long()  # U{0..d}
            first = self.at_offset(past, offset)
            prefix_len = prefix_len - offset
            cond, base = self.head_condition(self.trunk_features(first, actions, prefix_len, offset), obs, offset)
            mu = self.mean_chunk(cond, base)
        else:
            cond = self.condition(obs)
            mu = self.mean_chunk(cond)
        mean_loss = (valid * ((mu - actions) ** 2).sum(-1)).sum(-1) / valid.sum(-1).clamp(min=1.0)
        residual = actions - mu.detach()                          # the flow runs in residual space
        m = prefix_mask(prefix_len, self.horizon)
        x0 = torch.randn_like(residual)
        # flow times weighted toward the noisy end (pi0's choice, tau = 1 - Beta(1.5, 1))
        tau = (1 - self._time_dist.sample((b, 1))).to(actions.device).expand(b, self.horizon)
        tau = m * tau + (1 - m)                                   # prefix positions are clean (tau = 1)
        x_tau = tau.unsqueeze(-1) * residual + (1 - tau.unsqueeze(-1)) * x0
        # ||v_hat - (x1 - x0)||^2 = ||x1_hat - x1||^2 / (1 - tau)^2: the velocity loss, weighted by
        # (1 - tau)^2 so the near-clean times do not dominate (same minimiser per (s, x_tau, tau))
        err = ((self.denoise(cond, x_tau, tau) - residual) ** 2).sum(-1)  # (B, H)
        m = m * valid
        return (m * err).sum(-1) / m.sum(-1).clamp(min=1.0) + mean_loss

    def weighted_loss(self, obs: torch.Tensor, actions: torch.Tensor, valid: torch.Tensor,
                      weights: torch.Tensor) -> torch.Tensor:
        """mean_B(w * loss): the BC learners' objective, ``weights`` (B,) >= 0 (mean 1 for an unbiased scale)."""
        return (weights * self.loss(obs, actions, valid=valid)).mean()

    @torch.no_grad()
    def sample(self, obs: torch.Tensor, prefix: torch.Tensor | None = None,
               prefix_len: torch.Tensor | None = None, steps: int | None = None) -> torch.Tensor:
        """A one-stage chunk (B, H, A) in [-1, 1] whose first ``prefix_len`` actions equal ``prefix`` (B, D', A).
        (``chunk_from_noise`` is the same flow from a given noise, with gradients.)"""
        if self.takes_mid_observation:  # the observation is both the first and the mid one (k = 0)
            state = self.mid_state(obs)
            zero = torch.zeros(state.shape[0], dtype=torch.long, device=state.device)
            prefix, prefix_len = self._given_prefix(state, prefix, prefix_len)
            return self.sample_head(self.trunk_features(obs, prefix, prefix_len, zero), obs, zero, prefix,
                                    prefix_len, steps)
        cond = self.condition(obs)
        return self._flow(cond, self.mean_chunk(cond), prefix, prefix_len, steps)

    def chunk_from_noise(self, obs: torch.Tensor, noise: torch.Tensor, prefix: torch.Tensor | None = None,
                         prefix_len: torch.Tensor | None = None) -> torch.Tensor:
        """A one-stage chunk (B, H, A) in [-1, 1] integrated from the given ``noise`` (B, H, A): the flow as a
        deterministic, differentiable map of its noise (DSRL steers a frozen policy through it)."""
        return self.chunk_from_condition(self.condition(obs), noise, prefix, prefix_len)

    def chunk_from_condition(self, cond: torch.Tensor, noise: torch.Tensor, prefix: torch.Tensor | None = None,
                             prefix_len: torch.Tensor | None = None) -> torch.Tensor:
        """``chunk_from_noise`` from the observation's condition (B, E) (``condition``) computed already."""
        if self.takes_mid_observation:
            raise ValueError("chunk_from_noise: a two-stage flow policy (mid_observation=true) is not supported")
        return self._flow(cond, self.mean_chunk(cond), prefix, prefix_len, None, noise)

    @torch.no_grad()
    def sample_head(self, features: torch.Tensor, mid: torch.Tensor, offset: torch.Tensor, prefix: torch.Tensor,
                    prefix_len: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        """Two-stage: the head alone, from the trunk's ``features`` and the mid observation taken ``offset`` ticks
        after the first one; ``prefix`` (B, D', A) / ``prefix_len`` are the committed actions from the mid tick."""
        cond, base = self.head_condition(features, mid, offset)
        return self._flow(cond, self.mean_chunk(cond, base), prefix, prefix_len, steps)

    def _given_prefix(self, like: torch.Tensor, prefix: torch.Tensor | None,
                      prefix_len: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The given prefix, or none (zeros of length 0) for each of ``like``'s (B, ...) rows."""
        if prefix is None or prefix_len is None:
            return (like.new_zeros(like.shape[0], self.horizon, self.action_dim),
                    torch.zeros(like.shape[0], dtype=torch.long, device=like.device))
        return prefix, prefix_len

    def _flow(self, cond: torch.Tensor, mu: torch.Tensor, prefix: torch.Tensor | None,
              prefix_len: torch.Tensor | None, steps: int | None, noise: torch.Tensor | None = None) -> torch.Tensor:
        """n Euler steps of the flow around ``mu`` (B, H, A), the committed prefix clamped at each, from ``noise``
        (B, H, A) at tau = 0 (drawn from N(0, noise_scale^2 I) when None; DSRL chooses it). Differentiable in
        ``noise``."""
        steps = steps or self.config.flow_steps
        prefix, prefix_len = self._given_prefix(cond, prefix, prefix_len)
        prefix = self._pad_prefix(prefix) - mu                     # in residual space
        m = prefix_mask(prefix_len, self.horizon)
        keep = m.unsqueeze(-1)
        x0 = self.config.noise_scale * torch.randn(mu.shape, device=mu.device) if noise is None else noise
        x = keep * x0 + (1 - keep) * prefix
        for k in range(steps):
            tau = m * (k / steps) + (1 - m)
            x = x + self.velocity(cond, x, tau) / steps
            x = keep * x + (1 - keep) * prefix                     # clamp the committed prefix
        return (mu + x).clamp(-1.0, 1.0)

    def shift_prefix(self, prefix: np.ndarray, prefix_len: np.ndarray,
                     offsets: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The committed actions left from each row's mid tick, k = ``offsets`` (B,) ticks after the first one."""
        prefix_t = torch.as_tensor(prefix, dtype=torch.float32)
        shifted = torch.zeros_like(prefix_t)
        for i, k in enumerate(np.asarray(offsets).tolist()):
            shifted[i, :prefix_t.shape[1] - k] = prefix_t[i, k:]
        return shifted, torch.as_tensor(prefix_len, dtype=torch.long) - torch.as_tensor(offsets, dtype=torch.long)

    @torch.no_grad()
    def predict_trunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      mid_offsets: np.ndarray) -> torch.Tensor:
        """Two-stage serving, at request time: the trunk's features (B, F + H * A) from the first observations
        (``{"state": (B, S)}`` and whatever else the policy reads), the committed actions (B, D', A) normalised,
        and the planned mid offsets k (B,)."""
        shifted, lens = self.shift_prefix(prefix, prefix_len, mid_offsets)
        return self.trunk_features(self.observation_tensors(observations), shifted, lens,
                                   torch.as_tensor(mid_offsets, dtype=torch.long))

    @torch.no_grad()
    def predict_head(self, features: torch.Tensor, mid_observations: dict[str, np.ndarray], prefix: np.ndarray,
                     prefix_len: np.ndarray, mid_offsets: np.ndarray) -> np.ndarray:
        """Two-stage serving, once the mid observations {"state": (B, S)} arrive: chunks (B, H, A) normalised,
        row b starting at its mid observation's tick with the committed actions left from there."""
        shifted, lens = self.shift_prefix(prefix, prefix_len, mid_offsets)
        mid = torch.as_tensor(mid_observations["state"], dtype=torch.float32)  # the head reads the state alone
        out = self.sample_head(features, mid, torch.as_tensor(mid_offsets, dtype=torch.long), shifted, lens)
        return out.numpy().astype(np.float32)

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False, mid_observations: dict[str, np.ndarray] | None = None,
                      mid_offsets: np.ndarray | None = None) -> np.ndarray:
        """The serving interface: observations {"state": (B, S)}, prefix (B, D', A) normalised,
        prefix_len (B,) -> chunks (B, H, A) normalised, as float32 numpy. Always a sample of the flow.

        Two-stage, with ``mid_observations`` {"state": (B, S)} taken ``mid_offsets`` k (B,) ticks after the first
        ones (k <= prefix_len): the trunk then the head (``predict_trunk``, ``predict_head``); row b's chunk starts
        at its mid observation's tick and its first prefix_len - k actions are the committed ones from there
        (``prefix[b, k:prefix_len]``). Without them a two-stage policy takes its first observation as the mid one."""
        if self.takes_mid_observation:
            offsets = np.zeros(len(prefix_len), np.int64) if mid_observations is None else mid_offsets
            features = self.predict_trunk(observations, prefix, prefix_len, offsets)
            return self.predict_head(features, observations if mid_observations is None else mid_observations,
                                     prefix, prefix_len, offsets)
        with torch.no_grad():
            out = self.sample(self.observation_tensors(observations),
                              torch.as_tensor(prefix, dtype=torch.float32),
                              torch.as_tensor(prefix_len, dtype=torch.long))
        return out.numpy().astype(np.float32)

    @torch.no_grad()
    def trunk_head_flops(self) -> dict[str, int]:
        """Two-stage: the FLOPs of one request's trunk and of its head (all ``flow_steps``), counted by torch's
        ``FlopCounterMode`` on a one-row request with a half-length prefix; ``head_share`` = head / both."""
        from torch.utils.flop_counter import FlopCounterMode

        if not self.takes_mid_observation:
            raise ValueError("trunk_head_flops: a one-stage flow policy has no trunk and head (mid_observation=false)")
        first = self.zero_observation()
        state = torch.zeros(1, self.obs_dim)
        prefix = torch.zeros(1, self.max_prefix, self.action_dim)
        lens, k = torch.tensor([self.max_prefix // 2]), torch.tensor([0])
        with FlopCounterMode(display=False) as trunk:
            features = self.trunk_features(first, prefix, lens, k)
        with FlopCounterMode(display=False) as head:
            self.sample_head(features, state, k, prefix, lens)
        t, h = trunk.get_total_flops(), head.get_total_flops()
        return {"trunk": int(t), "head": int(h), "head_share": h / (t + h)}


def make_flow_policy(obs_spec: ObservationSpec, action_spec: ActionSpec,
                     config: FlowChunkPolicyConfig) -> FlowChunkPolicy:
    return FlowChunkPolicy(obs_spec, action_spec, config)
