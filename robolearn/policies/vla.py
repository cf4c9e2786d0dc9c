"""A small vision-language-action policy (``policy=vla``): an instruction, camera images and the robot's state in,
a chunk of actions out, by the flow-matching chunk machinery of ``flow_chunk`` (docs/algorithms.md, "VLA").

    words  w_1..w_W = frozen vectors of the instruction's words (W, D)   policies.text_encoder (D = 300), or its
                                                                          word pieces in context, language_model (384)
    text   t = tanh(LN(W_o [attn_1; ..; attn_h])),  attn_j = sum_i softmax_i(q_j . P w_i / sqrt(T)) P w_i   (B, T)
           (colour_words: a colour word's P w_i is P_c [its CIELAB colour; a flag] instead, policies.colour_words)
    vision v = [CNN_front(img_front); CNN_wrist(img_wrist)]              policies.encoders, (B, C * V): CameraEncoder,
                                                                          or KeypointEncoder's image positions,
                                                                          FiLMKeypointEncoder's: CNN_c(img, t)
    trunk  e = Fuse([t; v; normalised state])                             (B, E)
    chunk  the flow of FlowChunkPolicy conditioned on e (one-stage); two-stage: the trunk on the first
           observation (e, the committed actions, k / D), the light head on the mid observation's state alone

The word vectors are frozen (a table lookup, or a language model that never trains); the projection P, the h learned
queries q_j and everything after them are trained from scratch, cameras included. Attention pooling with learned
queries lets the policy pick out the words that matter ("red" in "pick up the red cube") by what their vectors are
like, so a paraphrase whose colour word is a neighbour in the vector space ("crimson", "scarlet") lands near it; a
mean over the words would dilute that word by the rest of the sentence.

In training (``self.training``) every camera frame is shifted by up to ``image_shift_pad`` pixels (DrQ's random
shift, drawn from torch's generator so a checkpoint restores it), which image BC needs to generalise from a few
hundred demos; ``camera_shift_pads`` sets it per camera (docs/algorithms.md, "VLA").

The observation is a dict: ``state`` (B, S) float, each camera uint8 (B, H, W, 3), ``instruction`` uint8 (B, N)
(UTF-8 bytes, ``robolearn.specs.encode_text``). Which keys: ``observation_keys``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from robolearn.policies.colour_words import FEATURES as COLOUR_FEATURES
from robolearn.policies.colour_words import SCALE as COLOUR_SCALE
from robolearn.policies.colour_words import colour_features, colour_table
from robolearn.policies.encoders import (
    DRQ_STRIDES,
    CameraEncoder,
    FiLMKeypointEncoder,
    ImageEncoder,
    KeypointEncoder,
    image_keys,
    random_shift,
)
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
from robolearn.policies.language_model import MAX_PIECES, minilm
from robolearn.policies.mlp import mlp
from robolearn.policies.text_encoder import word_vectors
from robolearn.specs import ActionSpec, ObservationSpec, decode_text, is_text

Observation = dict[str, torch.Tensor]


def keypoints(height: int, width: int, features: int) -> KeypointEncoder:
    return KeypointEncoder(height, width, keypoints=features // 2)


def film_keypoints(height: int, width: int, features: int, text_features: int) -> FiLMKeypointEncoder:
    return FiLMKeypointEncoder(height, width, features // 2, condition_dim=text_features)


CAMERA_ENCODERS = {"conv": CameraEncoder, "keypoints": keypoints}   # (height, width, features)
CONDITIONED = {"film_keypoints": film_keypoints}                    # the same and the instruction's width T
PAIRED_FEATURES = {"keypoints", "film_keypoints"}                   # an x and a y per keypoint: even camera_features
TEXT_ENCODERS = {"word_vectors": word_vectors, "minilm": minilm}     # loaders of frozen (width, encode(texts, W))


@dataclass
class VLAPolicyConfig(FlowChunkPolicyConfig):
    """``policy=vla``: the flow chunk policy's fields (horizon, prefix, flow steps, two-stage) plus its encoders."""

    name: str = "vla"
    instruction_key: str = "instruction"
    text_encoder: str = "word_vectors"  # word_vectors: spaCy's static 300-d vectors (policies.text_encoder);
                                        # minilm: all-MiniLM-L6-v2's word pieces in context (policies.language_model)
    max_words: int = 16             # words (word_vectors) or word pieces with [CLS] and [SEP] (minilm) read
    text_features: int = 64         # T: the projected word width and the sentence's features
    text_heads: int = 4             # h: learned queries pooling the words
    colour_words: bool = False      # word_vectors: a colour word read by its CIELAB colour (XKCD colour survey,
                                    # policies.colour_words) instead of its vector
    colour_jitter: float = 10.0     # colour_words: training-time N(0, s^2) on each colour word's L, a, b (CIELAB)
    word_swap: float = 0.0          # colour_words: training-time chance that a known word naming no colour is read
                                    # as a word drawn from the whole table (0: never)
    camera_encoder: str = "conv"     # conv: CNN, flattened, projected to camera_features; keypoints: a spatial softmax
                                     # per channel, camera_features / 2 image positions per camera; film_keypoints:
                                     # keypoints whose features are modulated by the instruction (FiLM)
    camera_features: int = 64       # V: per camera
    camera_strides: list[int] = field(default_factory=lambda: list(DRQ_STRIDES))  # conv: its 3x3 convs' strides
    fuse_dims: list[int] = field(default_factory=lambda: [256])  # the trunk's fusing MLP; its last size is E
    image_shift_pad: int = 4        # training-time random shift of each frame, pixels (0: none)
    camera_shift_pads: dict[str, int] = field(default_factory=dict)  # camera -> its own shift (others: the above)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("max_words", "text_features", "text_heads", "camera_features"):
            if getattr(self, key) < 1:
                raise ValueError(f"policy.{key} must be >= 1, got {getattr(self, key)}")
        if not self.fuse_dims or any(h < 1 for h in self.fuse_dims):
            raise ValueError(f"policy.fuse_dims must be positive sizes, got {self.fuse_dims}")
        if self.text_encoder not in TEXT_ENCODERS:
            raise ValueError(f"policy.text_encoder must be one of {sorted(TEXT_ENCODERS)}, got {self.text_encoder!r}")
        if self.text_encoder == "minilm" and not 3 <= self.max_words <= MAX_PIECES:
            raise ValueError(f"policy.max_words counts word pieces with [CLS] and [SEP] for text_encoder=minilm: "
                             f"3..{MAX_PIECES}, got {self.max_words}")
        if self.colour_words and self.text_encoder != "word_vectors":
            raise ValueError(f"policy.colour_words reads whole words: text_encoder=word_vectors only, got "
                             f"{self.text_encoder!r}")
        if self.colour_jitter < 0:
            raise ValueError(f"policy.colour_jitter must be >= 0, got {self.colour_jitter}")
        if not 0 <= self.word_swap < 1:
            raise ValueError(f"policy.word_swap is a probability in [0, 1), got {self.word_swap}")
        if self.word_swap and not self.colour_words:  # which words name a colour is what colour_words reads
            raise ValueError("policy.word_swap leaves the colour words as said, and knows them by colour_words: set "
                             "colour_words=true (text_encoder=word_vectors)")
        if self.camera_encoder not in CAMERA_ENCODERS | CONDITIONED:
            raise ValueError(f"policy.camera_encoder must be one of {sorted(CAMERA_ENCODERS | CONDITIONED)}, got "
                             f"{self.camera_encoder!r}")
        if not self.camera_strides or any(stride < 1 for stride in self.camera_strides):
            raise ValueError(f"policy.camera_strides must be one or more positive integers, got {self.camera_strides}")
        if self.camera_encoder != "conv" and tuple(self.camera_strides) != DRQ_STRIDES:
            raise ValueError(f"policy.camera_strides sets the conv cameras only; camera_encoder={self.camera_encoder} "
                             f"has its own (got camera_strides={self.camera_strides})")
        if self.camera_encoder in PAIRED_FEATURES and self.camera_features % 2:
            raise ValueError(f"policy.camera_features must be even with keypoints (x and y each), got "
                             f"{self.camera_features}")
        if self.image_shift_pad < 0:
            raise ValueError(f"policy.image_shift_pad must be >= 0, got {self.image_shift_pad}")
        negative = {k: v for k, v in self.camera_shift_pads.items() if v < 0}
        if negative:
            raise ValueError(f"policy.camera_shift_pads must be >= 0, got {negative}")


