"""A learned success classifier, ``P(success | camera images [, state])``: the reward of ``task.reward=classifier``.

    logit = head([encoder(cameras) ; clip((state - mean) / std, +-5)])  head: Linear-ReLU-Linear-ReLU-Linear
    p     = sigmoid(logit);  the observation shows success  iff  p >= threshold

``encoder="flat"``: the policies' camera CNN (``policies/encoders.py``: convolutions, flattened, projected to
``feature_dim``). ``encoder="keypoints"``: three convolutions (the first at stride 2), then a spatial softmax per
channel (Levine et al. 2016): each of K channels gives the expected image position of what it responds to,

    (x_k, y_k) = sum_ij softmax_ij(f_k / T) * (u_j, v_i),        u, v in [-1, 1]

so where the gripper is relative to the target is two coordinates, not something a projection must untangle. Both
are trained here from scratch. The state part is optional (``state_dim`` 0: images only): the elements of the
observation's ``state`` named ``state_names`` (e.g. the joint positions and the tip's forward kinematics, what a
real arm knows from its encoders; never a simulator's privileged target), looked up by name in the task's state, so
a classifier trained on one task's recordings reads the same quantities in another's. Their standardisation is
fitted on the training frames and stored with the weights.

On disk a classifier is a folder: ``model.safetensors`` (tensors only) and ``classifier.json`` (what to build,
the threshold, and the training report). ``load_classifier`` reads those two and nothing else: no pickle,
no ``torch.load``, so a classifier from anywhere cannot run code here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from robolearn.policies.encoders import CameraEncoder, ImageEncoder, KeypointEncoder
from robolearn.specs import ArraySpec, ObservationSpec

WEIGHTS, CONFIG = "model.safetensors", "classifier.json"
ENCODERS = ("flat", "keypoints")


STATE_CLIP = 5.0  # standard deviations of the training frames


@dataclass(frozen=True)
class ClassifierSpec:
    """What a classifier is built from: its inputs and sizes, and the decision threshold."""

    cameras: tuple[str, ...]
    image_shape: tuple[int, int, int]        # (H, W, 3), every camera
    state_dim: int = 0                       # 0: images only; else len(state_names) when the dataset named them
    feature_dim: int = 32                    # per camera
    hidden: int = 128
    threshold: float = 0.5
    state_names: tuple[str, ...] = field(default_factory=tuple)
    encoder: str = "flat"                    # flat | keypoints (see the module docstring)

    def __post_init__(self) -> None:
        if not self.cameras:
            raise ValueError("a success classifier needs at least one camera")
        if self.state_names and len(self.state_names) != self.state_dim:
            raise ValueError(f"the classifier's state_names {list(self.state_names)} are not its {self.state_dim} "
                             "state values")
        if self.encoder not in ENCODERS:
            raise ValueError(f"the classifier encoder must be one of {ENCODERS}, got {self.encoder!r}")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"the classifier threshold must be in (0, 1), got {self.threshold}")


class SuccessClassifier(nn.Module):
    def __init__(self, spec: ClassifierSpec) -> None:
        super().__init__()
        self.spec = spec
        images = ObservationSpec({c: ArraySpec(tuple(spec.image_shape), dtype="uint8") for c in spec.cameras})
        self.encoder = ImageEncoder(images, spec.feature_dim,
                                    KeypointEncoder if spec.encoder == "keypoints" else CameraEncoder)
        self.register_buffer("state_mean", torch.zeros(spec.state_dim))
        self.register_buffer("state_std", torch.ones(spec.state_dim))
        self.head = nn.Sequential(nn.Linear(self.encoder.out_dim + spec.state_dim, spec.hidden), nn.ReLU(),
                                  nn.Linear(spec.hidden, spec.hidden), nn.ReLU(), nn.Linear(spec.hidden, 1))
        # where its state values sit in the task's state vector (check_observation finds them by name); None:
        # the task's state is exactly the classifier's
        self.state_index: np.ndarray | None = None

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Images uint8 (B, H, W, 3) per camera [and ``state`` (B, state_dim): the classifier's own elements, in
        ``state_names`` order] -> logits (B,)."""
        features = [self.encoder(obs)]
        if self.spec.state_dim:
            # clipped: a value far outside the training frames' spread (a joint the labelled episodes barely moved)
            # counts as a few standard deviations, not hundreds
            z = (obs["state"].float() - self.state_mean) / self.state_std
            features.append(z.clamp(-STATE_CLIP, STATE_CLIP))
        return self.head(torch.cat(features, dim=-1)).squeeze(-1)

    @torch.no_grad()
    def probability(self, obs: dict[str, np.ndarray]) -> float:
        """P(success) of one observation (the task's arrays)."""
        batch = {c: torch.from_numpy(np.ascontiguousarray(obs[c]))[None] for c in self.spec.cameras}
        if self.spec.state_dim:
            state = np.asarray(obs["state"], np.float32)
            batch["state"] = torch.from_numpy(state if self.state_index is None else state[self.state_index])[None]
        return float(torch.sigmoid(self(batch))[0])

    def check_observation(self, obs_spec: ObservationSpec) -> None:
        """ValueError naming what an observation with ``obs_spec`` lacks for this classifier; finds where its state
        values are in that observation's state (by name; the first of a repeated name)."""
        for cam in self.spec.cameras:
            have = obs_spec.arrays.get(cam)
            if have is None:
                raise ValueError(f"the success classifier needs camera '{cam}', which the task's observation lacks "
                                 f"(it has {sorted(obs_spec.arrays)}); add it to task.cameras")
            if tuple(have.shape) != tuple(self.spec.image_shape):
                raise ValueError(f"the success classifier was trained on {cam} images of shape "
                                 f"{tuple(self.spec.image_shape)}, the task gives {tuple(have.shape)} "
                                 "(task.camera_size)")
        self.state_index = None
        if not self.spec.state_dim:
            return
        state = obs_spec.arrays["state"]
        if self.spec.state_names and state.names:
            missing = [n for n in self.spec.state_names if n not in state.names]
            if missing:
                raise ValueError(f"the success classifier takes state values {missing}, which the task's state lacks "
                                 f"(it has {list(state.names)})")
            self.state_index = np.array([state.names.index(n) for n in self.spec.state_names])
        elif state.shape != (self.spec.state_dim,):
            raise ValueError(f"the success classifier takes a state of {self.spec.state_dim} values, the task's has "
                             f"{state.shape[0]}")


