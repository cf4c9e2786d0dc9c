"""The instruction encoder: spaCy's own hash of a word, the vectors read offline from the installed wheel, unknown
words masked, and a file that is not the one chosen refused."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from robolearn.policies.text_encoder import WordVectors, murmurhash64a, vocab_dir, word_vectors, words


def test_the_hash_is_spacys():
    # spaCy's documentation: nlp.vocab.strings["coffee"] == 3197928453018144401 (a 6-byte tail); and a word longer
    # than one 8-byte block and one of exactly 8 bytes, read back from the wheel's own table
    assert murmurhash64a(b"coffee") == 3197928453018144401
    table = word_vectors()
    assert table.row("strawberry") is not None and table.row("elephant") is not None


def test_instructions_encode_offline_into_word_vectors_and_unknown_words_are_masked(offline):
    word_vectors.cache_clear()
    table = word_vectors()
    assert words("Pick up the RED cube!") == ["pick", "up", "the", "red", "cube"]
    vecs, mask = table.encode(["Pick up the RED cube!", "grab the crimson xqzzvk block"], max_words=6)
    assert vecs.shape == (2, 6, 300) and vecs.dtype == np.float32
    assert mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 1, 0]]  # padding, and the made-up word
    assert not vecs[1, 3].any() and not vecs[0, 5].any()

    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    red, crimson, cube, block = vecs[0, 3], vecs[1, 2], vecs[0, 4], vecs[1, 4]
    assert cos(red, crimson) > 0.7 and cos(cube, block) > 0.3 > cos(red, block)  # meaning, not spelling
    truncated, short = table.encode(["pick up the red cube"], max_words=2)
    assert short.tolist() == [[1, 1]] and np.array_equal(truncated[0], vecs[0, :2])


def test_a_vectors_file_that_is_not_the_chosen_one_is_refused(tmp_path):
    copy = tmp_path / "vocab"
    shutil.copytree(vocab_dir(), copy)
    data = bytearray((copy / "vectors").read_bytes())
    data[-1] ^= 1
    (copy / "vectors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="not the file robolearn's text encoder was built on"):
        WordVectors(copy)
