"""Soft actor-critic with a LayerNorm critic ensemble (RLPD-style), for state and image observations.

Reads top to bottom like the math (docs/algorithms.md, "SAC and RLPD"):

    y      = r + discount * (min_{j in subset} Q'_j(s', a') - alpha * log pi(a'|s')),  a' ~ pi(s')
    L_Q    = sum_i mean_B (Q_i(s, a) - y)^2
    L_pi   = mean_B (alpha * log pi(a~|s) - mean_i Q_i(s, a~)),  a~ ~ pi(s)
             + bc_weight * mean_B |mean_i Q_i(s, a~)| * mean_{B demo} ||tanh(mu(s)) - a||^2 / (H * A)   (optional)
    L_alpha = -mean_B log_alpha * (log pi(a~|s) + target_entropy)

``discount`` is gamma^n for an n-step window (``n_step``; by default n = the chunk horizon H) and 0 after
termination; the buffer provides it, with r the n-step discounted return and s' the observation n steps on (the
episode's last one when it ends sooner). n > 1 with H = 1 is DrQ-v2's n-step TD: faster credit at a high control
rate, at the cost of the off-policy bias of the steps after the first. Actions are normalised to [-1, 1]; with
chunk horizon H the critic scores the whole chunk Q(s, a_{t:t+H}) (the action input is H * A wide). Target
entropy is -|A|/2 by default (``target_entropy_per_dim``).

s enters as the policy's features: the normalised state (encoded first with ``policy.state_encoder_dim``),
then CNN image features with cameras. The encoders are trained by the critic loss and read by the actor
with stop-gradient; frames are randomly shifted by up to ``image_shift_pad`` pixels in every sampled
batch (DrQ). ``grad_clip_norm`` clips every network's gradient. RLPD: ``demo_ratio`` of each batch comes
from demo and intervention steps. A policy with ``discrete_gripper`` has its last action dim scored by its
own Q-head (close / stay / open), trained here by double DQN (HIL-SERL's grasp critic); the ensemble
scores the other dims. With ``bc_weight`` > 0 the actor also imitates the demo and intervention steps of each
batch (TD3+BC's term, scaled by the batch's mean |Q| so the weight does not depend on the reward's scale): from a
few demos the policy moves toward the demonstrator as soon as the critic's values leave zero, instead of learning
the demo actions back through the critic alone. A discrete gripper's commands are not imitated (its Q-head learns
them).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robolearn.buffer.replay_buffer import PARTITIONS, ReplayBuffer
from robolearn.learner.device import module_device
from robolearn.policies.encoders import random_shift
from robolearn.policies.mlp import GaussianChunkPolicy, gripper_class
from robolearn.specs import ActionSpec


@dataclass
class SACConfig:
    """``algo=sac``."""

    LEARNER_DEFAULTS: ClassVar[dict] = {"batch_size": 128, "learning_starts": 500}  # learner.* with algo=sac
    name: str = "sac"
    num_critics: int = 2
    critic_subset: int = 2         # target = min over a random subset of this many critics
    critic_hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    gamma: float = 0.97
    tau: float = 0.005
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    temperature_lr: float = 3e-4
    init_temperature: float = 0.1
    actor_update_every: int = 1    # actor (and temperature) updated every k critic updates
    demo_ratio: float = 0.5        # RLPD: share of each batch drawn from demo + intervention steps (when any)
    image_shift_pad: int = 4       # random-shift augmentation of camera frames, pixels (0: off)
    grad_clip_norm: float = 0.0    # > 0: clip each network's gradient to this norm (lerobot's default, 40)
    bc_weight: float = 0.0         # > 0: the actor also imitates demo + intervention steps (TD3+BC's term)
    target_entropy_per_dim: float = -0.5  # target entropy = this * |A| (SERL's -|A|/2; SAC's paper -|A|)
    n_step: int = 0                # > 0: n-step returns (n >= the chunk horizon); 0: one step per chunk (n = H)

    def __post_init__(self) -> None:
        if self.num_critics < 2 or not 1 <= self.critic_subset <= self.num_critics:
            raise ValueError(f"algo.num_critics must be >= 2 and 1 <= algo.critic_subset <= num_critics, "
                             f"got {self.num_critics}/{self.critic_subset}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"algo.gamma must be in (0, 1], got {self.gamma}")
        if not 0 < self.tau <= 1:
            raise ValueError(f"algo.tau must be in (0, 1], got {self.tau}")
        if not 0 <= self.demo_ratio < 1:
            raise ValueError(f"algo.demo_ratio must be in [0, 1), got {self.demo_ratio}")
        if self.grad_clip_norm < 0:
            raise ValueError(f"algo.grad_clip_norm must be >= 0 (0: off), got {self.grad_clip_norm}")
        if self.actor_update_every < 1:
            raise ValueError(f"algo.actor_update_every must be >= 1, got {self.actor_update_every}")
        if self.bc_weight < 0:
            raise ValueError(f"algo.bc_weight must be >= 0 (0: off), got {self.bc_weight}")
        if self.n_step < 0:
            raise ValueError(f"algo.n_step must be >= 1, or 0 for the chunk horizon, got {self.n_step}")
        check_target_entropy_per_dim(self.target_entropy_per_dim)


class EnsembleLinear(nn.Module):
    """N independent linear layers applied in one batched matmul: (N, B, in) -> (N, B, out)."""

    def __init__(self, n: int, d_in: int, d_out: int) -> None:
        super().__init__()
        bound = 1 / math.sqrt(d_in)
        self.weight = nn.Parameter(torch.empty(n, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, d_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleCritic(nn.Module):
    """N Q-networks on (features, action): Linear -> LayerNorm -> ReLU blocks, then a scalar head. (N, B)."""

    def __init__(self, feature_dim: int, action_dim: int, n: int, hidden: list[int]) -> None:
        super().__init__()
        self.n = n
        sizes = [feature_dim + action_dim, *hidden]
        self.layers = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.ln_weight = nn.ParameterList(nn.Parameter(torch.ones(n, 1, h)) for h in hidden)
        self.ln_bias = nn.ParameterList(nn.Parameter(torch.zeros(n, 1, h)) for h in hidden)
        self.head = EnsembleLinear(n, hidden[-1], 1)

    def forward(self, feat: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat([feat, action], dim=-1).expand(self.n, -1, -1)
        for layer, w, b in zip(self.layers, self.ln_weight, self.ln_bias):
            x = torch.addcmul(b, F.layer_norm(layer(x), w.shape[-1:]), w).relu_()
        return self.head(x).squeeze(-1)


def check_target_entropy_per_dim(value: float) -> None:
    """``algo.target_entropy_per_dim`` (SAC's and DSRL's): ValueError unless a finite number."""
    if not math.isfinite(value):
        raise ValueError(f"algo.target_entropy_per_dim must be a finite number, got {value}")


class Temperature:
    """alpha = exp(log_alpha), tuned by Adam on L_alpha = -log_alpha * (mean_B log pi + target_entropy).

    The gradient is closed-form, dL_alpha/dlog_alpha = -(mean_B log pi + target_entropy), so the step is
    scalar arithmetic, the same step ``torch.optim.Adam`` would take (a backward pass, ``zero_grad`` and
    torch's Adam on this one scalar cost about 0.7 ms an update on a 2-core CPU)."""

    def __init__(self, init: float, target_entropy: float, lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.log_alpha, self.target_entropy = math.log(init), target_entropy
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m = self.v = 0.0   # Adam's first and second moments
        self.steps = 0

    @property
    def alpha(self) -> float:
        return math.exp(self.log_alpha)

    def update(self, mean_log_prob: float) -> None:
        grad = -(mean_log_prob + self.target_entropy)
        (b1, b2), self.steps = self.betas, self.steps + 1
        self.m = b1 * self.m + (1 - b1) * grad
        self.v = b2 * self.v + (1 - b2) * grad * grad
        m_hat, v_hat = self.m / (1 - b1 ** self.steps), self.v / (1 - b2 ** self.steps)
        self.log_alpha -= self.lr * m_hat / (math.sqrt(v_hat) + self.eps)

    def state_dict(self) -> dict:
        return {"log_alpha": self.log_alpha, "m": self.m, "v": self.v, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.log_alpha, self.m, self.v = float(state["log_alpha"]), float(state["m"]), float(state["v"])
        self.steps = int(state["steps"])


def gripper_td_target(q_next: torch.Tensor, q_next_target: torch.Tensor, reward: torch.Tensor,
                      discount: torch.Tensor) -> torch.Tensor:
    """Double DQN: y = r + discount * Q'(s', argmax_g Q(s', g)); Q values (B, 3), the rest (B,)."""
    best = q_next.argmax(-1, keepdim=True)
    return reward + discount * q_next_target.gather(-1, best).squeeze(-1)


def optimiser_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor],
                   clip_norm: float = 0.0) -> None:
    """One optimiser step on ``loss`` for ``params`` only: gradients for nothing else are computed (the critic
    the actor loss flows through keeps its own), and no ``zero_grad`` pass is needed. ``clip_norm`` > 0 scales
    the gradient down to that global norm first."""
    for p, g in zip(params, torch.autograd.grad(loss, params)):
        p.grad = g
    if clip_norm > 0:
        nn.utils.clip_grad_norm_(params, clip_norm, foreach=True)
    optimizer.step()


def sample_windows(buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int, horizon: int, gamma: float,
                   demo_ratio: float, keys: tuple[str, ...] | list[str] = (),
                   image_shift_pad: int = 0, with_offline: bool = False,
                   n_step: int | None = None, with_ids: bool = False) -> dict[str, torch.Tensor]:
    """One batch of H-step windows (RLPD: ``demo_ratio`` of it from demo and intervention steps, pooled by size, the
    rest online; all online while there are none): obs (B, D), action (B, H * A) in [-1, 1], reward (B,) n-step
    return (n = H unless ``n_step``), discount (B,) gamma^n or 0 after termination, next_obs (B, D) n steps on
    (or the episode's final observation when it ends sooner). With ``keys`` (cameras, an instruction) obs and
    next_obs are {"state": (B, D), key: (B, ...)}, each camera frame (uint8 (B, H, W, 3)) shifted by up to
    ``image_shift_pad`` pixels with the replay generator. ``with_offline``: also ``offline`` (B,) bool, the row is a
    demo or intervention step. ``with_ids``: also ``obs_id`` and ``next_obs_id`` (B,) int64, the buffer's ids of the
    two observations (the same each time one is drawn)."""
    sizes = buffer.partition_sizes()
    offline = sizes["demo"] + sizes["intervention"]
    mix = None
    if demo_ratio > 0 and offline:
        mix = {"online": 1 - demo_ratio, "demo": demo_ratio * sizes["demo"] / offline,
               "intervention": demo_ratio * sizes["intervention"] / offline}
    drawn = buffer.sample(batch_size, horizon=horizon, gamma=gamma, n_step=n_step, mix=mix, with_info=with_offline,
                          with_ids=with_ids)
    action = action_spec.to_normalised(drawn["action"]).reshape(len(drawn["action"]), -1)
    batch = {"action": torch.from_numpy(action), "reward": torch.from_numpy(drawn["reward"]),
             "discount": torch.from_numpy(drawn["discount"])}
    if with_offline:
        batch["offline"] = torch.from_numpy(drawn["partition"] != PARTITIONS.index("online"))
    for side in ("obs", "next_obs"):
        if with_ids:
            batch[f"{side}_id"] = torch.from_numpy(drawn[f"{side}_id"])
        state = torch.from_numpy(drawn[f"{side}.state"])
        if not keys:
            batch[side] = state
            continue
        batch[side] = {"state": state}
        for k in keys:
            values = torch.from_numpy(np.ascontiguousarray(drawn[f"{side}.{k}"]))
            is_frame = values.dim() == 4
            batch[side][k] = random_shift(values, buffer.rng, image_shift_pad) if image_shift_pad and is_frame \
                else values
    return batch


def critic_and_target(feature_dim: int, action_dim: int, n: int, hidden: list[int],
                      device: torch.device) -> tuple[EnsembleCritic, EnsembleCritic]:
    """The critic ensemble and its target (the same weights, no gradients), on ``device``."""
    critic = EnsembleCritic(feature_dim, action_dim, n, hidden).to(device)
    target = EnsembleCritic(feature_dim, action_dim, n, hidden).to(device)
    target.load_state_dict(critic.state_dict())
    return critic, target.requires_grad_(False)


def subset_min(target_q: torch.Tensor, subset: int, generator: torch.Generator) -> torch.Tensor:
    """min over a random subset of ``subset`` of the N target critics' values (N, B) -> (B,)."""
    n = target_q.shape[0]
    if subset < n:  # a subset of all n is all of them: no draw
        target_q = target_q[torch.randperm(n, generator=generator)[:subset]]
    return target_q.min(dim=0).values


def critic_step(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], critic: EnsembleCritic,
                target: EnsembleCritic, feat: torch.Tensor, action: torch.Tensor, y: torch.Tensor, tau: float,
                clip_norm: float = 0.0) -> dict[str, float]:
    """L_Q = sum_i mean_B (Q_i(s, a) - y)^2 on ``params``, then the target's Polyak step; the critic's metrics.
    ``feat`` (B, F), ``action`` (B, H * A), ``y`` (B,)."""
    q = critic(feat, action)
    critic_loss = ((q - y.unsqueeze(0)) ** 2).mean(dim=1).sum()
    optimiser_step(optimizer, critic_loss, params, clip_norm)
    polyak(target, critic, tau)
    return {"critic_loss": critic_loss.item(), "q_mean": q.mean().item()}


