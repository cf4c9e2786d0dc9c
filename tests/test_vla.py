"""``policy=vla``: the instruction is an observation (pick_cube_color with task.language=true), the VLA reads it,
its cameras and the state; it is served to several robots in one batch, its two-stage head sees only the mid
observation's state (in-process and through the policy server, where the mid observation follows its request over
the wire), BC and HABC train it from observation dicts, a recorded LeRobotDataset's task string becomes its
instruction again on import, and DSRL steers it without changing it."""

import time

import numpy as np
import pytest
import torch

from robolearn.buffer.lerobot_io import import_lerobot
from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.checkpoint import save_policy_checkpoint
from robolearn.config import ConfigError, check_buildable, compose, validate
from robolearn.inference.client import RemoteClient
from robolearn.inference.protocol import ChunkRequest, MidObservation, mid_to_wire
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.inference.server import PolicyServer
from robolearn.learner.bc import ChunkDataset, Validation, expert_demos, train_bc
from robolearn.learner.chunk_batch import sample_chunk_windows
from robolearn.learner.dsrl import DSRL, DSRLConfig
from robolearn.learner.habc import HABC, HABCConfig
from robolearn.policies.colour_words import FLAG
from robolearn.policies.dsrl import DSRLPolicy, DSRLPolicyConfig
from robolearn.policies.encoders import CameraEncoder
from robolearn.policies.vla import VLAPolicy, VLAPolicyConfig
from robolearn.record import record
from robolearn.sim.cube_tasks import INSTRUCTION_BYTES, PickCubeColorConfig, PickCubeEnv
from robolearn.specs import SpecError, decode_text, encode_text
from tests.helpers import serve_in_one_batch

H, D = 6, 3
SIZE = 32  # camera pixels: enough to test the wiring, cheap to render


@pytest.fixture(scope="module")
def env():
    e = PickCubeEnv(PickCubeColorConfig(language=True, scene_state=False, cameras=["front", "wrist"],
                                        camera_size=SIZE, camera_shadows=False))
    yield e
    e.close()


def tiny_config(**extra) -> VLAPolicyConfig:
    return VLAPolicyConfig(chunk_horizon=H, max_prefix=D, hidden_dims=[64, 64], fuse_dims=[64], text_features=32,
                           camera_features=16, trunk_features=32, head_dims=[32], flow_steps=4, **extra)


def tiny_vla(env, seed=0, **extra):
    torch.manual_seed(seed)
    return VLAPolicy(env.observation_spec, env.action_spec, tiny_config(**extra))


@pytest.fixture(scope="module")
def demo_buffer(env, tmp_path_factory):
    """Two recorded expert episodes (LeRobotDataset, the instruction as its task string) imported into a buffer."""
    root = tmp_path_factory.mktemp("vla")
    result = record(env, 2, root / "demos", "local/vla", fps=25, seed=5)
    buffer = ReplayBuffer(root / "buffer", env.observation_spec, env.action_spec)
    assert import_lerobot(buffer, root / "demos", "local/vla") == 2
    return buffer, result


def one(obs):
    return {k: v[None] for k, v in obs.items()}


def test_text_observations_round_trip_and_refuse_what_does_not_fit():
    assert decode_text(encode_text("grab the crimson block", 32)) == "grab the crimson block"
    assert decode_text(encode_text("", 8)) == ""
    with pytest.raises(SpecError, match="40 UTF-8 bytes"):
        encode_text("x" * 40, 32)
    with pytest.raises(SpecError, match="not UTF-8"):
        decode_text(np.array([0xff, 0xfe, 0], np.uint8))


def test_with_language_the_colour_is_asked_in_words_and_not_in_the_state(env):
    names = env.observation_spec.arrays["state"].names
    assert not any(n.startswith(("asked.", "cube_")) for n in names)  # no one-hot, no cube poses (scene_state=false)
    asked = set()
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        env.observation_spec.validate(obs)
        assert decode_text(obs["instruction"]) == f"pick up the {env.target} cube" == info["instruction"]
        asked.add(env.target)
    assert asked == {"red", "green", "blue"}
    paraphrased = PickCubeEnv(PickCubeColorConfig(language=True, instructions={
        "red": ["grab the crimson block", "lift the scarlet cube"]}))
    try:
        said = {decode_text(paraphrased.reset(seed=s)[0]["instruction"]) for s in range(30)}
    finally:
        paraphrased.close()
    assert {"grab the crimson block", "lift the scarlet cube", "pick up the blue cube"} <= said
    assert "pick up the red cube" not in said
    with pytest.raises(ValueError, match="names colours the task does not have: \\['purple'\\]"):
        PickCubeColorConfig(language=True, instructions={"purple": ["x"]})
    with pytest.raises(ValueError, match=f"longer than {INSTRUCTION_BYTES}"):
        PickCubeColorConfig(language=True, instructions={"red": ["very " * 30]})


