"""A tiny random SmolVLA saved as a lerobot ``save_pretrained`` folder, built offline: its vision-language backbone's
config, tokenizer and processor are written to a local folder first (SmolVLA reads them from ``vlm_model_name``,
by default a hub id), so nothing is downloaded. The weights are random: this tests the wiring, not a policy."""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["<pad>", "<unk>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
           "<global-img>"]
WORDS = ["pick", "up", "the", "red", "green", "blue", "cube"]


def tiny_vlm_folder(root: Path) -> Path:
    """A SmolVLM backbone of a few thousand parameters: a word-level tokenizer, an image processor for 32 px, and
    the model's config (1 vision layer, 2 text layers)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>", pad_token="<pad>", bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        extra_special_tokens={"fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
                              "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>"})
    images = SmolVLMImageProcessor(do_resize=True, size={"longest_edge": 32}, max_image_size={"longest_edge": 32},
                                   do_image_splitting=False)
    SmolVLMProcessor(images, tokenizer, SmolVLMVideoProcessor(), image_seq_len=4).save_pretrained(root)
    SmolVLMConfig(vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                                 "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
                  text_config={"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 16, "vocab_size": len(vocab), "max_position_embeddings": 256},
                  scale_factor=2, image_token_id=vocab["<image>"]).save_pretrained(root)
    return root


def tiny_smolvla_folder(root: Path, state_dim: int, action_dim: int, cameras: dict[str, int], chunk: int) -> Path:
    """A random SmolVLA for ``state_dim`` states, ``cameras`` {name: square size px} and ``action_dim`` actions, with
    its pre/post-processors (identity normalisation), saved to ``root / "policy"``."""
    import torch
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies import make_pre_post_processors
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    vlm = tiny_vlm_folder(root / "vlm")
    inputs = {"observation.state": PolicyFeature(FeatureType.STATE, (state_dim,)),
              **{f"observation.images.{k}": PolicyFeature(FeatureType.VISUAL, (3, s, s)) for k, s in cameras.items()}}
    config = SmolVLAConfig(
        vlm_model_name=str(vlm), load_vlm_weights=False, chunk_size=chunk, n_action_steps=chunk, max_state_dim=32,
        max_action_dim=32, resize_imgs_with_padding=(32, 32), tokenizer_max_length=16, num_steps=2, device="cpu",
        num_vlm_layers=2, normalization_mapping={t.value: NormalizationMode.IDENTITY for t in FeatureType},
        input_features=inputs, output_features={"action": PolicyFeature(FeatureType.ACTION, (action_dim,))})
    torch.manual_seed(0)
    policy = SmolVLAPolicy(config)
    pre, post = make_pre_post_processors(config)
    out = root / "policy"
    policy.save_pretrained(out)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out
