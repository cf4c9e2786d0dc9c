"""A frozen flow-matching chunk policy steered through its noise (DSRL, docs/algorithms.md, "DSRL").

    v ~ pi_W(.|s) = b * tanh(N(mu(s), sigma(s)))     (B, |W|), the noise policy's choice (b = noise_bound)
    w = v as (H, A), or v repeated at each of the H positions with ``shared_noise``   (B, H, A): the flow's start
    a = F(s, w)                                       (B, H, A), the frozen policy's Euler integration from w

|W| is H * A (a noise for every action of the chunk), or A with ``shared_noise`` (one A-vector for the whole chunk, a
tenth of the dimensions for a 10-action chunk to search: docs/algorithms.md, "DSRL").

``base`` is a ``flow_chunk`` or ``vla`` policy trained before (behaviour cloning, HABC, Hi-ORS; ``policy.base.name``)
and never changed here: its parameters do not require gradients and no optimiser holds them; ``algo=dsrl`` loads
them from ``policy.base_checkpoint`` and trains only the noise policy pi_W (``noise_actor``, a tanh-Gaussian MLP, the
same network as ``policy=mlp``) on the context c(s): the state for a flow base; for a VLA base the frozen VLA's own
trunk features of the observation (instruction, cameras, state) beside the state, c(s) = [e(s); s], so the noise
policy and the critic know what was asked and what the cameras see without an encoder of their own. With pi_W's
mean at 0 and b large the policy is close to the base's own sampling; pi_W learns which noise makes the frozen
policy succeed. F is deterministic and differentiable in w, so a critic on executed actions Q(s, a) gives the noise
policy its gradient through F (by default; ``algo.noise_critic`` distils a critic on the noise instead).

Serving (``predict_chunk``) is the base's: prefix-conditioned, the committed actions clamped at every Euler step,
with the noise drawn from pi_W (its mean with ``explore=False``) instead of N(0, I).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from robolearn.policies.flow_chunk import FlowChunkPolicy
from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig, state_vector_spec
from robolearn.policies.vla import VLAPolicy, VLAPolicyConfig
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

BASES = {"flow_chunk": FlowChunkPolicy, "vla": VLAPolicy}


@dataclass
class DSRLPolicyConfig:
    """``policy=dsrl``: ``base.*`` must be the trained flow policy's settings (its run's config.yaml, policy)."""

    name: str = "dsrl"
    # the frozen policy: base.name flow_chunk (its keys) or vla (its keys too; the VLA-only ones are unused by a flow)
    base: VLAPolicyConfig = field(default_factory=lambda: VLAPolicyConfig(name="flow_chunk"))
    base_checkpoint: str = ""      # the flow policy's weights: a robolearn checkpoint (runs/<bc run>/checkpoints/
                                   # latest.pt); algo=dsrl loads them at the run's first start
    noise_bound: float = 1.5       # b: the noise policy's output is in [-b, b] per element
    shared_noise: bool = False     # pi_W chooses one A-vector, repeated at each of the chunk's H positions (|W| = A),
                                   # not one per action (|W| = H * A)
    hidden_dims: list[int] = field(default_factory=lambda: [256, 256])  # the noise policy's MLP
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    def __post_init__(self) -> None:
        if self.base.name not in BASES:
            raise ValueError(f"policy.base.name must be one of {sorted(BASES)}, got {self.base.name!r}")
        if self.base.mid_observation:
            raise ValueError("policy.base.mid_observation must be false: DSRL steers a one-stage flow policy")
        if self.noise_bound <= 0:
            raise ValueError(f"policy.noise_bound must be > 0, got {self.noise_bound}")
        if not self.hidden_dims or any(h < 1 for h in self.hidden_dims):
            raise ValueError(f"policy.hidden_dims must be positive sizes, got {self.hidden_dims}")
        if self.log_std_min >= self.log_std_max:
            raise ValueError("policy.log_std_min must be < policy.log_std_max")


class DSRLPolicy(nn.Module):
    """The frozen ``base`` and the trained ``noise_actor``; ``horizon`` and ``action_dim`` are the base's,
    ``noise_dim`` |W| the noise policy's output."""

    def __init__(self, obs_spec: ObservationSpec, action_spec: ActionSpec, config: DSRLPolicyConfig) -> None:
        super().__init__()
        self.config = config
        self.base = BASES[config.base.name](obs_spec, action_spec, config.base).requires_grad_(False).eval()
        self.horizon, self.action_dim, self.obs_dim = self.base.horizon, self.base.action_dim, self.base.obs_dim
        self.observation_keys = tuple(getattr(self.base, "observation_keys", ("state",)))
        self.reads_more = self.observation_keys != ("state",)
        self.noise_dim = noise_dim = self.action_dim if config.shared_noise else self.horizon * self.action_dim
        noise_spec = ActionSpec(ArraySpec((noise_dim,), low=(-1.0,) * noise_dim, high=(1.0,) * noise_dim))
        self.noise_actor = GaussianChunkPolicy(self._context_spec(obs_spec), noise_spec, MLPPolicyConfig(
            hidden_dims=config.hidden_dims, log_std_min=config.log_std_min, log_std_max=config.log_std_max,
            use_cameras=False))
        self.context_dim = self.noise_actor.obs_dim

    def _context_spec(self, obs_spec: ObservationSpec) -> ObservationSpec:
        """What pi_W and the critic read: the state, or [e(s); s] for a base that reads more (e unbounded: its
        elements are standardised by running statistics)."""
        if not self.reads_more:
            return obs_spec
        state = state_vector_spec(obs_spec)
        e = self.base.encoded_dim
        return ObservationSpec({"state": ArraySpec((e + state.size,), low=(-np.inf,) * e + tuple(state.low),
                                                   high=(np.inf,) * e + tuple(state.high))})

    def train(self, mode: bool = True) -> DSRLPolicy:
        """The base stays in eval mode (no training-time augmentation: it is frozen)."""
        super().train(mode)
        self.base.eval()
        return self

    @torch.no_grad()
    def context(self, obs: torch.Tensor | dict[str, torch.Tensor],
                features: torch.Tensor | None = None) -> torch.Tensor:
        """c(s) (B, C): the raw state (B, S), or [e(s); s] with e the frozen base's trunk features (``features``: e(s)
        computed already, e.g. kept by the learner's feature cache)."""
        if not self.reads_more:
            return obs if isinstance(obs, torch.Tensor) else obs["state"]
        return torch.cat([self.base.encode(obs) if features is None else features, obs["state"]], dim=-1)

    @property
    def normalise(self) -> nn.Module:
        """pi_W's context normaliser, whose running statistics the learner updates (the base's are frozen)."""
        return self.noise_actor.normalise

    def load_base(self, weights: dict[str, torch.Tensor]) -> None:
        """The trained flow policy's state dict; ValueError naming the mismatch when ``policy.base`` differs."""
        try:
            self.base.load_state_dict(weights)
        except RuntimeError as exc:
            raise ValueError(f"policy.base does not describe the flow policy of policy.base_checkpoint: "
                             f"{str(exc).splitlines()[-1].strip()} (set policy.base.* to that run's policy settings, "
                             "its config.yaml's policy section)") from None

    def chunk_noise(self, v: torch.Tensor) -> torch.Tensor:
        """The flow's start w (B, H, A) from the noise policy's v (B, |W|): v as (H, A), or repeated at every
        position with ``shared_noise``."""
        if self.config.shared_noise:
            return v.unsqueeze(1).repeat(1, self.horizon, 1)
        return v.view(-1, self.horizon, self.action_dim)

    def noise_vector(self, w: torch.Tensor) -> torch.Tensor:
        """The inverse of ``chunk_noise`` on its image: v (B, |W|) from w (B, H, A) (its first position when
        shared: every position is the same)."""
        return w[:, 0] if self.config.shared_noise else w.flatten(1)

    def noise(self, context: torch.Tensor, explore: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """w (B, H, A) in [-b, b] and log pi_W(v|s) (B,) of the chosen v (B, |W|) behind it, from the context
        c(s) (B, C) (exploring: a reparameterised sample; else the mean)."""
        feat = self.noise_actor.features(context)
        if explore:
            u, log_prob = self.noise_actor.sample_features(feat)
        else:
            u, log_prob = torch.tanh(self.noise_actor.head(feat)[0]), context.new_zeros(context.shape[0])
        b = self.config.noise_bound  # v = b * u: log pi_W(v) = log pi(u) - |W| * log b (a constant)
        return self.chunk_noise(b * u), log_prob - u.shape[-1] * float(np.log(b))

    def actions(self, obs: torch.Tensor | dict[str, torch.Tensor], noise: torch.Tensor,
                prefix: torch.Tensor | None = None, prefix_len: torch.Tensor | None = None,
                context: torch.Tensor | None = None) -> torch.Tensor:
        """a = F(s, w): the base's chunk (B, H, A) from ``noise``, differentiable in it. ``context``: c(s) when it
        was computed already; for a base that reads more than the state its first columns are the base's condition
        e(s), which is then not encoded again (the VLA's words and frames: most of the cost)."""
        if context is not None and self.reads_more:
            return self.base.chunk_from_condition(context[:, :self.base.encoded_dim], noise, prefix, prefix_len)
        return self.base.chunk_from_noise(obs, noise, prefix, prefix_len)

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:
        """The serving interface: {"state": (B, S)} (and what the base reads), prefix (B, D', A), prefix_len (B,)
        -> chunks (B, H, A) in [-1, 1], as float32 numpy."""
        with torch.no_grad():
            obs = self.base.observation_tensors(observations)
            context = self.context(obs)
            w, _ = self.noise(context, explore)
            out = self.actions(obs, w, torch.as_tensor(prefix, dtype=torch.float32),
                               torch.as_tensor(prefix_len, dtype=torch.long), context)
        return out.numpy().astype(np.float32)


def make_dsrl_policy(obs_spec: ObservationSpec, action_spec: ActionSpec, config: DSRLPolicyConfig) -> DSRLPolicy:
    return DSRLPolicy(obs_spec, action_spec, config)