class InstructionEncoder(nn.Module):
    """uint8 (B, N) UTF-8 sentences -> (B, T): frozen word vectors (``backbone``, a TEXT_ENCODERS name), projection,
    attention pooling by h learned queries, then Linear -> LayerNorm -> tanh. With word vectors a sentence with no
    known word gives the features of zero pooling; the language model always has its [CLS] and [SEP] pieces.

    ``colour_words`` (word vectors only): a word that names a colour is read by its colour instead of its vector,
    key = P_c SCALE [L - 50; a; b; 50] (``policies.colour_words``), and in training each colour word's L, a and b get
    N(0, ``colour_jitter``^2) (CIELAB units), so that a colour word the demos never said lands among the trained ones by
    how it looks.

    ``word_swap`` (with ``colour_words``): in training each known word that names no colour is, with that chance,
    read as a word drawn uniformly from the table's rows instead. A few templates say the same few verbs and nouns;
    the words a person says instead ("fetch", "brick") were never heard, and swapping teaches the pooling that such
    words carry nothing it needs, so the colour word decides."""

    def __init__(self, max_words: int, features: int, heads: int, backbone: str = "word_vectors",
                 colour_words: bool = False, colour_jitter: float = 0.0, word_swap: float = 0.0) -> None:
        super().__init__()
        self.max_words = max_words
        self._table = TEXT_ENCODERS[backbone]()  # loads (and checks) the weights now, not at the first request
        self.project = nn.Linear(self._table.width, features)
        if word_swap and not colour_words:
            raise ValueError("word_swap knows the colour words it leaves as said by colour_words: set colour_words")
        self.colour_words, self.colour_jitter, self.word_swap = colour_words, colour_jitter, word_swap
        self._swap_rows: torch.Tensor | None = None  # word_swap: the table's vectors on the projection's device
        if colour_words:
            colour_table()  # loaded now, not at the first request
            self.project_colour = nn.Linear(COLOUR_FEATURES, features)
        self.queries = nn.Parameter(torch.randn(heads, features) / math.sqrt(features))
        self.out = nn.Sequential(nn.Linear(heads * features, features), nn.LayerNorm(features), nn.Tanh())
        self.out_dim = features
        self._cache: dict[bytes, tuple[np.ndarray, ...]] = {}  # sentence bytes -> vectors, mask (, colours)
        self.cache_size = 4096                                  # sentences kept

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, ...]:
        vectors, mask = self._table.encode(texts, self.max_words)
        return (vectors, mask, colour_features(texts, self.max_words)) if self.colour_words else (vectors, mask)

    def lookup(self, text: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """uint8 (B, N) -> word vectors (B, W, D) and their mask (B, W) (0: padding, or a word the table does not
        hold), with ``colour_words`` also each word's colour features (B, W, 4), on the projection's device. Each
        sentence is encoded once (new ones of a batch together), then cached."""
        rows = text.cpu().numpy()
        keys = [row.tobytes() for row in rows]
        device = self.project.weight.device
        if not keys:  # zero-length arrays of each part, without running the encoder
            shapes = [(self.max_words, self._table.width), (self.max_words,)]
            shapes += [(self.max_words, COLOUR_FEATURES)] if self.colour_words else []
            return tuple(torch.zeros((0, *shape), device=device) for shape in shapes)
        new = {k: row for k, row in zip(keys, rows, strict=True) if k not in self._cache}  # each sentence once
        if new:
            if len(self._cache) + len(new) > self.cache_size:  # instructions repeat; a stream of new ones must not
                self._cache.clear()                            # grow it forever: start again with this batch's
                new = dict(zip(keys, rows, strict=True))
            parts = self._encode([decode_text(row) for row in new.values()])
            self._cache.update({k: tuple(part[i] for part in parts) for i, k in enumerate(new)})
        parts = [np.stack([self._cache[k][j] for k in keys]) for j in range(len(self._cache[keys[0]]))]
        return tuple(torch.from_numpy(part).to(device) for part in parts)

    def swapped(self, vectors: torch.Tensor, swappable: torch.Tensor) -> torch.Tensor:
        """Word vectors (B, W, D) with each word where ``swappable`` (B, W, 1) is 1 replaced, with chance
        ``word_swap``, by a row of the table drawn uniformly."""
        if self._swap_rows is None or self._swap_rows.device != vectors.device:
            self._swap_rows = torch.from_numpy(self._table.vectors).to(vectors.device)
        swap = (torch.rand_like(swappable) < self.word_swap).to(vectors.dtype) * swappable
        drawn = self._swap_rows[torch.randint(len(self._swap_rows), vectors.shape[:2], device=vectors.device)]
        return vectors * (1 - swap) + drawn * swap

    def keys(self, text: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The projected words (B, W, T) and their mask (B, W)."""
        vectors, mask, *colours = self.lookup(text)
        if not self.colour_words:
            return self.project(vectors), mask
        lab = colours[0]
        named = (lab[..., -1:] > 0).to(lab.dtype)                             # (B, W, 1): names a colour
        if self.training and self.word_swap:
            vectors = self.swapped(vectors, mask.unsqueeze(-1) * (1 - named))
        if self.training and self.colour_jitter:
            noise = torch.randn_like(lab) * (self.colour_jitter * COLOUR_SCALE)  # features are CIELAB * SCALE
            lab = lab + noise * named * lab.new_tensor([1.0, 1.0, 1.0, 0.0])
        # a colour word by its colour alone (P_c's bias reaches every word, like P's)
        keys = self.project(vectors * (1 - named)) + self.project_colour(lab)
        return keys, torch.maximum(mask, named.squeeze(-1))

    def forward(self, text: torch.Tensor) -> torch.Tensor:
        keys, mask = self.keys(text)                                          # (B, W, T), (B, W)
        scores = torch.einsum("bwt,ht->bhw", keys, self.queries) / math.sqrt(keys.shape[-1])
        scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        attn = torch.softmax(scores, dim=-1) * mask.amax(-1).view(-1, 1, 1)   # all-unknown sentence: zero pooling
        pooled = torch.einsum("bhw,bwt->bht", attn, keys).flatten(1)          # (B, h * T)
        return self.out(pooled)


class VLAPolicy(FlowChunkPolicy):
    """Everything the flow chunk policy does (BC loss, prefix-conditioned sampling, two-stage serving, DSRL's
    ``chunk_from_noise``) on observations of an instruction, cameras and the state."""

    config: VLAPolicyConfig

    def _build_encoder(self, obs_spec: ObservationSpec) -> int:
        c = self.config
        spec = obs_spec.arrays.get(c.instruction_key)
        if spec is None or not is_text(spec):
            found = [k for k, s in obs_spec.arrays.items() if is_text(s)]
            raise ValueError(f"policy=vla reads the instruction from the text observation {c.instruction_key!r}; "
                             f"the task's text observations are {found or 'none'} (pick_cube_color: "
                             "task.language=true)")
        if not image_keys(obs_spec):
            raise ValueError(f"policy=vla needs at least one camera; the task's observations are "
                             f"{sorted(obs_spec.arrays)} (task.cameras=[front,wrist])")
        self.text = InstructionEncoder(c.max_words, c.text_features, c.text_heads, c.text_encoder, c.colour_words,
                                       c.colour_jitter, c.word_swap)
        if c.camera_encoder in CONDITIONED:
            camera = functools.partial(CONDITIONED[c.camera_encoder], text_features=self.text.out_dim)
        elif c.camera_encoder == "conv":
            camera = functools.partial(CameraEncoder, strides=tuple(c.camera_strides))
        else:
            camera = CAMERA_ENCODERS[c.camera_encoder]
        self.vision = ImageEncoder(obs_spec, c.camera_features, camera=camera)
        self.fuse = nn.Sequential(mlp([self.text.out_dim + self.vision.out_dim + self.obs_dim, *c.fuse_dims]),
                                  nn.LayerNorm(c.fuse_dims[-1]), nn.ReLU())
        self.observation_keys = ("state", c.instruction_key, *self.vision.keys)
        unknown = set(c.camera_shift_pads) - set(self.vision.keys)
        if unknown:
            raise ValueError(f"policy.camera_shift_pads names cameras the task does not have: {sorted(unknown)} "
                             f"(its cameras: {list(self.vision.keys)})")
        self.shift_pads = {k: c.camera_shift_pads.get(k, c.image_shift_pad) for k in self.vision.keys}
        self._shapes = {k: tuple(obs_spec.arrays[k].shape) for k in self.observation_keys}
        return c.fuse_dims[-1]

    def encode(self, obs: Observation) -> torch.Tensor:
        """The trunk's fused features e (B, E) of an observation dict."""
        frames = {k: obs[k] for k in self.vision.keys}
        if self.training:
            frames = {k: random_shift(f, None, self.shift_pads[k]) if self.shift_pads[k] else f
                      for k, f in frames.items()}
        text = self.text(obs[self.config.instruction_key])
        vision = self.vision(frames, text if self.config.camera_encoder in CONDITIONED else None)
        return self.fuse(torch.cat([text, vision, self.normalise(obs["state"])], dim=-1))

    def mid_state(self, obs: Observation | torch.Tensor) -> torch.Tensor:
        return obs["state"] if isinstance(obs, dict) else obs

    def observation_tensors(self, observations: dict[str, np.ndarray]) -> Observation:
        missing = [k for k in self.observation_keys if k not in observations]
        if missing:
            raise ValueError(f"policy=vla needs the observation keys {missing} too; the request has "
                             f"{sorted(observations)}")
        device = self.normalise.centre.device
        return {k: torch.as_tensor(observations[k], dtype=torch.float32 if k == "state" else torch.uint8).to(device)
                for k in self.observation_keys}

    def at_offset(self, past: Observation, offset: torch.Tensor) -> Observation:
        rows = torch.arange(len(offset), device=offset.device)
        return {k: v[rows, offset] for k, v in past.items()}

    def zero_observation(self) -> Observation:
        return {k: torch.zeros(1, *shape, dtype=torch.float32 if k == "state" else torch.uint8)
                for k, shape in self._shapes.items()}

def make_vla_policy(obs_spec: ObservationSpec, action_spec: ActionSpec, config: VLAPolicyConfig) -> VLAPolicy:
    return VLAPolicy(obs_spec, action_spec, config)