def actor_step(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], critic: EnsembleCritic,
               temperature: Temperature, feat: torch.Tensor, action: torch.Tensor, log_prob: torch.Tensor,
               alpha: float, clip_norm: float = 0.0, bc_error: torch.Tensor | None = None,
               bc_weight: float = 0.0) -> dict[str, float]:
    """L_pi = mean_B (alpha * log pi - mean_i Q_i(s, a~)) on ``params`` (the critic only passes gradients through),
    then the temperature's step on the same log-probabilities; the actor's metrics. ``action`` (B, H * A) is the
    policy's reparameterised sample for ``feat`` (B, F), ``log_prob`` (B,) its log-probability. ``bc_error``: the
    mean squared error of the policy's mean action on the batch's demo rows (a scalar), added with weight
    ``bc_weight * mean_B |Q|`` (TD3+BC's scale)."""
    q_pi = critic(feat, action).mean(dim=0)
    actor_loss = (alpha * log_prob - q_pi).mean()
    metrics = {}
    if bc_error is not None:
        actor_loss = actor_loss + bc_weight * q_pi.abs().mean().detach() * bc_error
        metrics["bc_error"] = bc_error.item()
    optimiser_step(optimizer, actor_loss, params, clip_norm)
    mean_log_prob = log_prob.mean().item()
    temperature.update(mean_log_prob)
    return {"actor_loss": actor_loss.item(), "alpha": temperature.alpha, "entropy": -mean_log_prob, **metrics}


