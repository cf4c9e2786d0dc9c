"""lerobot's policies as robolearn chunk policies (``policy=lerobot``): served by robolearn's policy server,
executed by its chunk executor, and, when robolearn builds them, trained by its BC learners (HABC, Hi-ORS).

Two ways to get one (docs/algorithms.md, "lerobot policies"):

- ``policy.type=act`` (any type lerobot registers) with ``policy.config`` (the lerobot config's own fields,
  e.g. ``chunk_size``, ``dim_model``): built for the task's observations, trained here. robolearn scales the state
  (``ObsNormaliser``: spec bounds, running statistics for unbounded elements) and the actions ([-1, 1] by the
  action spec) itself, so lerobot's normalisation is identity; lerobot's preprocessor still runs (with identity
  normalisation it only tokenizes the instruction, for the types that read one). The state vector is given to
  lerobot both as ``observation.state`` and as ``observation.environment_state``: ACT and Diffusion refuse inputs
  with neither an image nor an environment state, and robolearn's state holds the scene's values too (the target,
  the cube). The task's cameras are ``observation.images.<camera>`` (``policy.use_cameras``, on by default; their
  backbones start from scratch, as nothing is downloaded at run time, unless ``policy.config`` names pretrained
  weights). A type whose preprocessor tokenizes the task (SmolVLA, with ``policy.config.vlm_model_name`` a local
  folder) reads the task's text observation (the instruction) as lerobot's ``task`` string. The BC learners'
  batches carry every observation the policy reads (``observation_keys``).
- ``policy.path=DIR``: a folder saved by lerobot's ``save_pretrained`` (with its pre/post-processors), served as
  saved: lerobot's own preprocessing, ``predict_action_chunk`` and postprocessing, exactly as lerobot's
  async-inference server runs it. Its input features must be observations the task provides (``state`` is
  ``observation.state``; a camera ``front`` is ``observation.images.front``, sent as uint8 (H, W, 3) and turned
  into float (3, H, W) in [0, 1] here). A policy whose preprocessor tokenizes the task (SmolVLA) gets the task's
  text observation (the instruction) as lerobot's ``task`` string. Served only: robolearn does not train a policy
  with another's scaling.

Neither is prefix-conditioned: the committed prefix of a request is ignored (the chunk executor's splice keeps
the committed actions), and neither explores: ``explore`` is ignored, so ACT in eval mode gives one chunk per
observation (no exploration noise in online collection, and no spread for the GUI's uncertainty). A folder's policy
is served by the standalone policy server (``python -m robolearn.runtime.policy_server --policy lerobot
--policy-config '{"path": DIR}'``); ``robolearn run`` trains, and its learners refuse it. Weights load from
safetensors; nothing is unpickled.

Weighted BC: the BC learners weight each window (HABC's advantage gate, Hi-ORS's acceptance). lerobot's losses
reduce over the batch inside the policy, so ``weighted_loss`` draws the batch again with probabilities
proportional to the weights and takes lerobot's own loss on it: lerobot's objective on the w-weighted data, for any
policy type (for a per-window loss l_i, E_{i ~ w}[l_i] = mean_B(w l) / mean_B(w); ACT averages its L1 over the
valid steps of the whole batch, so a window cut by an episode end counts for its valid steps).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from robolearn.policies.encoders import image_keys
from robolearn.policies.mlp import ObsNormaliser, state_vector_spec
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec, decode_text, is_text

OBS_STATE, OBS_ENV_STATE, OBS_IMAGES, ACTION = ("observation.state", "observation.environment_state",
                                                "observation.images.", "action")


@dataclass
class LerobotPolicyConfig:
    """``policy=lerobot``."""

    name: str = "lerobot"
    type: str = "act"              # any policy type lerobot registers (act, diffusion, ...)
    path: str = ""                 # a local lerobot save_pretrained folder, served as saved ("" builds ``type``)
    config: dict[str, Any] = field(default_factory=dict)  # the lerobot config's fields, e.g. {chunk_size: 10}
    use_cameras: bool = True       # policy.type: the task's cameras are inputs (false: the state alone)

    def __post_init__(self) -> None:
        if not self.type and not self.path:
            raise ValueError("policy=lerobot needs policy.type (act, diffusion, ...) or policy.path (a local folder)")


def lerobot_config(policy_type: str, fields: dict[str, Any]) -> Any:
    """lerobot's config of ``policy_type`` with ``fields``, identity normalisation (robolearn scales both sides),
    built on the CPU (the learner moves it to learner.device), and ``n_action_steps`` = the whole chunk (another
    value is refused): robolearn's executor decides how much of a chunk runs, lerobot's defaults would cut the chunk
    (Diffusion returns 8 of its 16), and the BC learners' windows must be the chunk lerobot's loss takes."""
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.configs.types import FeatureType, NormalizationMode

    try:
        cls = PreTrainedConfig.get_choice_class(policy_type)
    except KeyError:
        raise ValueError(f"policy.type: {policy_type!r} is not a lerobot policy type; lerobot has "
                         f"{sorted(PreTrainedConfig.get_known_choices())}") from None
    names = {f.name for f in dataclasses.fields(cls)}
    values = {"normalization_mapping": {t.value: NormalizationMode.IDENTITY for t in FeatureType}, "device": "cpu",
              # camera backbones from scratch: ACT's default (ImageNet ResNet-18) is a download at build time
              **({"pretrained_backbone_weights": None} if "pretrained_backbone_weights" in names else {}),
              **fields}
    length = next((k for k in ("chunk_size", "horizon") if k in names), None)
    if length and "n_action_steps" in names:
        whole = fields.get(length, getattr(cls, length))
        if fields.get("n_action_steps", whole) != whole:  # the BC windows are the chunk lerobot trains on
            raise ValueError(f"policy.config for lerobot {policy_type!r}: n_action_steps must be the whole chunk, "
                             f"{length} = {whole} (robolearn's executor decides how much of a chunk runs), got "
                             f"{fields['n_action_steps']}")
        values["n_action_steps"] = whole
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # an unknown field, or a value lerobot's own checks refuse: it names it
        raise ValueError(f"policy.config for lerobot {policy_type!r}: {exc}") from None


def chunk_length(policy: nn.Module, obs_spec: ObservationSpec) -> int:
    """H, read off one forward pass on zeros: what ``predict_action_chunk`` returns is the truth for any type
    (ACT's ``chunk_size``, Diffusion's ``n_action_steps``)."""
    zeros = {k: np.zeros((1, *spec.shape), spec.dtype) for k, spec in obs_spec.arrays.items()}
    return int(policy.predict_chunk(zeros, np.zeros((1, 0, 1), np.float32), np.zeros(1, np.int64)).shape[1])


class LerobotChunkPolicy(nn.Module):
    """A lerobot policy built by type for the task's observations: ``predict_chunk`` (B, ...) -> (B, H, A) in
    [-1, 1], ``weighted_loss`` for the BC learners. ``normalise`` and ``obs_dim`` are what the learners' value heads
    share; ``observation_keys`` what its batches must carry (the state, the cameras, the instruction)."""

    def __init__(self, obs_spec: ObservationSpec, action_spec: ActionSpec, config: LerobotPolicyConfig) -> None:
        super().__init__()
        from lerobot.configs.types import FeatureType, PolicyFeature
        from lerobot.policies import get_policy_class, make_pre_post_processors
        from lerobot.processor import DeviceProcessorStep

        self.obs_dim = state_vector_spec(obs_spec).shape[0]
        self.action_dim = action_spec.dim
        self.normalise = ObsNormaliser(obs_spec)
        self.cameras = image_keys(obs_spec) if config.use_cameras else []
        lcfg = lerobot_config(config.type, config.config)
        if getattr(lcfg, "n_obs_steps", 1) != 1:
            raise ValueError(f"policy.config.n_obs_steps must be 1 for lerobot {config.type!r}: a request carries "
                             f"one observation (got {lcfg.n_obs_steps})")
        lcfg.input_features = {OBS_STATE: PolicyFeature(FeatureType.STATE, (self.obs_dim,)),
                               OBS_ENV_STATE: PolicyFeature(FeatureType.ENV, (self.obs_dim,)),
                               **{OBS_IMAGES + k: PolicyFeature(FeatureType.VISUAL, chw(obs_spec.arrays[k]))
                                  for k in self.cameras}}
        lcfg.output_features = {ACTION: PolicyFeature(FeatureType.ACTION, (self.action_dim,))}
        try:
            self.policy = get_policy_class(config.type)(lcfg)
            # with identity normalisation the preprocessor adds what a type derives from the inputs (SmolVLA: the
            # tokenized instruction); it must be lerobot's own steps, as a folder's are. Not its device step: the
            # config's device is the CPU, and the learner moves the policy to learner.device (_on_policy_device)
            pre, _ = make_pre_post_processors(lcfg)
            self.pre = replace(pre, steps=[s for s in pre.steps if not isinstance(s, DeviceProcessorStep)])
        except ImportError as exc:  # a type whose lerobot extra is not installed (robolearn has diffusion, smolvla)
            raise ValueError(f"policy.type={config.type} needs a package that is not installed: {exc}") from None
        except (ValueError, OSError) as exc:  # lerobot's checks of the inputs (Diffusion's crop larger than a
            # camera), or a vlm_model_name that is neither a local folder nor reachable on the hub: it names it
            raise ValueError(f"policy.config for lerobot {config.type!r} on this task: {exc}") from None
        self.policy.to(memory_format=torch.channels_last)  # as a folder's (LerobotFolderPolicy): oneDNN's layout
        self.policy.eval()
        self.text_key = instruction_key(self.pre, obs_spec, f"the lerobot {config.type} policy")
        self.observation_keys = ("state", *self.cameras, *([self.text_key] if self.text_key else []))
        self._dtypes = {k: torch.float32 if k == "state" else getattr(torch, obs_spec.arrays[k].dtype)
                        for k in self.observation_keys}
        # lerobot's datasets give an observation time axis to the types that ask for observation deltas
        # (Diffusion: (B, n_obs_steps, S)); ACT takes (B, S)
        self._obs_steps_axis = lcfg.observation_delta_indices is not None
        self.horizon = chunk_length(self, obs_spec)

    def _inputs(self, obs: torch.Tensor | dict[str, torch.Tensor]) -> dict[str, Any]:
        """Raw observations (the state (B, S) alone, or the dict of ``observation_keys``) -> lerobot's batch: the
        normalised state under both of its keys, each camera as float (B, 3, H, W) in [0, 1], the instruction as
        the task strings."""
        obs = obs if isinstance(obs, dict) else {"state": obs}
        x = self.normalise(obs["state"])
        batch: dict[str, Any] = {OBS_STATE: x, OBS_ENV_STATE: x}
        batch.update({OBS_IMAGES + k: lerobot_image(obs[k]) for k in self.cameras})
        if self._obs_steps_axis:
            batch = {k: v.unsqueeze(1) for k, v in batch.items()}
        if self.text_key:
            batch["task"] = [decode_text(r) for r in obs[self.text_key].cpu().numpy()]
        return batch

    def _on_policy_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        """lerobot's preprocessed batch with its tensors where the policy is (the tokens are made on the CPU)."""
        device = self.normalise.centre.device
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.pre(batch).items()}

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:
        device = self.normalise.centre.device
        obs = {k: torch.as_tensor(observations[k], dtype=self._dtypes[k]).to(device) for k in self.observation_keys}
        with torch.inference_mode():
            chunk = self.policy.predict_action_chunk(self._on_policy_device(self._inputs(obs)))  # (B, H, A)
        return chunk.clamp(-1.0, 1.0).cpu().numpy().astype(np.float32)

    def weighted_loss(self, obs: torch.Tensor | dict[str, torch.Tensor], actions: torch.Tensor,
                      valid: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """lerobot's loss on the batch redrawn by ``weights`` (B,) >= 0: obs the raw state (B, S) or the dict of
        ``observation_keys``, actions (B, H, A) in [-1, 1], valid (B, H) 1 for real steps. All weights 0: a zero
        loss (nothing to imitate). In the mode the learner set (HABC and Hi-ORS train the actor in train mode: ACT's
        VAE encoder and its KL term run)."""
        if not bool((weights > 0).any()):
            return torch.zeros((), device=actions.device, requires_grad=True)
        idx = torch.multinomial(weights, weights.shape[0], replacement=True)
        drawn = {k: v[idx] for k, v in obs.items()} if isinstance(obs, dict) else obs[idx]
        batch = {**self._inputs(drawn), ACTION: actions[idx], "action_is_pad": valid[idx] < 0.5}
        loss, _ = self.policy.forward(self._on_policy_device(batch))
        return loss


def chw(spec: ArraySpec) -> tuple[int, int, int]:
    """A camera's (H, W, 3) as lerobot's image feature shape (3, H, W)."""
    h, w, c = spec.shape
    return (c, h, w)


def lerobot_image(frames: torch.Tensor) -> torch.Tensor:
    """uint8 (B, H, W, 3) -> float (B, 3, H, W) in [0, 1], channels-last in memory (oneDNN's layout)."""
    return frames.permute(0, 3, 1, 2).float().contiguous(memory_format=torch.channels_last) / 255.0


def tokenizes_task(pre: Any) -> bool:
    """Whether lerobot's preprocessor ``pre`` tokenizes the frame's task string: a language-conditioned policy
    (SmolVLA, pi0, ...)."""
    from lerobot.processor import TokenizerProcessorStep

    return any(isinstance(step, TokenizerProcessorStep) for step in pre.steps)


def instruction_key(pre: Any, obs_spec: ObservationSpec, what: str) -> str | None:
    """The task's text observation when lerobot's preprocessor ``pre`` tokenizes the task, else None; a policy
    that reads an instruction on a task without one is refused by name."""
    if not tokenizes_task(pre):
        return None
    texts = [k for k, spec in obs_spec.arrays.items() if is_text(spec)]
    if not texts:
        raise ValueError(f"{what} reads an instruction (its processor tokenizes the task); the task has no text "
                         f"observation, it provides {sorted(obs_spec.arrays)} (pick_cube_color: task.language=true)")
    return texts[0]


class LerobotFolderPolicy(nn.Module):
    """A lerobot ``save_pretrained`` folder served as saved (its processors scale inputs and outputs)."""

    def __init__(self, path: str, action_spec: ActionSpec, state_bounds: float = 1e6) -> None:
        super().__init__()
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies import get_policy_class, make_pre_post_processors

        self.path = path
        cfg = PreTrainedConfig.from_pretrained(path)
        self.policy = get_policy_class(cfg.type).from_pretrained(path)
        # channels-last is oneDNN's preferred layout for convolutions on CPU: the same ACT with a resnet18
        # backbone runs its forward pass in ~17 ms instead of ~29 ms on this 2-core machine
        self.policy.to(memory_format=torch.channels_last)
        self.policy.eval()
        self.pre, self.post = make_pre_post_processors(self.policy.config, pretrained_path=path)
        self.action_spec = action_spec
        # a language-conditioned policy (SmolVLA, pi0, ...): its preprocessor tokenizes the frame's task string, which
        # comes from the task's text observation (found by check_task)
        self.needs_instruction = tokenizes_task(self.pre)
        self.text_key: str | None = None
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
        self.horizon = chunk_length(self, self.observation_spec)

    def check_task(self, obs_spec: ObservationSpec) -> None:
        """Raise naming what the folder's policy needs that the task does not provide (or provides otherwise)."""
        self.text_key = instruction_key(self.pre, obs_spec, f"the lerobot {self.policy.config.type} policy in "
                                                            f"{self.path}")
        for key, spec in self.observation_spec.arrays.items():
            if key not in obs_spec.arrays:
                raise ValueError(f"the lerobot {self.policy.config.type} policy in {self.path} needs observation "
                                 f"{key!r}; the task provides {sorted(obs_spec.arrays)}")
            if tuple(obs_spec.arrays[key].shape) != tuple(spec.shape):
                raise ValueError(f"the lerobot {self.policy.config.type} policy in {self.path} needs observation "
                                 f"{key!r} of shape {tuple(spec.shape)}, the task's is "
                                 f"{tuple(obs_spec.arrays[key].shape)}")

    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:
        batch = {}
        for key in self.observation_spec.arrays:
            t = torch.as_tensor(observations[key])
            if key == "state":
                batch[OBS_STATE] = t.float()
            else:
                batch[OBS_IMAGES + key] = lerobot_image(t)
        if self.needs_instruction:  # lerobot's task strings ("" before check_task: the build's trial on zeros)
            rows = len(next(iter(observations.values())))
            batch["task"] = ([decode_text(r) for r in observations[self.text_key]] if self.text_key
                             else [""] * rows)
        with torch.inference_mode():
            chunk = self.policy.predict_action_chunk(self.pre(batch))  # (B, H, A), normalised by lerobot
            # one postprocessor call for the whole chunk: its unnormalisation broadcasts over (B, H, A)
            actions = self.post(chunk)
        return self.action_spec.to_normalised(actions.cpu().numpy()).astype(np.float32)


def make_lerobot_policy(obs_spec: ObservationSpec, action_spec: ActionSpec,
                        config: LerobotPolicyConfig) -> LerobotChunkPolicy | LerobotFolderPolicy:
    if config.path:
        policy = LerobotFolderPolicy(config.path, action_spec)
        policy.check_task(obs_spec)
        return policy
    return LerobotChunkPolicy(obs_spec, action_spec, config)