@pytest.mark.parametrize("encoder, features, match", [
    ("film_keypoints", 15, "camera_features must be even"), ("keypoints", 15, "camera_features must be even"),
    ("resnet", 16, "camera_encoder must be one of"),
])
def test_a_camera_encoder_setting_that_cannot_be_built_is_named(encoder, features, match):
    with pytest.raises(ValueError, match=match):
        VLAPolicyConfig(camera_encoder=encoder, camera_features=features)
    assert VLAPolicyConfig(camera_encoder="conv", camera_features=15).camera_features == 15  # a CNN takes any width


@pytest.mark.parametrize("strides", [[], [2, 0, 1, 1]])
def test_camera_strides_that_cannot_be_built_are_named(strides):
    with pytest.raises(ValueError, match="camera_strides must be one or more positive integers"):
        VLAPolicyConfig(camera_strides=strides)
    with pytest.raises(ValueError, match="camera_strides sets the conv cameras only"):
        VLAPolicyConfig(camera_encoder="keypoints", camera_strides=[2, 2, 1, 1])


def test_the_conv_cameras_use_the_configured_strides_and_refuse_a_frame_too_small_for_them(env):
    policy = tiny_vla(env, camera_strides=[2, 2, 1, 1])
    for camera in policy.vision.cameras.values():
        convs = [m for m in camera.convs if isinstance(m, torch.nn.Conv2d)]
        assert [c.stride[0] for c in convs] == [2, 2, 1, 1]
        n = (SIZE - 3) // 2 + 1
        n = (n - 3) // 2 + 1 - 4                              # two unpadded 3x3 at stride 1 take 2 pixels each
        assert camera.project[0].in_features == 32 * n * n  # what the convolutions really give, below
        assert camera.convs(torch.zeros(1, 3, SIZE, SIZE)).numel() == 32 * n * n
    with pytest.raises(ValueError, match="too small for convolutions at strides"):
        CameraEncoder(8, 8, 16, strides=(2, 2, 2))


def test_each_camera_is_shifted_by_its_own_pad_in_training_only(env, monkeypatch):
    import robolearn.policies.vla as vla_module
    pads: list[int] = []

    def recording_shift(frames, rng, pad):
        pads.append(pad)
        return frames
    monkeypatch.setattr(vla_module, "random_shift", recording_shift)
    policy = tiny_vla(env, camera_shift_pads={"wrist": 2})
    obs = policy.observation_tensors(one(env.reset(seed=3)[0]))
    policy.train()
    policy.encode(obs)
    assert pads == [4, 2]  # front: image_shift_pad, wrist: its own
    pads.clear()
    tiny_vla(env, camera_shift_pads={"wrist": 0}).train().encode(obs)
    assert pads == [4]  # a pad of 0 leaves the wrist frames as they are
    pads.clear()
    policy.eval()
    policy.encode(obs)
    assert pads == []
    with pytest.raises(ValueError, match=r"camera_shift_pads names cameras the task does not have: \['side'\]"):
        tiny_vla(env, camera_shift_pads={"side": 1})
    with pytest.raises(ValueError, match="camera_shift_pads must be >= 0"):
        tiny_config(camera_shift_pads={"wrist": -1})


def test_the_vla_is_refused_by_name_without_an_instruction_or_a_camera_and_two_stage_by_the_online_learners():
    cfg = validate(compose("config", ["task=pick_cube_color", "task.cameras=[front]", "policy=vla"]))
    with pytest.raises(ConfigError, match="text observation 'instruction'.*task.language=true"):
        check_buildable(cfg)
    cfg = validate(compose("config", ["task=pick_cube_color", "task.language=true", "policy=vla"]))
    with pytest.raises(ConfigError, match="at least one camera"):
        check_buildable(cfg)
    cfg = validate(compose("config", ["task=pick_cube_color", "task.language=true", "task.cameras=[wrist]",
                                      "task.camera_size=32", "policy=vla", "policy.mid_observation=true",
                                      "algo=habc"]))
    with pytest.raises(ConfigError, match="algo=habc cannot train a two-stage policy"):
        check_buildable(cfg)


