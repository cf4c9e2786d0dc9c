"""Image encoders for policies and critics, and random-shift augmentation (DrQ; docs/algorithms.md, "Image
encoder and random shift").

``ImageEncoder``: per camera a small CNN on uint8 (B, H, W, 3) frames scaled to [0, 1]: convs 3x3, by default four
at strides 2, 1, 1, 1 (DrQ's; 32 channels, ReLU), flatten, Linear -> LayerNorm -> tanh to ``feature_dim``
(``CameraEncoder``; strides 2, 2, 1, 1 cost about a third as much at 64 x 64), or ``KeypointEncoder``: three
convolutions (the first at stride 2), then a spatial softmax per channel (Levine et al. 2016), each of K channels
giving the expected image position of what it responds to,

    (x_k, y_k) = sum_ij softmax_ij(f_k / T) * (u_j, v_i),        u, v in [-1, 1]

so where a thing is in the image is two coordinates, not something a projection must untangle.
``FiLMKeypointEncoder`` modulates the keypoint encoder's features before its last convolution by a condition
(FiLM, Perez et al. 2018: x <- x * (1 + gamma(c)) + beta(c) per channel, gamma and beta zero at initialisation), so
what a keypoint follows can depend on the condition (the VLA's instruction: "the red cube" makes a channel respond
to red).
The features of all cameras are concatenated, (B, n_cameras * feature_dim). In SAC one encoder is shared
by actor and critic: the critic's loss trains it, the actor sees its output with stop-gradient.

``random_shift``: pad every image by ``pad`` pixels (edge replicated) and crop back to the original size
at a random offset per image, (B, H, W, C) uint8 in and out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robolearn.specs import ObservationSpec


def image_keys(obs_spec: ObservationSpec) -> list[str]:
    """The observation keys that are camera frames: uint8 (H, W, 3)."""
    return [k for k, s in obs_spec.arrays.items() if s.dtype == "uint8" and len(s.shape) == 3]


DRQ_STRIDES = (2, 1, 1, 1)  # CameraEncoder's default: DrQ's four 3x3 convolutions


class CameraEncoder(nn.Module):
    def __init__(self, height: int, width: int, feature_dim: int, channels: int = 32,
                 strides: Sequence[int] = DRQ_STRIDES) -> None:
        super().__init__()
        if not strides or any(s < 1 for s in strides):
            raise ValueError(f"CameraEncoder: strides must be one or more positive integers, got {list(strides)}")
        layers: list[nn.Module] = []
        for i, stride in enumerate(strides):
            layers += [nn.Conv2d(3 if i == 0 else channels, channels, 3, stride=stride), nn.ReLU()]
        self.convs = nn.Sequential(*layers)
        h, w = height, width
        for stride in strides:  # each unpadded 3x3 conv needs at least 3 pixels
            if min(h, w) < 3:
                raise ValueError(f"CameraEncoder: a {height} x {width} frame is too small for convolutions at strides "
                                 f"{list(strides)}")
            h, w = (h - 3) // stride + 1, (w - 3) // stride + 1
        n_flat = channels * h * w
        self.project = nn.Sequential(nn.Linear(n_flat, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())
        self.out_dim = feature_dim

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 (B, H, W, 3) -> (B, feature_dim)."""
        x = frames.permute(0, 3, 1, 2).float() / 255.0
        return self.project(self.convs(x).flatten(1))


class KeypointEncoder(nn.Module):
    """uint8 (B, H, W, 3) -> (B, 2 * keypoints): each channel's expected image position (spatial softmax). Built as
    ``ImageEncoder``'s per-camera encoder: (height, width, keypoints); any image size."""

    def __init__(self, height: int = 0, width: int = 0, keypoints: int = 32, channels: int = 32) -> None:  # noqa: ARG002
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(3, channels, 5, stride=2, padding=2), nn.ReLU(),   # half resolution: the softmax's
                                                                          # expectation is finer than its grid
            nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, keypoints, 3, padding=1),
        )
        self.log_temperature = nn.Parameter(torch.zeros(()))
        self.out_dim = 2 * keypoints

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.positions(self.convs(frames.permute(0, 3, 1, 2).float() / 255.0))

    def positions(self, x: torch.Tensor) -> torch.Tensor:
        """Keypoint maps (B, K, H, W) -> their expected image positions (B, 2K): all x, then all y."""
        b, k, h, w = x.shape
        attention = torch.softmax(x.flatten(2) / self.log_temperature.exp(), dim=-1).view(b, k, h, w)
        u = torch.linspace(-1.0, 1.0, w, device=x.device)
        v = torch.linspace(-1.0, 1.0, h, device=x.device)
        return torch.cat([(attention.sum(2) * u).sum(-1), (attention.sum(3) * v).sum(-1)], dim=-1)


