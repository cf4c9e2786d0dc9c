"""Camera frames in the buffer: which observation fields are images, and their lz4 form in a stored record.

Contract: an image is a uint8 array of rank 3 (H, W, C). In a stored record every image field ``name``
(``obs.<key>`` for the steps, ``final_obs.<key>`` for an episode's last observation) is replaced by
``z.<name>``, the lz4 blocks of its frames concatenated, and ``zlen.<name>``, their lengths; every other
field is kept as it came. A block carries no size header: the spec's shape gives the size back.
"""

from __future__ import annotations

from collections.abc import Sequence

import lz4.block
import numpy as np

from robolearn.specs import ArraySpec, ObservationSpec
from robolearn.transition import FINAL_OBS_PREFIX, OBS_PREFIX

Z_PREFIX = "z."        # lz4 blobs of an image field, concatenated
ZLEN_PREFIX = "zlen."  # their lengths


def is_image(spec: ArraySpec) -> bool:
    return spec.dtype == "uint8" and len(spec.shape) == 3


def image_shapes(obs_spec: ObservationSpec) -> dict[str, tuple[int, ...]]:
    """The image observation keys, in spec order, with their frame shape."""
    return {k: spec.shape for k, spec in obs_spec.arrays.items() if is_image(spec)}


def compress_images(arrays: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """A batch as it is stored: image fields lz4-compressed frame by frame, the rest unchanged, in order."""
    out = {}
    for name, arr in arrays.items():
        key = name.removeprefix(OBS_PREFIX).removeprefix(FINAL_OBS_PREFIX)
        if key in shapes and (name.startswith(OBS_PREFIX) or name.startswith(FINAL_OBS_PREFIX)):
            imgs = arr.reshape(-1, *shapes[key])
            blobs = [lz4.block.compress(np.ascontiguousarray(im), store_size=False) for im in imgs]
            out[f"{Z_PREFIX}{name}"] = np.frombuffer(b"".join(blobs), np.uint8)
            out[f"{ZLEN_PREFIX}{name}"] = np.array([len(b) for b in blobs], np.int64)
        else:
            out[name] = arr
    return out


def decompress_images(blobs: Sequence[bytes], shape: tuple[int, ...]) -> np.ndarray:
    """Frames of ``shape`` from their lz4 blocks, stacked (N, *shape)."""
    size = int(np.prod(shape))
    out = np.empty((len(blobs), *shape), np.uint8)
    for i, blob in enumerate(blobs):
        out[i] = np.frombuffer(lz4.block.decompress(blob, uncompressed_size=size), np.uint8).reshape(shape)
    return out