def test_a_vla_is_served_to_two_robots_in_one_batch(env):
    chunks, batches = serve_in_one_batch(tiny_vla(env), env.observation_spec, [env.reset(seed=i)[0] for i in range(2)])
    assert batches == [2] and all(a.shape == (H, 6) for a in chunks)
    assert np.abs(np.stack(chunks)).max() <= 1.0


def test_two_stage_the_trunk_never_sees_the_mid_observation_and_the_head_reads_only_its_state(env):
    policy = tiny_vla(env, mid_observation=True).eval()
    first, _ = env.reset(seed=0)
    mid = {k: v.copy() for k, v in first.items()}
    prefix, lens, k = np.zeros((1, D, 6), np.float32), np.array([2]), np.array([1])
    features = policy.predict_trunk(one(first), prefix, lens, k)  # at request time: no mid observation exists yet

    def head(observation):
        torch.manual_seed(7)  # the same flow noise
        return policy.predict_head(features, one(observation), prefix, lens, k)

    base = head(mid)
    other_scene = {**mid, "front": 255 - mid["front"], "wrist": 255 - mid["wrist"],
                   "instruction": encode_text("pick up the blue cube", INSTRUCTION_BYTES)}
    np.testing.assert_array_equal(head(other_scene), base)   # images and words of the mid observation: not read
    moved = {**mid, "state": mid["state"] + 5.0}
    assert not np.allclose(head(moved), base)                # its state is: the chunk starts from it
    share = policy.trunk_head_flops()["head_share"]
    assert share < 0.05, share                               # the light head of late binding


@pytest.mark.parametrize(("camera_encoder", "text_encoder"),
                         [("conv", "word_vectors"), ("film_keypoints", "word_vectors"), ("conv", "minilm")])
def test_bc_learns_to_act_on_the_colour_word(env, camera_encoder, text_encoder):
    """Chunks that depend on the instruction alone: the VLA has to read the colour word to fit them (with cameras
    conditioned on the words too), from static word vectors or from the language model's word pieces."""
    rng = np.random.default_rng(0)
    n, colours = 192, ["red", "green", "blue"]
    target = {"red": 0.6, "green": 0.0, "blue": -0.6}
    asked = [colours[i % 3] for i in range(n)]
    obs, _ = env.reset(seed=0)
    chunks = np.zeros((n, H, 6), np.float32)
    chunks[:, :, 0] = np.array([target[c] for c in asked])[:, None]
    data = ChunkDataset(np.repeat(obs["state"][None], n, 0), chunks, np.ones((n, H), np.float32), n, n,
                        observations={
                            "front": rng.integers(0, 256, (n, SIZE, SIZE, 3), dtype=np.uint8),
                            "wrist": rng.integers(0, 256, (n, SIZE, SIZE, 3), dtype=np.uint8),
                            "instruction": np.stack([encode_text(f"pick up the {c} cube", INSTRUCTION_BYTES)
                                                     for c in asked])})
    policy = tiny_vla(env, camera_encoder=camera_encoder, text_encoder=text_encoder)
    losses = train_bc(policy, data, steps=250, batch_size=64, lr=2e-3).losses
    assert np.mean(losses[-20:]) < 0.3 * np.mean(losses[:20])

    def first_joint(sentence):
        torch.manual_seed(0)
        asked_obs = {**obs, "instruction": encode_text(sentence, INSTRUCTION_BYTES)}
        return float(policy.predict_chunk(one(asked_obs), np.zeros((1, 0, 6)), np.zeros(1, np.int64))[0, :, 0].mean())

    for colour, value in target.items():
        assert abs(first_joint(f"pick up the {colour} cube") - value) < 0.2, colour