def save_classifier(model: SuccessClassifier, folder: Path, report: dict[str, Any]) -> None:
    """Write ``folder`` (created; an existing classifier there is refused, never overwritten)."""
    folder = Path(folder)
    if (folder / CONFIG).exists():
        raise FileExistsError(f"{folder} already holds a classifier; choose a new folder")
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / WEIGHTS))
    spec = asdict(model.spec)
    (folder / CONFIG).write_text(json.dumps({"spec": spec, "report": report}, indent=2))


def load_classifier(folder: Path) -> SuccessClassifier:
    folder = Path(folder)
    config = folder / CONFIG
    if not config.exists():
        raise FileNotFoundError(f"{folder} is not a success classifier (no {CONFIG}); train one with "
                                "robolearn reward train DATASET --out FOLDER")
    raw = json.loads(config.read_text())["spec"]
    spec = ClassifierSpec(**{**raw, "cameras": tuple(raw["cameras"]), "image_shape": tuple(raw["image_shape"]),
                             "state_names": tuple(raw.get("state_names", ()))})
    model = SuccessClassifier(spec)
    model.load_state_dict(load_file(str(folder / WEIGHTS)))
    model.eval()
    return model


def read_report(folder: Path) -> dict[str, Any]:
    return json.loads((Path(folder) / CONFIG).read_text())["report"]
