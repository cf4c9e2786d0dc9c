"""Batches of action-chunk windows for the imitation-style learners (HABC, Hi-ORS).

One sample is the window (s_t, a_{t:t+H}, s') of ``horizon`` steps from the replay buffer, where s' is
the observation after the window (the episode's final observation when the window reaches its end),
with the per-step labels the losses need. Actions are normalised to [-1, 1].

Shapes: ``obs``/``next_obs`` (B, S); ``actions`` (B, H, A); ``valid`` (B, H) float (1 for real steps,
0 past an episode end); ``done`` (B,) float, 1 when the window ends its episode by termination;
``demo``, ``intervention``, ``labelled``, ``episode_success`` (B,) float. For a policy that reads more than the
state (``policy.observation_keys``: a VLA's cameras and instruction) ``observation`` is the dict of those at s_t,
{"state": (B, S), camera: uint8 (B, H, W, 3), "instruction": uint8 (B, N)}: what ``weighted_loss`` takes then.
"""

from __future__ import annotations

import numpy as np
import torch

from robolearn.buffer.replay_buffer import PARTITIONS, ReplayBuffer
from robolearn.policies.lerobot_policy import LerobotFolderPolicy
from robolearn.specs import ActionSpec

DEMO_CODE = PARTITIONS.index("demo")
BC_POLICY = ("weighted_loss", "normalise", "obs_dim", "horizon")  # what the BC learners use of a policy


def observation_keys(policy: object) -> tuple[str, ...]:
    """The observations a chunk policy reads: its ``observation_keys``, else the state alone."""
    return tuple(getattr(policy, "observation_keys", ("state",)))


def require_bc_policy(policy: object, algo: str) -> None:
    """The BC learners train a chunk policy by weighted imitation; say which policies those are when it is not."""
    if not all(hasattr(policy, name) for name in BC_POLICY):
        raise ValueError(f"algo={algo} trains a chunk policy by weighted BC: policy=flow_chunk, policy=vla, or "
                         f"policy=lerobot built by policy.type; got {type(policy).__name__}" + (
                             " (a lerobot folder's policy, policy.path, is served as saved by the standalone policy "
                             "server, python -m robolearn.runtime.policy_server, not trained)"
                             if isinstance(policy, LerobotFolderPolicy) else ""))
    if getattr(policy, "takes_mid_observation", False):
        # its loss needs the observations 0..D ticks before each window, which these batches do not carry
        raise ValueError(f"algo={algo} cannot train a two-stage policy (policy.mid_observation=true) yet: its trunk "
                         "learns from the observations before each window, which only behaviour cloning from "
                         "demos has (robolearn.learner.bc.train_bc, as benchmarks/delay_sweep.py does); train it "
                         "one-stage here")


def policy_input(batch: dict) -> torch.Tensor | dict[str, torch.Tensor]:
    """What the policy's ``weighted_loss`` takes of a batch: the observation dict, or the state alone."""
    return batch.get("observation", batch["obs"])


def sample_chunk_windows(buffer: ReplayBuffer, action_spec: ActionSpec, batch_size: int, horizon: int,
                         keys: tuple[str, ...] = ("state",), **filters) -> dict[str, torch.Tensor]:
    """``keys``: the observations the policy reads (``policy.observation_keys``; the state alone by default).
    ``filters`` go to ``ReplayBuffer.sample`` (``mix``, ``min_return``, ``min_episode_steps``, ...)."""
    drawn = buffer.sample(batch_size, horizon=horizon, gamma=1.0, with_info=True, **filters)
    actions = action_spec.to_normalised(drawn["action"]).astype(np.float32)

    def t(x, dtype=torch.float32):
        return torch.as_tensor(np.asarray(x), dtype=dtype)

    batch = {
        "obs": t(drawn["obs.state"]), "next_obs": t(drawn["next_obs.state"]), "actions": t(actions),
        "valid": t(drawn["action_mask"]), "done": t(drawn["discount"] == 0.0),
        "demo": t(drawn["partition"] == DEMO_CODE), "intervention": t(drawn["intervention"]),
        "labelled": t(drawn["labelled"]), "episode_success": t(drawn["episode_success"]),
    }
    if tuple(keys) != ("state",):
        batch["observation"] = {k: batch["obs"] if k == "state" else torch.from_numpy(np.ascontiguousarray(
            drawn[f"obs.{k}"])) for k in keys}
    return batch