@pytest.mark.parametrize("colour_words", [True, pytest.param(False, marks=pytest.mark.slow)])  # False: the contrast
def test_colour_words_carry_what_bc_learned_to_colour_words_it_never_saw(env, colour_words):
    """Chunks that depend on the colour word alone, trained on red, green and blue only: read by their CIELAB colour
    (policy.colour_words), crimson and scarlet act as red, emerald and jade as green, navy and cobalt as blue. Read by
    their word vectors (crimson and scarlet share one, nearer blue's), they do not."""
    n, colours = 192, ["red", "green", "blue"]
    target = {"red": 0.6, "green": 0.0, "blue": -0.6}
    unseen = {"crimson": "red", "scarlet": "red", "emerald": "green", "jade": "green", "navy": "blue",
              "cobalt": "blue"}
    asked = [colours[i % 3] for i in range(n)]
    obs, _ = env.reset(seed=0)
    chunks = np.zeros((n, H, 6), np.float32)
    chunks[:, :, 0] = np.array([target[c] for c in asked])[:, None]
    frames = np.repeat(obs["front"][None], n, 0)  # one scene: only the words differ
    data = ChunkDataset(np.repeat(obs["state"][None], n, 0), chunks, np.ones((n, H), np.float32), n, n,
                        observations={"front": frames, "wrist": np.repeat(obs["wrist"][None], n, 0),
                                      "instruction": np.stack([encode_text(f"pick up the {c} cube", INSTRUCTION_BYTES)
                                                               for c in asked])})
    policy = tiny_vla(env, colour_words=colour_words)
    train_bc(policy, data, steps=250, batch_size=64, lr=2e-3)

    def first_joint(word):
        torch.manual_seed(0)
        asked_obs = {**obs, "instruction": encode_text(f"pick up the {word} cube", INSTRUCTION_BYTES)}
        return float(policy.predict_chunk(one(asked_obs), np.zeros((1, 0, 6)), np.zeros(1, np.int64))[0, :, 0].mean())

    for colour, value in target.items():
        assert abs(first_joint(colour) - value) < 0.2, colour
    acted_as = {word: min(target, key=lambda c, w=word: abs(first_joint(w) - target[c])) for word in unseen}
    right = sum(acted_as[w] == unseen[w] for w in unseen)
    assert right == len(unseen) if colour_words else right < len(unseen), acted_as


def test_colour_words_are_the_surveys_colours_in_cielab_aligned_with_the_words():
    from robolearn.policies.colour_words import FLAG, SCALE, colour_features, colour_table, srgb_to_lab
    # CIELAB (D65) of the sRGB primaries and white, as published (e.g. Lindbloom's calculator): an independent check
    np.testing.assert_allclose(srgb_to_lab([1, 0, 0]), [53.24, 80.09, 67.20], atol=0.05)
    np.testing.assert_allclose(srgb_to_lab([0, 0, 1]), [32.30, 79.19, -107.86], atol=0.05)
    np.testing.assert_allclose(srgb_to_lab([1, 1, 1]), [100, 0, 0], atol=0.02)
    table = colour_table()
    assert "crimson" in table and "cube" not in table and "the" not in table
    features = colour_features(["pick up the crimson cube", "the", ""], max_words=6)
    assert features.shape == (3, 6, 4)
    assert features[0, :, 3].tolist() == [0, 0, 0, FLAG, 0, 0] and not features[1:].any()
    lab = table["crimson"]
    np.testing.assert_allclose(features[0, 3, :3], [SCALE * (lab[0] - 50), SCALE * lab[1], SCALE * lab[2]], rtol=1e-6)
    # a colour name that is also a noun: the noun when it ends an instruction that names a colour before it
    nouns = colour_features(["collect the green brick", "grab the cherry red cube", "fetch the brick one",
                             "pick up the brick"], max_words=6)
    assert (nouns[:, :, 3] > 0).tolist() == [[0, 0, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0], [0, 0, 1, 0, 0, 0],
                                             [0, 0, 0, 1, 0, 0]]


def test_a_colour_words_features_are_as_large_as_the_word_vectors_it_stands_in_for():
    """A colour word's key is P_c c where another word's is P w: c as small as CIELAB / 50 (norm about 2, against
    word vectors of norm 28-134) started colour words' keys small, and bench-vla's BC lost trained success
    (BENCHMARKS.md, vla). The features of each colour word the benchmark says lie within the norms of the word vectors
    of its sentences."""
    from robolearn.policies.colour_words import colour_features
    from robolearn.policies.text_encoder import word_vectors
    said = ["red", "green", "blue", "crimson", "scarlet", "ruby", "cherry", "emerald", "jade", "lime", "olive", "navy",
            "cobalt", "azure", "sapphire"]
    sentence = ["pick", "up", "the", "cube", "lift", "grab", "collect", "block", *said]
    vectors, known = word_vectors().encode(sentence, max_words=1)
    assert known.all()
    norms = np.linalg.norm(vectors[:, 0], axis=-1)
    colour_norms = np.linalg.norm(colour_features(said, max_words=1)[:, 0], axis=-1)
    assert norms.min() / 2 < colour_norms.min() and colour_norms.max() < 2 * norms.max(), (colour_norms, norms)


