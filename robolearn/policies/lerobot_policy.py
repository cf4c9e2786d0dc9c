"""Any lerobot policy saved with ``save_pretrained`` (plus its pre/post-processors) as a chunk policy that
robolearn's policy server and clients serve: ``predict_chunk`` runs lerobot's own preprocessing,
``predict_action_chunk`` and postprocessing, exactly as lerobot's async-inference server does.

Observation keys: ``state`` is lerobot's ``observation.state``; a camera ``front`` is
``observation.images.front``, sent as uint8 (H, W, 3) and turned into float (3, H, W) in [0, 1] here.
Actions come back in robot units from lerobot's postprocessor and are normalised with the robot's
action spec, like every chunk policy's output. The committed prefix is ignored (lerobot policies are
not prefix-conditioned). Weights load from safetensors; nothing is unpickled.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

OBS_STATE, OBS_IMAGES = "observation.state", "observation.images."


class LerobotChunkPolicy(nn.Module):
    def __init__(self, path: str, action_spec: ActionSpec, state_bounds: float = 1e6) -> None:
        super().__init__()
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies import get_policy_class, make_pre_post_processors

        cfg = PreTrainedConfig.from_pretrained(path)
        self.policy = get_policy_class(cfg.type).from_pretrained(path)
        # channels-last is oneDNN's preferred layout for convolutions on CPU: the same ACT with a resnet18
        # backbone runs its forward pass in ~17 ms instead of ~29 ms on this 2-core machine
        self.policy.to(memory_format=torch.channels_last)
        self.policy.eval()
        self.pre, self.post = make_pre_post_processors(self.policy.config, pretrained_path=path)
        self.action_spec = action_spec
        self.horizon = int(getattr(self.policy.config, "chunk_size", 1))
        arrays = {}
        for key, feat in self.policy.config.input_features.items():
            if key == OBS_STATE:
                arrays["state"] = ArraySpec(tuple(feat.shape), low=(-state_bounds,) * feat.shape[0],
                                            high=(state_bounds,) * feat.shape[0])
            elif key.startswith(OBS_IMAGES):
                c, h, w = feat.shape
                arrays[key.removeprefix(OBS_IMAGES)] = ArraySpec((h, w, c), dtype="uint8", unit="RGB")
            else:
                raise ValueError(f"lerobot input feature {key!r} has no robolearn observation key")
        self.observation_spec = ObservationSpec(arrays)

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:
        batch = {}
        for key, value in observations.items():
            t = torch.as_tensor(value)
            if key == "state":
                batch[OBS_STATE] = t.float()
            else:  # (B, H, W, 3) uint8 -> (B, 3, H, W) float in [0, 1], channels-last in memory
                batch[OBS_IMAGES + key] = t.permute(0, 3, 1, 2).float().contiguous(
                    memory_format=torch.channels_last) / 255.0
        with torch.inference_mode():
            chunk = self.policy.predict_action_chunk(self.pre(batch))  # (B, H, A), normalised by lerobot
            # one postprocessor call for the whole chunk: its unnormalisation broadcasts over (B, H, A)
            actions = self.post(chunk)
        return self.action_spec.to_normalised(actions.cpu().numpy()).astype(np.float32)
