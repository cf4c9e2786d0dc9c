"""The instruction language model (``policy.text_encoder=minilm``): loaded offline from the installed wheel, the same
vectors as the reference loader, word pieces in context, a file that is not the one chosen refused, and loading it
leaves torch's seed where it was."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from robolearn.policies.language_model import WIDTH, MiniLM, minilm, model_dir
from robolearn.policies.vla import VLAPolicyConfig


def sentence(model: MiniLM, text: str) -> np.ndarray:
    """The mean of the pieces' vectors, normalised: how the model was trained to compare sentences."""
    vectors, mask = model.encode([text], 12)
    mean = (vectors[0] * mask[0, :, None]).sum(0) / mask[0].sum()
    return mean / np.linalg.norm(mean)


def test_instructions_encode_offline_into_word_pieces_in_context(offline):
    minilm.cache_clear()
    model = minilm()
    vectors, mask = model.encode(["Pick up the RED cube!", "the red wine"], max_words=9)
    assert vectors.shape == (2, 9, WIDTH) and vectors.dtype == np.float32
    # [CLS] pick up the red cube ! [SEP] / [CLS] the red wine [SEP]; padding masked and zero
    assert mask.tolist() == [[1] * 8 + [0], [1] * 5 + [0] * 4]
    assert not vectors[1, 5:].any()
    red_cube, red_wine = vectors[0, 4], vectors[1, 2]
    assert not np.allclose(red_cube, red_wine)  # the same word, another sentence: another vector
    cut, cut_mask = model.encode(["pick up the red cube"], max_words=4)
    assert cut_mask.tolist() == [[1, 1, 1, 1]]
    np.testing.assert_array_equal(cut, model.encode(["pick up"], max_words=4)[0])  # cut, its [SEP] kept
    # meaning the static word vectors miss (there "crimson" is nearer "blue" than "red")
    crimson = sentence(model, "the crimson colour")
    near = {c: float(crimson @ sentence(model, f"the {c} colour")) for c in ("red", "green", "blue")}
    assert near["red"] > max(near["green"], near["blue"]) + 0.05, near


def test_the_weights_are_read_as_the_reference_loader_reads_them():
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoModel.from_pretrained(model_dir(), local_files_only=True).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir(), local_files_only=True)
    texts = ["grab the navy block", "lift the green cube"]
    batch = tokenizer(texts, padding="max_length", max_length=8, return_tensors="pt")
    with torch.no_grad():
        expected = reference(**batch).last_hidden_state * batch["attention_mask"].unsqueeze(-1)
    vectors, mask = minilm().encode(texts, 8)
    np.testing.assert_array_equal(mask, batch["attention_mask"].numpy())
    np.testing.assert_allclose(vectors, expected.numpy(), atol=1e-5)


def test_a_length_that_leaves_no_word_is_refused_by_name():
    with pytest.raises(ValueError, match="max_words counts word pieces with"):
        minilm().encode(["pick up the red cube"], max_words=2)
    with pytest.raises(ValueError, match="policy.max_words counts word pieces"):
        VLAPolicyConfig(text_encoder="minilm", max_words=2)
    VLAPolicyConfig(text_encoder="word_vectors", max_words=2)  # two words are two words


def test_a_file_that_is_not_the_chosen_one_is_refused(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(model_dir(), copy)
    config = (copy / "config.json").read_text()
    (copy / "config.json").write_text(config.replace('"num_hidden_layers": 6', '"num_hidden_layers": 5'))
    with pytest.raises(ValueError, match="not the file robolearn's language model was built on"):
        MiniLM(copy)


def test_loading_it_leaves_torchs_seed_where_it_was():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    minilm.cache_clear()
    minilm()
    assert torch.equal(torch.rand(3), expected)