def test_the_instruction_cache_starting_again_keeps_the_batch_it_serves():
    from robolearn.policies.vla import InstructionEncoder
    encoder = InstructionEncoder(max_words=6, features=8, heads=2, colour_words=True)
    encoder.cache_size = 2
    sentences = ["pick up the red cube", "lift the blue cube", "raise the green cube", "pick the crimson cube up"]

    def batch(*which):
        return torch.as_tensor(np.stack([encode_text(sentences[i], INSTRUCTION_BYTES) for i in which]))

    encoder.lookup(batch(0, 1))
    vectors, mask, colours = encoder.lookup(batch(0, 2, 3))  # sentence 0 was cached before the cache starts again
    fresh = InstructionEncoder(max_words=6, features=8, heads=2, colour_words=True).lookup(batch(0, 2, 3))
    for got, expected in zip((vectors, mask, colours), fresh, strict=True):
        torch.testing.assert_close(got, expected)
    assert colours[2, :, 3].tolist() == [0, 0, FLAG, 0, 0, 0]  # "pick the crimson cube up": one colour word
    empty = encoder.lookup(torch.zeros((0, INSTRUCTION_BYTES), dtype=torch.uint8))
    assert [tuple(part.shape) for part in empty] == [(0, 6, 300), (0, 6), (0, 6, 4)]


def test_a_colour_word_without_a_word_vector_still_counts_by_its_colour():
    from robolearn.policies.text_encoder import word_vectors
    from robolearn.policies.vla import InstructionEncoder
    assert word_vectors().row("darkblue") is None  # a survey name that the word vectors do not hold
    said = torch.as_tensor(np.stack([encode_text(t, INSTRUCTION_BYTES)
                                     for t in ("pick up the darkblue cube", "pick up the cube")]))
    torch.manual_seed(0)
    plain = InstructionEncoder(max_words=6, features=8, heads=2).eval()
    _, mask = plain.keys(said)
    assert mask[0].tolist() == [1, 1, 1, 0, 1, 0]  # without colour words the unknown word is dropped ...
    torch.testing.assert_close(plain(said)[0], plain(said)[1])  # ... and the sentence is "pick up the cube"
    torch.manual_seed(0)
    coloured = InstructionEncoder(max_words=6, features=8, heads=2, colour_words=True).eval()
    _, mask = coloured.keys(said)
    assert mask[0].tolist() == [1, 1, 1, 1, 1, 0]
    assert not torch.allclose(coloured(said)[0], coloured(said)[1])


def test_colour_words_are_refused_with_word_pieces_and_a_negative_jitter():
    with pytest.raises(ValueError, match="colour_words reads whole words"):
        VLAPolicyConfig(colour_words=True, text_encoder="minilm")
    with pytest.raises(ValueError, match="colour_jitter must be >= 0"):
        VLAPolicyConfig(colour_words=True, colour_jitter=-1.0)


def test_expert_demos_keep_the_observations_a_vla_reads_and_two_stage_bc_trains_on_them(env):
    policy = tiny_vla(env, mid_observation=True)
    data = expert_demos(env, 2, H, seed=3, past=D, keys=policy.observation_keys)
    assert set(data.observations) == {"instruction", "front", "wrist"}
    assert data.observations["front"].shape == (len(data.states), SIZE, SIZE, 3)
    assert data.past_index.shape == (len(data.states), D + 1)
    losses = train_bc(policy, data, steps=5, batch_size=16).losses
    assert np.isfinite(losses).all()
    # held-out demos scored on the same observations (cameras, instruction, the past ones), in eval mode
    history = train_bc(policy, data, steps=4, batch_size=16, log_every=2,
                       validation=Validation(data, batches=2, batch_size=8))
    assert [step for step, _ in history.validation] == [2, 4] and np.isfinite([v for _, v in history.validation]).all()
    assert not policy.training


