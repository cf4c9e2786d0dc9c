"""The algorithm contract: what the learner loop (``learner.loop``) asks of SAC, HABC, Hi-ORS or a new method.

The loop owns the schedule (``learner.*``: when to update, how often to publish and checkpoint, batch size,
prefetch); an algorithm owns only its losses and optimisers, in the style of LeRobot's ``RLAlgorithm`` and
SB3's ``OffPolicyAlgorithm``. The loop calls, per update, ``update(sample_batch(buffer, spec, batch_size))``
(the batch may be drawn ahead on the prefetch thread), ``on_episode`` once per ended episode, and
``state_dict`` / ``load_state_dict`` for checkpoints; ``actor`` is the policy whose weights are published.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.specs import ActionSpec


@runtime_checkable
class Algorithm(Protocol):
    actor: torch.nn.Module
    num_updates: int

    def sample_batch(self, buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int) -> dict[str, torch.Tensor]:
        """One training batch from the buffer (called with the buffer's lock held)."""
        ...

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step on ``batch``; returns the losses and diagnostics to log."""
        ...

    def on_episode(self, episode_return: float, partition: str = "online") -> None:
        """An episode ended in the buffer (e.g. Hi-ORS moves its acceptance threshold)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs (``state_dict()["actor"]`` is the policy's)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