class FiLMKeypointEncoder(KeypointEncoder):
    """``KeypointEncoder`` conditioned on c (B, condition_dim): ``forward(frames, c)``; the features entering the last
    convolution are x * (1 + gamma(c)) + beta(c), per channel."""

    def __init__(self, height: int, width: int, keypoints: int, condition_dim: int, channels: int = 32) -> None:
        super().__init__(height, width, keypoints, channels)
        self.film = nn.Linear(condition_dim, 2 * channels)
        nn.init.zeros_(self.film.weight)  # starts as the unconditioned encoder
        nn.init.zeros_(self.film.bias)

    def forward(self, frames: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        x = self.convs[:-1](frames.permute(0, 3, 1, 2).float() / 255.0)       # (B, C, H, W)
        gamma, beta = self.film(condition)[:, :, None, None].chunk(2, dim=1)
        return self.positions(self.convs[-1](x * (1 + gamma) + beta))


class ImageEncoder(nn.Module):
    """One encoder per camera of ``obs_spec``, their features concatenated. ``camera(height, width, feature_dim)``
    builds each (default ``CameraEncoder``); it has an ``out_dim``."""

    def __init__(self, obs_spec: ObservationSpec, feature_dim: int = 50,
                 camera: Callable[[int, int, int], nn.Module] = CameraEncoder) -> None:
        super().__init__()
        self.keys = image_keys(obs_spec)
        if not self.keys:
            raise ValueError("ImageEncoder: the observation has no camera (uint8 H x W x 3) entry")
        self.cameras = nn.ModuleDict({k: camera(*obs_spec.arrays[k].shape[:2], feature_dim) for k in self.keys})
        self.out_dim = sum(encoder.out_dim for encoder in self.cameras.values())

    def forward(self, obs: dict[str, torch.Tensor], condition: torch.Tensor | None = None) -> torch.Tensor:
        """``condition``: handed to every camera's encoder (a conditioned one, e.g. ``FiLMKeypointEncoder``)."""
        extra = () if condition is None else (condition,)
        return torch.cat([self.cameras[k](obs[k], *extra) for k in self.keys], dim=-1)


def random_shift(frames: torch.Tensor, rng: np.random.Generator | None, pad: int = 4) -> torch.Tensor:
    """(B, H, W, C) uint8 -> the same shape, each image shifted by up to ``pad`` pixels (edges replicated).
    Offsets come from ``rng`` (the replay buffer's generator in the learner, so a resumed run repeats them), or
    from torch's global generator when it is None (a policy's own augmentation; checkpoints save that one too)."""
    b, h, w, _ = frames.shape
    device = frames.device
    padded = F.pad(frames.permute(0, 3, 1, 2).float(), (pad, pad, pad, pad), mode="replicate")
    if rng is None:
        dy, dx = torch.randint(0, 2 * pad + 1, (2, b))
    else:
        dy = torch.from_numpy(rng.integers(0, 2 * pad + 1, b))
        dx = torch.from_numpy(rng.integers(0, 2 * pad + 1, b))
    dy, dx = dy.to(device), dx.to(device)
    rows = (dy[:, None] + torch.arange(h, device=device))[:, :, None]       # (B, H, 1)
    cols = (dx[:, None] + torch.arange(w, device=device))[:, None, :]       # (B, 1, W)
    batch = torch.arange(b, device=device)[:, None, None]
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].to(torch.uint8)