def test_recorded_instructions_come_back_as_the_observation_and_habc_trains_the_vla_on_them(env, demo_buffer):
    buffer, result = demo_buffer
    expected = []
    for seed in (5, 6):
        env.reset(seed=seed)
        expected.append(env.instruction)
    said = {decode_text(d["obs.instruction"][0]) for _, d in buffer.iter_episodes()}
    assert said == set(expected)
    assert result.frames == sum(buffer.partition_sizes().values())
    algo = HABC(tiny_vla(env), HABCConfig(warmup=2, value_hidden_dims=[16]))
    batch = algo.sample_batch(buffer, env.action_spec, 8)
    assert batch["observation"]["front"].dtype == torch.uint8 and batch["observation"]["instruction"].shape == (
        8, INSTRUCTION_BYTES)
    before = {k: v.clone() for k, v in algo.actor.state_dict().items()}
    algo.update(batch)
    after = algo.actor.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith(("text.", "vision.")))
    state_only = sample_chunk_windows(buffer, env.action_spec, 4, H)
    assert "observation" not in state_only


def dsrl_on_a_tiny_vla(env, tmp_path, seed: int) -> tuple[VLAPolicy, DSRLPolicy]:
    """A tiny VLA saved as a BC run's checkpoint, and policy=dsrl with it as the frozen base (not loaded yet: DSRL
    loads it)."""
    vla = tiny_vla(env, seed=seed)
    path = tmp_path / "bc" / "checkpoints" / "latest.pt"
    save_policy_checkpoint(path, vla.state_dict())
    return vla, DSRLPolicy(env.observation_spec, env.action_spec, DSRLPolicyConfig(
        base=tiny_config(name="vla"), base_checkpoint=str(path), hidden_dims=[32, 32]))


def test_dsrl_steers_a_frozen_vla_from_its_own_features_and_never_changes_it(env, demo_buffer, tmp_path):
    buffer, _ = demo_buffer
    vla, policy = dsrl_on_a_tiny_vla(env, tmp_path, seed=1)
    algo = DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32]))
    frozen = {k: v.clone() for k, v in vla.state_dict().items()}
    assert all(torch.equal(v, frozen[k]) for k, v in policy.base.state_dict().items())  # loaded
    state_dim = env.observation_spec.arrays["state"].shape[0]
    assert policy.context_dim == policy.base.encoded_dim + state_dim
    noise_before = {k: v.clone() for k, v in policy.noise_actor.state_dict().items()}
    for _ in range(3):
        metrics = algo.update(algo.sample_batch(buffer, env.action_spec, 8))
    assert all(np.isfinite(v) for v in metrics.values())
    assert all(torch.equal(v, frozen[k]) for k, v in policy.base.state_dict().items())  # bit for bit
    assert any(not torch.equal(v, noise_before[k]) for k, v in policy.noise_actor.state_dict().items())
    # the noise policy's context holds what was asked: the same scene asked for another colour differs
    obs, _ = env.reset(seed=0)
    asked = [{**obs, "instruction": encode_text(f"pick up the {c} cube", INSTRUCTION_BYTES)} for c in ("red", "blue")]
    contexts = [policy.context(policy.base.observation_tensors(one(o))) for o in asked]
    assert not torch.allclose(*contexts)
    encodes = []
    real_encode = policy.base.encode
    policy.base.encode = lambda o: encodes.append(1) or real_encode(o)
    chunk = policy.predict_chunk(one(obs), np.zeros((1, 0, 6), np.float32), np.zeros(1, np.int64))
    assert chunk.shape == (1, H, 6) and np.abs(chunk).max() <= 1.0
    assert len(encodes) == 1  # the words and frames are encoded once: the context's features make the chunk too
    # ... and the chunk is the one the base makes from the observation itself
    tensors, w = policy.base.observation_tensors(one(obs)), torch.rand(1, H, 6)
    torch.testing.assert_close(policy.actions(tensors, w, context=policy.context(tensors)),
                               policy.actions(tensors, w))


def test_dsrl_encodes_each_stored_observation_once_and_its_cached_features_are_the_vlas_own(env, demo_buffer,
                                                                                             tmp_path):
    buffer, result = demo_buffer
    _, policy = dsrl_on_a_tiny_vla(env, tmp_path, seed=2)
    real_encode, encoded = policy.base.encode, []
    policy.base.encode = lambda o: encoded.append(len(o["state"])) or real_encode(o)  # counts what is really encoded
    algo = DSRL(policy, DSRLConfig(critic_hidden_dims=[32, 32]))
    e = policy.base.encoded_dim
    for _ in range(6):
        batch = algo.sample_batch(buffer, env.action_spec, 32)
        for side in ("obs", "next_obs"):  # the features looked up are what encoding the observation again gives (to
            # float rounding: a row encoded in another batch differs by up to ~1e-6, as re-encoding does anyway)
            cached = algo.context(batch[side], batch[f"{side}_id"])[:, :e]
            torch.testing.assert_close(cached, real_encode(batch[side]), rtol=1e-5, atol=1e-5)
        algo.update(batch)
    stored = result.frames + result.episodes  # the recorder's count: each frame, and each episode's final observation
    assert 0 < sum(encoded) == algo.features.encoded <= stored < algo.features.lookups
    assert sum(encoded) == len(algo.features)