@torch.no_grad()
def polyak(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * online, for every parameter in one call."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


class SAC:
    """Holds the networks and optimisers; ``update`` does one critic step (and maybe an actor step)."""

    def __init__(self, policy: GaussianChunkPolicy, config: SACConfig, seed: int = 0) -> None:
        if not isinstance(policy, GaussianChunkPolicy):
            raise ValueError(f"algo=sac trains a tanh-Gaussian actor (policy=mlp), got {type(policy).__name__}")
        if 0 < config.n_step < policy.horizon:  # the return must cover the whole chunk the critic scores
            raise ValueError(f"algo.n_step={config.n_step} is shorter than the policy's chunk horizon "
                             f"{policy.horizon}; use n_step >= {policy.horizon}, or 0 for n = the horizon")
        self.cfg = config
        self.actor = policy
        act_dim = policy.horizon * policy.continuous_dim  # a discrete gripper has its own Q-head
        # the critics read the policy's features: its state normaliser (its running statistics updated at the top
        # of each update), its state encoder if it has one and, with cameras, its image encoder; the critic loss
        # trains the encoders (the actor sees the features with stop-gradient)
        device = module_device(policy)  # the learner put the policy on learner.device
        self.critic, self.critic_target = critic_and_target(policy.feature_dim, act_dim, config.num_critics,
                                                            config.critic_hidden_dims, device)
        self.target_entropy = config.target_entropy_per_dim * act_dim
        self.temperature = Temperature(config.init_temperature, self.target_entropy, config.temperature_lr)
        encoder = [p for m in policy.shared_encoders() for p in m.parameters()]
        gripper = list(policy.gripper_q.parameters()) if policy.gripper_q is not None else []
        not_actor = {id(p) for p in (*encoder, *gripper)}
        self._actor_params = [p for p in policy.parameters() if id(p) not in not_actor]
        self._critic_params = [*self.critic.parameters(), *encoder]
        self.actor_opt = torch.optim.Adam(self._actor_params, lr=config.actor_lr, fused=True)
        self.critic_opt = torch.optim.Adam(self._critic_params, lr=config.critic_lr, fused=True)
        self.gripper_target = self.gripper_opt = None
        if policy.gripper_q is not None:
            self.gripper_target = copy.deepcopy(policy.gripper_q).requires_grad_(False)
            self.gripper_opt = torch.optim.Adam(policy.gripper_q.parameters(), lr=config.critic_lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.num_updates = 0
        self._last_actor_metrics: dict[str, float] = {}

    def sample_batch(self, buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int) -> dict[str, torch.Tensor]:
        cameras = self.actor.encoder.keys if self.actor.encoder is not None else []
        return sample_windows(buffer, action_spec, batch_size, self.actor.horizon, self.cfg.gamma, self.cfg.demo_ratio,
                              cameras, self.cfg.image_shift_pad, with_offline=self.cfg.bc_weight > 0,
                              n_step=self.cfg.n_step or None)

    @torch.no_grad()
    def td_target(self, reward: torch.Tensor, discount: torch.Tensor, next_feat: torch.Tensor,
                  alpha: float) -> torch.Tensor:
        """y = r + discount * (min over a random subset of target critics Q'(s', a') - alpha log pi(a'|s')), (B,).
        ``next_feat``: the policy's features of s' (B, F)."""
        next_action, next_log_prob = self.actor.sample_features(next_feat)
        target_q = subset_min(self.critic_target(next_feat, next_action), self.cfg.critic_subset, self.generator)
        return reward + discount * (target_q - alpha * next_log_prob)

    def gripper_update(self, feat: torch.Tensor, next_feat: torch.Tensor, gripper: torch.Tensor,
                       reward: torch.Tensor, discount: torch.Tensor) -> float:
        """Double DQN on the discrete gripper: y = r + discount * Q'(s', argmax_g Q(s', g)); MSE on Q(s, g_taken).
        ``gripper`` (B,) the normalised command taken; features are detached (the encoder learns from the
        continuous critic)."""
        q_net = self.actor.gripper_q
        with torch.no_grad():
            y = gripper_td_target(q_net(next_feat), self.gripper_target(next_feat), reward, discount)
        q = q_net(feat).gather(-1, gripper_class(gripper).unsqueeze(-1)).squeeze(-1)
        loss = F.mse_loss(q, y)
        optimiser_step(self.gripper_opt, loss, list(q_net.parameters()), self.cfg.grad_clip_norm)
        polyak(self.gripper_target, q_net, self.cfg.tau)
        return loss.item()

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One update from a batch: obs (B, D) or {"state": (B, D), camera: uint8 (B, H, W, 3)}, action
        (B, H*A) in [-1, 1], reward (B,), discount (B,) = gamma^n or 0 after termination, next_obs like obs."""
        obs, action, reward, discount, next_obs = (
            batch["obs"], batch["action"], batch["reward"], batch["discount"], batch["next_obs"])
        alpha = self.temperature.alpha
        self.actor.normalise.update(obs if isinstance(obs, torch.Tensor) else obs["state"])  # unbounded elements

        # --- critic: regress every member onto the min over a random subset of target critics
        feat = self.actor.features(obs)  # with cameras the encoder learns from this loss only
        with torch.no_grad():
            next_feat = self.actor.features(next_obs)
            y = self.td_target(reward, discount, next_feat, alpha)
        gripper_loss = None
        if self.actor.gripper_q is not None:  # the last action dim is the discrete gripper command
            gripper_loss = self.gripper_update(feat.detach(), next_feat, action[:, -1], reward, discount)
            action = action[:, :-1]
        metrics = critic_step(self.critic_opt, self._critic_params, self.critic, self.critic_target, feat, action, y,
                              self.cfg.tau, self.cfg.grad_clip_norm)
        self.num_updates += 1
        if gripper_loss is not None:
            metrics["gripper_loss"] = gripper_loss

        # --- actor and temperature, every k critic updates
        if self.num_updates % self.cfg.actor_update_every == 0:
            feat = feat.detach()  # stop-gradient: the actor loss does not move the encoder
            new_action, log_prob = self.actor.sample_features(feat)
            self._last_actor_metrics = actor_step(self.actor_opt, self._actor_params, self.critic, self.temperature,
                                                  feat, new_action, log_prob, alpha, self.cfg.grad_clip_norm,
                                                  self.bc_error(feat, action, batch.get("offline")),
                                                  self.cfg.bc_weight)
        metrics.update(self._last_actor_metrics)
        return metrics

    def bc_error(self, feat: torch.Tensor, action: torch.Tensor, offline: torch.Tensor | None) -> torch.Tensor | None:
        """mean over the demo rows of ||tanh(mu(s)) - a||^2 / (H * A) (None without ``bc_weight`` or demo rows).
        ``feat`` (B, F), ``action`` (B, H * A) the continuous actions taken, ``offline`` (B,) bool."""
        if self.cfg.bc_weight <= 0 or offline is None or not bool(offline.any()):
            return None
        mean_action = torch.tanh(self.actor.head(feat[offline])[0])
        return (mean_action - action[offline]).square().mean()

    # --- checkpointing: everything needed for the next update to equal an uninterrupted run's
    def on_episode(self, episode_return: float, partition: str = "online") -> None:
        """Nothing to do at an episode end (the ``Algorithm`` contract)."""

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(), "temperature": self.temperature.state_dict(),
            "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "generator": self.generator.get_state(),
            "num_updates": self.num_updates,
            **({"gripper_target": self.gripper_target.state_dict(), "gripper_opt": self.gripper_opt.state_dict()}
               if self.gripper_target is not None else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.temperature.load_state_dict(state["temperature"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if self.gripper_target is not None:
            self.gripper_target.load_state_dict(state["gripper_target"])
            self.gripper_opt.load_state_dict(state["gripper_opt"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])


