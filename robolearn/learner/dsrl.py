"""DSRL: soft actor-critic in the noise space of a frozen flow policy (docs/algorithms.md, "DSRL").

With F the frozen flow policy (``policy=dsrl``'s base: a = F(s, w), its Euler integration from the noise w, H
actions), F_k its first k actions (k = ``critic_horizon``, what the robot executes before it asks again) and pi_W
the noise policy (w = b * tanh(u), u ~ N(mu(s), sigma(s))):

    y       = r + discount * (min_{j in subset} Q'_j(s', F_k(s', w')) - alpha * log pi_W(w'|s')),  w' ~ pi_W(s')
    L_Q     = sum_i mean_B (Q_i(s, a) - y)^2         a: k executed actions (B, k * A), r their k-step return, s' k on
    L_pi    = mean_B (alpha * log pi_W(w~|s) - mean_i Q_i(s, F_k(s, w~))),  w~ ~ pi_W(s), the gradient through F
    L_alpha = -mean_B log_alpha * (log pi_W(w~|s) + target_entropy),  target entropy e |W| (e = -1/2 by default)

With ``policy.shared_noise`` pi_W chooses one A-vector v that starts every one of the chunk's H positions (w = v
repeated, ``DSRLPolicy.chunk_noise``): log pi_W, |W| and Q_W's input are v's, A elements instead of H * A.

With ``noise_critic`` (DSRL-NA, "noise aliasing") pi_W learns from a noise critic Q_W instead, distilled from Q over
noise drawn, row by row at even odds, from pi_W or from the base's own prior N(0, I) (clipped to the bound b), so
pi_W's gradient never passes through F:

    L_W     = sum_i mean_B (Q_W,i(s, w) - mean_j Q_j(s, F_k(s, w)))^2,  w as above, no gradient into Q or F
    L_pi    = mean_B (alpha * log pi_W(w~|s) - mean_i Q_W,i(s, w~))

The critic scores executed actions, not noise: transitions need no record of the noise behind them, and
demonstration and intervention steps (RLPD's ``demo_ratio``) are scored like any other. F's parameters are outside
every optimiser and get no gradient; only pi_W and the critics learn, so the flow policy's weights stay
bit-identical. s enters pi_W and the critic as the policy's normalised context c(s) (``DSRLPolicy.context``: the
state, or for a VLA base its frozen trunk features beside the state). A VLA's features of a stored observation are
computed once and kept by the buffer's observation id (``learner.feature_cache``; ``algo.feature_cache`` rows): the
base is frozen, so they never change, and encoding the batch's observations and next observations (two cameras and
the words each) was most of an update's time. The critic ensemble, target, temperature and optimiser step are SAC's
(``learner.sac``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.checkpoint import load_checkpoint
from robolearn.learner.device import module_device
from robolearn.learner.feature_cache import FeatureCache
from robolearn.learner.sac import (
    EnsembleCritic,
    Temperature,
    actor_step,
    check_target_entropy_per_dim,
    critic_and_target,
    critic_step,
    optimiser_step,
    sample_windows,
    subset_min,
)
from robolearn.policies.dsrl import DSRLPolicy
from robolearn.specs import ActionSpec

Observation = torch.Tensor | dict[str, torch.Tensor]  # the state, or every observation the base reads


@dataclass
class DSRLConfig:
    """``algo=dsrl`` (with ``policy=dsrl``)."""

    LEARNER_DEFAULTS: ClassVar[dict] = {"batch_size": 128, "learning_starts": 500}
    name: str = "dsrl"
    num_critics: int = 2
    critic_subset: int = 2
    critic_hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    gamma: float = 0.97
    tau: float = 0.005
    actor_lr: float = 3e-4
    critic_lr: float = 1e-3
    temperature_lr: float = 3e-4
    init_temperature: float = 0.1
    actor_update_every: int = 1
    actor_warmup: int = 0          # critic-only updates before pi_W's first step: an untrained critic's slope
                                   # (through F, or Q_W's) would move the noise away from where the frozen policy works
    demo_ratio: float = 0.0        # RLPD: share of each batch from demo + intervention steps (when any)
    grad_clip_norm: float = 0.0
    feature_cache: int = 200_000   # a VLA base's features kept per stored observation (rows; 0: encode every draw)
    target_entropy_per_dim: float = -0.5  # e: target entropy e * |W| (|W|: pi_W's elements, H * A or A with
                                          # policy.shared_noise; as SAC's)
    critic_horizon: int = 0        # k: the critic scores a chunk's first k actions, bootstrapping k steps on (set it
                                   # to actor.chunking.execute_horizon: the robot asks again after those); 0: all H
    noise_critic: bool = False     # DSRL-NA: pi_W learns from Q_W(s, w) distilled from Q(s, F_k(s, w)), not through F

    def __post_init__(self) -> None:
        if self.num_critics < 2 or not 1 <= self.critic_subset <= self.num_critics:
            raise ValueError(f"algo.num_critics must be >= 2 and 1 <= algo.critic_subset <= num_critics, "
                             f"got {self.num_critics}/{self.critic_subset}")
        if not 0 < self.gamma <= 1 or not 0 < self.tau <= 1:
            raise ValueError(f"algo.gamma and algo.tau must be in (0, 1], got {self.gamma}, {self.tau}")
        if not 0 <= self.demo_ratio < 1:
            raise ValueError(f"algo.demo_ratio must be in [0, 1), got {self.demo_ratio}")
        if self.grad_clip_norm < 0 or self.actor_update_every < 1:
            raise ValueError("algo.grad_clip_norm must be >= 0 and algo.actor_update_every >= 1")
        check_target_entropy_per_dim(self.target_entropy_per_dim)
        if self.actor_warmup < 0 or self.feature_cache < 0 or self.critic_horizon < 0:
            raise ValueError(f"algo.actor_warmup, algo.feature_cache and algo.critic_horizon must be >= 0, got "
                             f"{self.actor_warmup}, {self.feature_cache}, {self.critic_horizon}")


class DSRL:
    """The noise policy (in ``actor``, beside the frozen base), the critics and their optimisers."""

    def __init__(self, policy: DSRLPolicy, config: DSRLConfig, seed: int = 0) -> None:
        if not isinstance(policy, DSRLPolicy):
            raise ValueError(f"algo=dsrl steers a frozen flow policy through its noise (policy=dsrl), got "
                             f"{type(policy).__name__}")
        if not policy.config.base_checkpoint:
            raise ValueError("algo=dsrl needs the frozen flow policy's weights: set policy.base_checkpoint")
        if config.critic_horizon > policy.horizon:
            raise ValueError(f"algo.critic_horizon ({config.critic_horizon}) must be at most the base's chunk of "
                             f"{policy.horizon} actions (0: all of them)")
        # the run's own checkpoint, once there is one, holds the same base weights (load_state_dict)
        try:
            base = load_checkpoint(Path(policy.config.base_checkpoint))
        except FileNotFoundError as exc:
            raise ValueError(f"policy.base_checkpoint: {exc}") from None
        policy.load_base(base.policy_weights)
        self.cfg = config
        self.actor = policy
        self.critic_horizon = config.critic_horizon or policy.horizon  # k
        device = module_device(policy)
        self.critic, self.critic_target = critic_and_target(policy.context_dim, self.critic_horizon * policy.action_dim,
                                                            config.num_critics, config.critic_hidden_dims, device)
        self.target_entropy = config.target_entropy_per_dim * policy.noise_dim  # |W|: H * A, or A when shared
        self.temperature = Temperature(config.init_temperature, self.target_entropy, config.temperature_lr)
        self._actor_params = list(policy.noise_actor.parameters())  # never the base's
        self._critic_params = list(self.critic.parameters())
        # Q_W (DSRL-NA) on (c(s), v), v the noise policy's (B, |W|): the action critic's size, learning rate and
        # clipping
        self.noise_critic: EnsembleCritic | None = None
        self._noise_critic_params: list[torch.Tensor] = []
        self.noise_critic_opt: torch.optim.Optimizer | None = None
        if config.noise_critic:
            self.noise_critic = EnsembleCritic(policy.context_dim, policy.noise_dim,
                                               config.num_critics, config.critic_hidden_dims).to(device)
            self._noise_critic_params = list(self.noise_critic.parameters())
            self.noise_critic_opt = torch.optim.Adam(self._noise_critic_params, lr=config.critic_lr)
        self.actor_opt = torch.optim.Adam(self._actor_params, lr=config.actor_lr)
        self.critic_opt = torch.optim.Adam(self._critic_params, lr=config.critic_lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.num_updates = 0
        self._last_actor_metrics: dict[str, float] = {}
        # only a base that reads more than the state has features worth keeping (a flow base's context is the state)
        self.features = FeatureCache(policy.base.encode, config.feature_cache) \
            if policy.reads_more and config.feature_cache else None

    def sample_batch(self, buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int) -> dict[str, torch.Tensor]:
        """SAC's k-step windows: obs (B, S), action (B, k * A), reward (B,) k-step return, discount (B,), next_obs k
        steps on; obs and next_obs are dicts of every observation the base reads when that is more than the state (a
        VLA's), with their buffer ids obs_id and next_obs_id (B,) when the features are cached."""
        return sample_windows(buffer, action_spec, batch_size, self.critic_horizon, self.cfg.gamma, self.cfg.demo_ratio,
                              keys=self.actor.observation_keys[1:], with_ids=self.features is not None)

    def context(self, obs: Observation, ids: torch.Tensor | None) -> torch.Tensor:
        """c(s) (B, C), the base's features looked up by the observations' buffer ids when cached."""
        kept = self.features(obs, ids) if self.features is not None and ids is not None else None
        return self.actor.context(obs, kept)

    def executed_actions(self, obs: Observation, noise: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """F_k(s, w): the first k actions of the chunk F makes from ``noise`` (B, H, A), flattened (B, k * A), as
        the critic reads them."""
        return self.actor.actions(obs, noise, context=context)[:, :self.critic_horizon].flatten(1)

    def policy_actions(self, obs: Observation, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """a = F_k(s, w), w ~ pi_W(c(s)): the chunk's first k actions (B, k * A) and log pi_W(w|s) (B,),
        differentiable in pi_W."""
        noise, log_prob = self.actor.noise(context)
        return self.executed_actions(obs, noise, context), log_prob

    @torch.no_grad()
    def td_target(self, reward: torch.Tensor, discount: torch.Tensor, next_obs: Observation, context: torch.Tensor,
                  alpha: float) -> torch.Tensor:
        """y (B,) = r + discount * (min over a random subset of Q'(s', F_k(s', w')) - alpha log pi_W(w'|s')), with
        ``context`` c(s') (B, C)."""
        next_action, next_log_prob = self.policy_actions(next_obs, context)
        target_q = subset_min(self.critic_target(self.actor.normalise(context), next_action), self.cfg.critic_subset,
                              self.generator)
        return reward + discount * (target_q - alpha * next_log_prob)

    def distil_step(self, obs: Observation, context: torch.Tensor, feat: torch.Tensor) -> dict[str, float]:
        """L_W: one step of the noise critic Q_W towards the action critic's ensemble mean value of F_k(s, w), each
        row's v (B, |W|, w = v as the chunk's noise) drawn from pi_W(s) or from the base's prior N(0, I) clipped to
        the bound, by an even coin per row (rows come grouped by partition, so a split by position would give demo
        rows one kind of noise only);
        ``context`` c(s) and ``feat`` its normalised form (B, C)."""
        if self.noise_critic is None:
            raise RuntimeError("DSRL.distil_step needs the noise critic: set algo.noise_critic=true")
        with torch.no_grad():
            drawn = self.actor.noise_vector(self.actor.noise(context)[0])  # v (B, |W|)
            bound = self.actor.config.noise_bound
            prior = torch.randn(drawn.shape, generator=self.generator).clamp(-bound, bound).to(drawn.device)
            from_prior = (torch.rand(drawn.shape[0], generator=self.generator) < 0.5).to(drawn.device)
            noise = torch.where(from_prior[:, None], prior, drawn)
            value = self.critic(feat, self.executed_actions(obs, self.actor.chunk_noise(noise), context)).mean(dim=0)
        q_w = self.noise_critic(feat, noise)
        loss = ((q_w - value.unsqueeze(0)) ** 2).mean(dim=1).sum()
        optimiser_step(self.noise_critic_opt, loss, self._noise_critic_params, self.cfg.grad_clip_norm)
        return {"noise_critic_loss": loss.item()}

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One critic step, with ``noise_critic`` one noise-critic step, and maybe an actor step: obs (B, S) (or the
        dict of what the base reads), action (B, k * A) in [-1, 1], reward (B,), discount (B,), next_obs like obs."""
        obs, action, reward, discount, next_obs = (
            batch["obs"], batch["action"], batch["reward"], batch["discount"], batch["next_obs"])
        alpha = self.temperature.alpha
        context = self.context(obs, batch.get("obs_id"))
        self.actor.normalise.update(context)  # pi_W's running statistics; the base's are frozen with it

        feat = self.actor.normalise(context)
        y = self.td_target(reward, discount, next_obs, self.context(next_obs, batch.get("next_obs_id")), alpha)
        metrics = critic_step(self.critic_opt, self._critic_params, self.critic, self.critic_target, feat, action, y,
                              self.cfg.tau, self.cfg.grad_clip_norm)
        self.num_updates += 1
        if self.noise_critic is not None:
            metrics.update(self.distil_step(obs, context, feat))

        if self.num_updates > self.cfg.actor_warmup and self.num_updates % self.cfg.actor_update_every == 0:
            if self.noise_critic is not None:  # DSRL-NA: scored by Q_W on the noise itself
                noise, log_prob = self.actor.noise(context)
                critic, scored = self.noise_critic, self.actor.noise_vector(noise)
            else:  # scored by Q on F_k(s, w~): the gradient reaches pi_W through F
                critic, (scored, log_prob) = self.critic, self.policy_actions(obs, context)
            self._last_actor_metrics = actor_step(self.actor_opt, self._actor_params, critic, self.temperature,
                                                  feat, scored, log_prob, alpha, self.cfg.grad_clip_norm)
        metrics.update(self._last_actor_metrics)
        return metrics

    def on_episode(self, episode_return: float, partition: str = "online") -> None:
        """Nothing to do at an episode end (the ``Algorithm`` contract)."""

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic_target.state_dict(), "temperature": self.temperature.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "generator": self.generator.get_state(), "num_updates": self.num_updates,
                **({"noise_critic": self.noise_critic.state_dict(),
                    "noise_critic_opt": self.noise_critic_opt.state_dict()} if self.noise_critic is not None else {})}

    def load_state_dict(self, state: dict) -> None:
        if (self.noise_critic is not None) != ("noise_critic" in state):
            saved = "with" if "noise_critic" in state else "without"
            raise ValueError(f"algo.noise_critic is {str(self.noise_critic is not None).lower()} but the checkpoint "
                             f"was saved {saved} a noise critic: resume with the setting it was saved with")
        chosen = state["actor"]["noise_actor.gaussian.weight"].shape[0] // 2  # the mean and log std of each element
        if chosen != self.actor.noise_dim:
            raise ValueError(f"the checkpoint's noise policy chooses {chosen} noise elements, policy.shared_noise="
                             f"{str(self.actor.config.shared_noise).lower()} {self.actor.noise_dim}: resume with the "
                             "policy.shared_noise it was saved with")
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.temperature.load_state_dict(state["temperature"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.generator.set_state(state["generator"])
        self.num_updates = int(state["num_updates"])
        if self.noise_critic is not None:
            self.noise_critic.load_state_dict(state["noise_critic"])
            self.noise_critic_opt.load_state_dict(state["noise_critic_opt"])