def test_a_remote_two_stage_request_is_answered_by_the_servers_head_from_the_mid_observation(env):
    policy = tiny_vla(env, mid_observation=True)
    runner = ChunkPolicyRunner(policy, env.observation_spec, 6)
    server = PolicyServer(runner, mid_timeout_s=1.0)
    client = RemoteClient(server.endpoint, "robot-0", H, 6)
    first, _ = env.reset(seed=0)
    prefix = np.random.default_rng(0).uniform(-1, 1, (D, 6)).astype(np.float32)
    mid = {**first, "state": first["state"] + 5.0}
    try:
        client.submit(ChunkRequest(0, 10, first, prefix, planned_delay=3, robot_id="robot-0", mid_ticks=1))
        assert server.serve_once(1000) == 1                   # the trunk ran; the answer waits for the mid
        assert client.poll(10, timeout_ms=100) == []
        client.submit_mid(0, 12, mid)
        torch.manual_seed(7)                                  # the head's flow noise
        assert server.serve_once(1000) == 1
        got = client.poll(12, timeout_ms=2000)[0]
        # a request nobody completes is answered one-stage after the server's wait, from its first observation
        client.submit(ChunkRequest(1, 20, first, prefix, planned_delay=3, robot_id="robot-0", mid_ticks=1))
        t0 = time.perf_counter()
        while not (late := client.poll(20, timeout_ms=50)) and time.perf_counter() - t0 < 5:
            server.serve_once(50)
    finally:
        client.close()
        server.close()
    assert (got.chunk_start, got.prefix_len, got.waited_for_mid) == (12, 1, True)  # starts at the mid tick
    # the same chunk as the two-stage policy computes in-process from that mid observation
    request = ChunkRequest(0, 10, first, prefix, planned_delay=3, mid_ticks=1)
    trunk = runner.run_trunk([request])
    request.mid_observation, request.mid_tick = mid, 12
    torch.manual_seed(7)
    np.testing.assert_allclose(got.actions, runner.run_head([request], trunk)[0].actions, atol=1e-6)
    request.mid_observation = first                           # another mid observation: another chunk
    torch.manual_seed(7)
    assert not np.allclose(got.actions, runner.run_head([request], trunk)[0].actions, atol=1e-3)
    assert (late[0].request_id, late[0].chunk_start, late[0].prefix_len) == (1, 20, D)
    # the mid observation went on the wire as its state alone (the head reads nothing else): not the frames
    _, arrays = mid_to_wire(MidObservation(0, 12, mid))
    assert set(arrays) == {"obs.state"} and set(mid) == {"state", "front", "wrist", "instruction"}
    with pytest.raises(SpecError, match="missing key.*'state'"):
        runner.check_mid({k: v for k, v in mid.items() if k != "state"})


def test_a_two_stage_request_to_a_one_stage_policy_is_rejected_by_name(env):
    server = PolicyServer(ChunkPolicyRunner(tiny_vla(env), env.observation_spec, 6))
    client = RemoteClient(server.endpoint, "robot-0", H, 6)
    try:
        obs, _ = env.reset(seed=0)
        client.submit(ChunkRequest(0, 0, obs, np.zeros((2, 6), np.float32), planned_delay=2, mid_ticks=1))
        server.serve_once(1000)
    finally:
        client.close()
        server.close()
    assert server.rejects.total == 1 and "takes no mid-inference observation" in server.rejects.last_reason


