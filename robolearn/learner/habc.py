"""HABC: hierarchical advantage-weighted behaviour cloning (docs/algorithms.md, "HABC").

A value model with a shared backbone phi and two heads scores every window (s, a_{t:t+H}, s'):

    viability   z_v(s) logit, p_v = sigmoid(z_v)      BCE against the episode outcome y, on outcome-
                                                      labelled policy-executed windows
    efficiency  V_e(s)                                Huber on successful windows (autonomous, intervention
                                                      or demo) toward 0 when the window ends in the success,
                                                      else -1 + sg(V_e(s'))  (minus the chunks still needed)

    A_v = z_v(s') - z_v(s)        A_e = -1 + V_e(s') - V_e(s)     (V_e(s') = 0 at the success)
    g   = 1 + tanh((1 - p_v) A_v + p_v A_e)   in [0, 2]          (g = 1 for the first ``warmup`` updates)

Weights by source: demo 1, intervention 1 (g with ``reweight_interventions``), outcome-labelled
autonomous step of a successful episode g, of a failed one 0. An autonomous step that is not labelled
(it precedes an intervention in its episode: the human took over because of it) also gets 0.
w = w_raw / max(mean_B w_raw, eps); actor loss = mean_B w * (the policy's per-example BC loss: the
prefix-masked flow matching of ``FlowChunkPolicy``, or a lerobot policy's own loss on the batch redrawn by w,
``LerobotChunkPolicy.weighted_loss``).

Credit labels come from the buffer (``labelled``: autonomous, after the episode's last intervention).
Choices left open and taken here: s' is the observation after the H-step window (the chunk is the
decision), and z_v(s') is the network's value at s' even when s' is terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.learner.chunk_batch import observation_keys, policy_input, require_bc_policy, sample_chunk_windows
from robolearn.learner.device import module_device
from robolearn.policies.mlp import mlp
from robolearn.specs import ActionSpec

EPS = 1e-6


@dataclass
class HABCConfig:
    """``algo=habc``."""

    name: str = "habc"
    actor_lr: float = 3e-4
    value_lr: float = 1e-3
    value_hidden_dims: list[int] = field(default_factory=lambda: [256, 256])
    warmup: int = 500                    # updates with g = 1 while the value heads learn
    reweight_interventions: bool = False  # intervention steps weighted by g instead of 1
    huber_delta: float = 1.0

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"algo.warmup must be >= 0, got {self.warmup}")


class ValueHeads(nn.Module):
    """phi(s) -> (z_v(s), V_e(s)), each (B,)."""

    def __init__(self, normalise: nn.Module, obs_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.normalise = normalise
        self.backbone = nn.Sequential(mlp([obs_dim, *hidden]), nn.ReLU())
        self.viability = nn.Linear(hidden[-1], 1)
        self.efficiency = nn.Linear(hidden[-1], 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.backbone(self.normalise(obs))
        return self.viability(h).squeeze(-1), self.efficiency(h).squeeze(-1)


def gate(z_s: torch.Tensor, z_next: torch.Tensor, ve_s: torch.Tensor, ve_next: torch.Tensor,
         success_end: torch.Tensor) -> torch.Tensor:
    """g = 1 + tanh((1 - p_v) A_v + p_v A_e), all (B,); ``success_end`` 1 where V_e(s') is 0 (the success)."""
    p_v = torch.sigmoid(z_s)
    a_v = z_next - z_s
    a_e = -1.0 + (1 - success_end) * ve_next - ve_s
    return 1.0 + torch.tanh((1 - p_v) * a_v + p_v * a_e)


def raw_weights(g: torch.Tensor, batch: dict[str, torch.Tensor], reweight_interventions: bool) -> torch.Tensor:
    """Per-window weight before normalisation, by source (see the module docstring)."""
    demo, interv = batch["demo"], batch["intervention"]
    autonomous = (1 - demo) * (1 - interv)
    labelled_success = autonomous * batch["labelled"] * batch["episode_success"]
    w_interv = g if reweight_interventions else torch.ones_like(g)
    return demo * 1.0 + (1 - demo) * interv * w_interv + labelled_success * g


def normalise_weights(w_raw: torch.Tensor) -> torch.Tensor:
    return w_raw / w_raw.mean().clamp(min=EPS)


def value_losses(heads: ValueHeads, batch: dict[str, torch.Tensor], huber_delta: float
                 ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """(viability BCE, efficiency Huber, (z_s, ve_s, z_next, ve_next, success_end)) for one batch."""
    z_s, ve_s = heads(batch["obs"])
    with torch.no_grad():
        z_next, ve_next = heads(batch["next_obs"])
    demo, interv, success = batch["demo"], batch["intervention"], batch["episode_success"]
    autonomous = (1 - demo) * (1 - interv)
    # viability: outcome-labelled windows the policy executed
    m_v = autonomous * batch["labelled"]
    bce = F.binary_cross_entropy_with_logits(z_s, success, reduction="none")
    loss_v = (m_v * bce).sum() / m_v.sum().clamp(min=1.0)
    # efficiency: windows of successful episodes (a labelled autonomous one, an intervention or a demo)
    m_e = success * (demo + interv + autonomous * batch["labelled"]).clamp(max=1.0)
    success_end = batch["done"] * success
    target = torch.where(success_end > 0, torch.zeros_like(ve_next), -1.0 + ve_next)
    huber = F.huber_loss(ve_s, target, delta=huber_delta, reduction="none")
    loss_e = (m_e * huber).sum() / m_e.sum().clamp(min=1.0)
    return loss_v, loss_e, (z_s.detach(), ve_s.detach(), z_next, ve_next, success_end)


class HABC:
    """The chunk policy (``policy=flow_chunk`` or ``policy=lerobot``) and the value heads; ``update`` does one
    step of each."""

    def __init__(self, policy: nn.Module, config: HABCConfig, seed: int = 0) -> None:
        self.cfg = config
        require_bc_policy(policy, "habc")
        self.actor = policy
        self.horizon = policy.horizon
        # built where the learner put the policy (learner.device)
        self.heads = ValueHeads(policy.normalise, policy.obs_dim, config.value_hidden_dims).to(module_device(policy))
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.actor_lr)
        self.value_opt = torch.optim.Adam(self.heads.parameters(), lr=config.value_lr)
        self.num_updates = 0

    def sample_batch(self, buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int) -> dict[str, torch.Tensor]:
        return sample_chunk_windows(buffer, action_spec, batch_size, self.horizon,
                                    observation_keys(self.actor))

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        self.actor.normalise.update(batch["obs"])  # running statistics of unbounded state elements
        loss_v, loss_e, (z_s, ve_s, z_next, ve_next, success_end) = value_losses(self.heads, batch,
                                                                                 self.cfg.huber_delta)
        self.value_opt.zero_grad(set_to_none=True)
        (loss_v + loss_e).backward()
        self.value_opt.step()

        g = gate(z_s, z_next, ve_s, ve_next, success_end)
        if self.num_updates < self.cfg.warmup:
            g = torch.ones_like(g)
        w = normalise_weights(raw_weights(g, batch, self.cfg.reweight_interventions))
        self.actor.train()
        actor_loss = self.actor.weighted_loss(policy_input(batch), batch["actions"], batch["valid"], w)
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        self.actor.eval()
        self.num_updates += 1
        return {"actor_loss": actor_loss.item(), "viability_loss": loss_v.item(), "efficiency_loss": loss_e.item(),
                "gate_mean": g.mean().item(), "weight_zero_fraction": (w == 0).float().mean().item()}

    def on_episode(self, episode_return: float, partition: str = "online") -> None:
        """Nothing to do at an episode end (the ``Algorithm`` contract)."""

    def state_dict(self) -> dict:
        return {"actor": self.actor.state_dict(), "heads": self.heads.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "value_opt": self.value_opt.state_dict(),
                "num_updates": self.num_updates}

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.heads.load_state_dict(state["heads"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.value_opt.load_state_dict(state["value_opt"])
        self.num_updates = int(state["num_updates"])


