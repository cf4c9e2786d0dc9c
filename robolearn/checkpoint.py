"""The one checkpoint format, written by the learner and read by the learner (resume), ``robolearn eval``
and the policy server: ``runs/<name>/checkpoints/latest.pt``.

A checkpoint is a ``torch.save`` of tensors and primitives only, loaded back with ``weights_only=True``
(never arbitrary pickles): the algorithm's ``state_dict()`` (its ``"actor"`` entry is the policy's state
dict), the weight version, the online env steps ingested, the replay generator's state after the last
consumed batch and torch's RNG states, the CPU's and a GPU learner's CUDA one (so a resumed run's next update
equals the uninterrupted run's).
Writes are atomic: a temporary file, fsync, rename.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Checkpoint:
    algo: dict[str, Any]          # the algorithm's state_dict(); ["actor"] holds the policy's weights
    version: int                  # the weight version these weights were published as
    env_steps: int                # online steps ingested when it was written
    replay_rng: dict[str, Any]    # numpy bit-generator state of the replay sampler
    torch_rng: torch.Tensor
    cuda_rng: torch.Tensor | None = None  # the learner's CUDA generator (a learner on a GPU draws its noise there)

    @property
    def policy_weights(self) -> dict[str, torch.Tensor]:
        return self.algo["actor"]


def save_checkpoint(path: Path, ckpt: Checkpoint) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        torch.save({"algo": ckpt.algo, "version": ckpt.version, "env_steps": ckpt.env_steps,
                    "replay_rng": ckpt.replay_rng, "torch_rng": ckpt.torch_rng,
                    **({"cuda_rng": ckpt.cuda_rng} if ckpt.cuda_rng is not None else {})}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_policy_checkpoint(path: Path, weights: dict[str, torch.Tensor]) -> None:
    """A checkpoint of a policy trained outside a run (offline BC, a benchmark, a test): its weights as the
    actor, published as version 1 with no online steps and no replay state; ``robolearn eval``, the policy
    server and a frozen base (``policy.base_checkpoint``) read it like a run's."""
    save_checkpoint(path, Checkpoint({"actor": weights}, 1, 0, {}, torch.get_rng_state()))


def load_checkpoint(path: Path) -> Checkpoint:
    """``FileNotFoundError`` naming the run when there is none yet."""
    if not path.exists():
        raise FileNotFoundError(f"{path.parent.parent} has no checkpoint yet ({path})")
    state = torch.load(path, map_location="cpu", weights_only=True)  # tensors and primitives only
    return Checkpoint(state["algo"], int(state["version"]), int(state["env_steps"]), state["replay_rng"],
                      state["torch_rng"], state.get("cuda_rng"))