def test_film_keypoints_follow_what_the_condition_asks_for():
    """A keypoint that sums a red-detecting and a blue-detecting channel: FiLM's condition silences one, so the same
    image gives the red pixel's position when red is asked for and the blue one's for blue."""
    from robolearn.policies.encoders import FiLMKeypointEncoder, KeypointEncoder

    encoder = FiLMKeypointEncoder(17, 17, keypoints=1, condition_dim=2, channels=2)
    plain = KeypointEncoder(17, 17, keypoints=1, channels=2)
    plain.load_state_dict({k: v for k, v in encoder.state_dict().items() if not k.startswith("film.")})
    image = torch.zeros(1, 17, 17, 3, dtype=torch.uint8)
    image[0, 4, 12, 0] = 255   # red at row 4, column 12
    image[0, 10, 2, 2] = 255   # blue at row 10, column 2
    red, blue = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    # zero-initialised FiLM: the unconditioned encoder, whatever is asked
    torch.testing.assert_close(encoder(image, red), plain(image))
    with torch.no_grad():
        first, second, last = (c for c in encoder.convs if isinstance(c, torch.nn.Conv2d))
        for conv in (first, second, last):
            conv.weight.zero_()
            conv.bias.zero_()
        first.weight[0, 0, 2, 2] = 1.0    # channel 0 sees red
        first.weight[1, 2, 2, 2] = 1.0    # channel 1 sees blue
        second.weight[0, 0, 1, 1] = second.weight[1, 1, 1, 1] = 1.0
        last.weight[0, 0, 1, 1] = last.weight[0, 1, 1, 1] = 50.0  # the keypoint answers to both
        encoder.film.weight[1, 0] = -1.0  # asked for red: channel 1 (blue) scaled by 1 - 1 = 0
        encoder.film.weight[0, 1] = -1.0  # asked for blue: channel 0 (red) silenced
    def position(p: torch.Tensor) -> tuple[float, float]:
        x, y = p[0].tolist()
        return round(x, 2), round(y, 2)
    assert position(encoder(image, red)) == pytest.approx(((12 / 16) * 2 - 1, (4 / 16) * 2 - 1), abs=0.05)
    assert position(encoder(image, blue)) == pytest.approx(((2 / 16) * 2 - 1, (10 / 16) * 2 - 1), abs=0.05)


def test_word_swap_draws_table_words_for_known_words_naming_no_colour_in_training_only(monkeypatch):
    from robolearn.policies.text_encoder import word_vectors
    from robolearn.policies.vla import InstructionEncoder
    encoder = InstructionEncoder(max_words=6, features=8, heads=2, colour_words=True, word_swap=0.5)
    said = torch.as_tensor(np.stack([encode_text(t, INSTRUCTION_BYTES)
                                     for t in ("pick up the red cube", "lift the darkblue cube", "raise the qzxv")]))
    seen = []
    swapped = encoder.swapped
    monkeypatch.setattr(encoder, "swapped", lambda vectors, swappable: seen.append(swappable) or swapped(vectors,
                                                                                                   swappable))
    encoder.eval()(said)
    assert not seen  # serving reads the words said
    encoder.train()(said)
    # known words naming no colour: not "red" or "darkblue" (colours), not "qzxv" (no vector) nor padding
    assert seen[0].squeeze(-1).tolist() == [[1, 1, 1, 0, 1, 0], [1, 1, 0, 1, 0, 0], [1, 1, 0, 0, 0, 0]]

    torch.manual_seed(0)
    vectors, _, _ = encoder.lookup(said[:1].expand(4000, -1))
    swappable = torch.tensor([1.0, 1, 1, 0, 1, 0]).view(1, 6, 1).expand(4000, -1, -1)
    out = encoder.swapped(vectors, swappable)
    changed = (out != vectors).any(-1)                                  # (B, W)
    assert not changed[:, [3, 5]].any()                                 # the colour word and the padding are kept
    assert 0.47 < changed[:, [0, 1, 2, 4]].float().mean() < 0.53        # the others with chance word_swap
    table = torch.from_numpy(word_vectors().vectors)
    assert all((table == row).all(-1).any() for row in out[changed][:20])  # each a row of the table


def test_word_swap_is_refused_outside_0_1_and_without_colour_words():
    with pytest.raises(ValueError, match="word_swap is a probability"):
        VLAPolicyConfig(colour_words=True, word_swap=1.0)
    for other in ({}, {"text_encoder": "minilm"}):  # without colour words the colour word could be swapped too
        with pytest.raises(ValueError, match="word_swap leaves the colour words as said"):
            VLAPolicyConfig(word_swap=0.5, **other)
    assert VLAPolicyConfig(colour_words=True, word_swap=0.5).word_swap == 0.5
