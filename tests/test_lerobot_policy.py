"""lerobot's policies as robolearn policies (``policy=lerobot``): a tiny ACT and a tiny Diffusion built by type for
the task's state are served by the policy server and trained by HABC (and ACT by Hi-ORS); built for a task with a
camera and an instruction, ACT reads the frames and SmolVLA the words too, and HABC trains both on recorded episodes;
a lerobot ``save_pretrained`` folder is served as saved; the wrong combinations are refused by name."""


import numpy as np
import pytest
import torch

from robolearn.builders import build_policy
from robolearn.config import compose, validate
from robolearn.learner.habc import HABC, HABCConfig
from robolearn.learner.hiors import HiORS, HiORSConfig
from robolearn.learner.sac import SAC, SACConfig
from robolearn.policies.lerobot_policy import LerobotPolicyConfig, make_lerobot_policy
from robolearn.sim.reach import ReachConfig, ReachEnv
from robolearn.transport.weights import weights_arrays
from tests.helpers import serve_in_one_batch

H = 5
TINY_ACT = {"chunk_size": H, "dim_model": 32, "n_heads": 2, "dim_feedforward": 64,
            "n_encoder_layers": 1, "n_decoder_layers": 1, "n_vae_encoder_layers": 1, "latent_dim": 8}


@pytest.fixture(scope="module")
def env():
    e = ReachEnv()
    yield e
    e.close()


def tiny_act(env, **extra):
    torch.manual_seed(0)
    return make_lerobot_policy(env.observation_spec, env.action_spec,
                               LerobotPolicyConfig(type="act", config={**TINY_ACT, **extra}))


def batch(env, b=16, seed=0, h=H):
    """A chunk-window batch as ``chunk_batch.sample_chunk_windows`` gives it (states in the task's units)."""
    rng = np.random.default_rng(seed)
    spec = env.observation_spec.arrays["state"]
    low, high = spec.low_array(), spec.high_array()
    obs = torch.as_tensor(rng.uniform(low, high, (b, len(low))), dtype=torch.float32)
    ones = torch.ones(b)
    return {"obs": obs, "next_obs": obs.flip(0), "actions": torch.as_tensor(rng.uniform(-1, 1, (b, h, 6)),
                                                                            dtype=torch.float32),
            "valid": torch.ones(b, h), "done": torch.zeros(b), "demo": ones, "intervention": torch.zeros(b),
            "labelled": torch.zeros(b), "episode_success": ones}


def test_the_config_group_builds_act_with_lerobots_own_fields(env):
    cfg = validate(compose("config", ["policy=lerobot", "policy.type=act",
                                           *[f"+policy.config.{k}={v}" for k, v in TINY_ACT.items()]]))
    policy = build_policy(cfg, env.observation_spec, env.action_spec)
    assert policy.horizon == H and policy.policy.config.dim_model == 32
    assert policy.obs_dim == env.observation_spec.arrays["state"].shape[0]
    with pytest.raises(ValueError, match="policy.config for lerobot 'act'.*no_such_field"):
        tiny_act(env, no_such_field=1)
    with pytest.raises(ValueError, match="policy.config for lerobot 'act'.*n_action_steps must be the whole chunk"):
        tiny_act(env, n_action_steps=H + 1)
    with pytest.raises(ValueError, match="'nope' is not a lerobot policy type.*'act'"):
        make_lerobot_policy(env.observation_spec, env.action_spec, LerobotPolicyConfig(type="nope"))


TINY_DIFFUSION = {"n_obs_steps": 1, "horizon": 8, "down_dims": [16, 32], "kernel_size": 3,
                  "n_groups": 4, "diffusion_step_embed_dim": 16, "num_inference_steps": 2}


def tiny_diffusion(env):
    torch.manual_seed(0)
    return make_lerobot_policy(env.observation_spec, env.action_spec,
                               LerobotPolicyConfig(type="diffusion", config=TINY_DIFFUSION))


@pytest.mark.parametrize("build", [tiny_act, tiny_diffusion], ids=["act", "diffusion"])
def test_an_act_or_diffusion_built_by_type_is_served_to_two_robots_in_one_batch_and_its_weights_travel(env, build):
    policy = build(env)
    chunks, batches = serve_in_one_batch(policy, env.observation_spec, [env.reset(seed=i)[0] for i in range(2)],
                                         version=2)
    assert batches == [2] and all(a.shape == (policy.horizon, 6) for a in chunks)
    assert np.abs(np.stack(chunks)).max() <= 1.0 and not np.allclose(chunks[0], chunks[1])
    # the weights on the wire rebuild the same policy in another process (an actor, the server)
    torch.manual_seed(1)  # a different initialisation, overwritten by the weights
    other = build(env)
    other.load_state_dict({k: torch.from_numpy(v) for k, v in weights_arrays(policy).items()})
    obs, _ = env.reset(seed=0)
    one = {k: v[None] for k, v in obs.items()}

    def chunk(p):
        torch.manual_seed(3)  # Diffusion samples its noise
        return p.predict_chunk(one, np.zeros((1, 0, 6)), np.zeros(1, np.int64))

    np.testing.assert_array_equal(chunk(other), chunk(policy))
    if build is tiny_act:  # deterministic: the served chunk is the same as in-process
        np.testing.assert_allclose(chunks[0], chunk(policy)[0], atol=1e-6)


def test_the_weighted_loss_is_lerobots_loss_on_the_examples_the_weights_choose(env):
    policy = tiny_act(env, use_vae=False, dropout=0.0)  # a deterministic loss: no latent sample, no dropout
    b = batch(env)
    j = 3
    only_j = torch.zeros(16)
    only_j[j] = 1.0
    loss = policy.weighted_loss(b["obs"], b["actions"], b["valid"], only_j)
    # the reference: ACT's L1 between its own chunk for example j and j's actions, computed here
    # (its chunk before robolearn clamps it to the action bounds)
    with torch.no_grad():
        chunk = policy.policy.predict_action_chunk(policy._inputs(b["obs"][j:j + 1]))
    assert loss.item() == pytest.approx((chunk[0] - b["actions"][j]).abs().mean().item(), rel=1e-4)
    zero = policy.weighted_loss(b["obs"], b["actions"], b["valid"], torch.zeros(16))
    assert zero.item() == 0.0
    zero.backward()  # nothing to imitate: a step that changes nothing, not an error


def test_habc_and_hiors_train_a_lerobot_act_and_habc_a_diffusion(env):
    for algo in (HABC(tiny_act(env), HABCConfig(warmup=5, value_hidden_dims=[16])),
                 HiORS(tiny_act(env), HiORSConfig()),
                 HABC(tiny_diffusion(env), HABCConfig(warmup=5, value_hidden_dims=[16]))):
        before = {k: v.clone() for k, v in algo.actor.state_dict().items()}
        b = batch(env, h=algo.horizon)  # Diffusion's windows are its own horizon
        losses = [algo.update(b)["actor_loss"] for _ in range(40)]
        assert np.isfinite(losses).all()
        if algo.horizon == H:  # ACT fits the batch; Diffusion's loss is a fresh noise draw each step
            assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]), (type(algo).__name__, losses)
        after = algo.actor.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("policy."))


def test_the_wrong_combinations_are_refused_by_name(env, tmp_path):
    with pytest.raises(ValueError, match="algo=sac"):
        SAC(tiny_act(env), SACConfig(), env.action_spec)
    with pytest.raises(ValueError, match=r"needs policy.type \(act.*or policy.path"):
        LerobotPolicyConfig(type="", path="")


def test_a_lerobot_folder_is_served_as_saved_and_needs_what_it_was_trained_on(env, tmp_path):
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    def save(folder, features):
        cfg = ACTConfig(input_features={k: PolicyFeature(t, shape) for k, (t, shape) in features.items()},
                        output_features={"action": PolicyFeature(FeatureType.ACTION, (6,))}, device="cpu",
                        pretrained_backbone_weights=None, n_action_steps=H, **TINY_ACT)
        stats = {k: {"mean": torch.zeros(shape[:1] if t != FeatureType.VISUAL else (3, 1, 1)),
                     "std": torch.ones(shape[:1] if t != FeatureType.VISUAL else (3, 1, 1))}
                 for k, (t, shape) in features.items()}
        stats["action"] = {"mean": torch.zeros(6), "std": torch.full((6,), 10.0)}
        pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
        ACTPolicy(cfg).save_pretrained(folder)
        pre.save_pretrained(folder)
        post.save_pretrained(folder)
        return LerobotPolicyConfig(path=str(folder))

    camera = ReachEnv(ReachConfig(cameras=["front"], camera_size=32))
    try:
        state_and_front = {"observation.state": (FeatureType.STATE, (18,)),
                           "observation.images.front": (FeatureType.VISUAL, (3, 32, 32))}
        served = save(tmp_path / "served", state_and_front)
        policy = make_lerobot_policy(camera.observation_spec, camera.action_spec, served)
        obs, _ = camera.reset(seed=0)
        chunk = policy.predict_chunk({k: v[None] for k, v in obs.items()}, np.zeros((1, 0, 6)), np.zeros(1, np.int64))
        assert chunk.shape == (1, H, 6) and np.isfinite(chunk).all()
        with pytest.raises(ValueError, match="needs observation 'front'"):  # the task has no such camera
            make_lerobot_policy(env.observation_spec, env.action_spec, served)
        with pytest.raises(ValueError, match=r"'state' of shape \(7,\)"):
            make_lerobot_policy(camera.observation_spec, camera.action_spec, save(
                tmp_path / "short", {**state_and_front, "observation.state": (FeatureType.STATE, (7,))}))
        with pytest.raises(ValueError, match="observation.environment_state"):  # no robolearn key for it
            make_lerobot_policy(camera.observation_spec, camera.action_spec, save(
                tmp_path / "env", {**state_and_front, "observation.environment_state": (FeatureType.ENV, (3,))}))
        with pytest.raises(ValueError, match="algo=habc.*got LerobotFolderPolicy.*standalone policy server"):
            HABC(policy, HABCConfig())
    finally:
        camera.close()


def test_a_tiny_smolvla_from_a_local_folder_reads_the_instruction_and_is_served_offline(tmp_path):
    """SmolVLA (policy.path): its backbone's config and tokenizer from a local folder, nothing from the hub
    (HF_HUB_OFFLINE=1 in every test); the task's instruction observation is its lerobot task string."""
    from types import SimpleNamespace

    from robolearn.builders import task_specs
    from robolearn.sim.cube_tasks import INSTRUCTION_BYTES, PickCubeColorConfig, PickCubeEnv
    from robolearn.specs import encode_text
    from tests.tiny_smolvla import tiny_smolvla_folder

    task = PickCubeEnv(PickCubeColorConfig(language=True, scene_state=False, cameras=["front"], camera_size=32,
                                           camera_shadows=False))
    try:
        state_dim = task.observation_spec.arrays["state"].shape[0]
        folder = tiny_smolvla_folder(tmp_path, state_dim, 6, {"front": 32}, chunk=H)
        policy = make_lerobot_policy(task.observation_spec, task.action_spec, LerobotPolicyConfig(path=str(folder)))
        assert policy.policy.config.type == "smolvla" and policy.needs_instruction and policy.horizon == H
        obs, _ = task.reset(seed=0)
        asked = [{**obs, "instruction": encode_text(f"pick up the {c} cube", INSTRUCTION_BYTES)}
                 for c in ("red", "blue")]
        chunks, batches = serve_in_one_batch(policy, task.observation_spec, asked)
        assert batches == [2] and all(a.shape == (H, 6) and np.isfinite(a).all() for a in chunks)

        def chunk(observation):
            torch.manual_seed(0)  # the flow's noise
            return policy.predict_chunk({k: v[None] for k, v in observation.items()}, np.zeros((1, 0, 6)),
                                        np.zeros(1, np.int64))

        assert not np.allclose(chunk(asked[0]), chunk(asked[1]))  # the words reach the model
        one_hot = PickCubeColorConfig(scene_state=False, cameras=["front"], camera_size=32)  # no instruction
        with pytest.raises(ValueError, match="reads an instruction.*task.language=true"):
            make_lerobot_policy(task_specs(SimpleNamespace(task=one_hot, robot=None))[0], task.action_spec,
                                LerobotPolicyConfig(path=str(folder)))
    finally:
        task.close()


# --- cameras and the instruction: a lerobot policy built by type reads what the task provides -------------------
SIZE = 32  # camera pixels: enough to test the wiring, cheap to render


@pytest.fixture(scope="module")
def camera_task():
    """pick_cube_color asked in words, seen by a front camera (the cubes' poses are not in the state)."""
    from robolearn.sim.cube_tasks import PickCubeColorConfig, PickCubeEnv

    e = PickCubeEnv(PickCubeColorConfig(language=True, scene_state=False, cameras=["front"], camera_size=SIZE,
                                        camera_shadows=False))
    yield e
    e.close()


@pytest.fixture(scope="module")
def camera_buffer(camera_task, tmp_path_factory):
    """Two recorded expert episodes (LeRobotDataset: frames and the instruction as its task string) in a buffer."""
    from robolearn.buffer.lerobot_io import import_lerobot
    from robolearn.buffer.replay_buffer import ReplayBuffer
    from robolearn.record import record

    root = tmp_path_factory.mktemp("lerobot-cameras")
    record(camera_task, 2, root / "demos", "local/cameras", fps=25, seed=5)
    buffer = ReplayBuffer(root / "buffer", camera_task.observation_spec, camera_task.action_spec)
    assert import_lerobot(buffer, root / "demos", "local/cameras") == 2
    return buffer


def chunk_for(policy, observation):
    torch.manual_seed(0)  # a flow or diffusion policy's noise
    return policy.predict_chunk({k: v[None] for k, v in observation.items()}, np.zeros((1, 0, 6)),
                                np.zeros(1, np.int64))


def habc_update_changes(policy, buffer, task, prefixes):
    """One HABC update on windows drawn from ``buffer``: the names of the ``prefixes`` weights it changed."""
    algo = HABC(policy, HABCConfig(warmup=2, value_hidden_dims=[16]))
    batch = algo.sample_batch(buffer, task.action_spec, 8)
    assert set(batch["observation"]) == set(policy.observation_keys)
    assert batch["observation"]["front"].dtype == torch.uint8
    before = {k: v.clone() for k, v in algo.actor.state_dict().items()}
    assert np.isfinite(algo.update(batch)["actor_loss"])
    after = algo.actor.state_dict()
    return {k for k in before if k.startswith(prefixes) and not torch.equal(before[k], after[k])}


def test_an_act_built_by_type_reads_the_camera_and_habc_trains_its_backbone_from_recorded_frames(camera_task,
                                                                                                   camera_buffer):
    torch.manual_seed(0)
    act = make_lerobot_policy(camera_task.observation_spec, camera_task.action_spec,
                              LerobotPolicyConfig(type="act", config={**TINY_ACT, "dropout": 0.0}))
    assert act.observation_keys == ("state", "front")  # ACT reads no instruction
    assert act.policy.config.pretrained_backbone_weights is None  # nothing downloaded: the backbone from scratch
    obs, _ = camera_task.reset(seed=0)
    dark = {**obs, "front": obs["front"] // 4}
    assert not np.allclose(chunk_for(act, obs), chunk_for(act, dark))  # the frame reaches the model
    assert habc_update_changes(act, camera_buffer, camera_task, ("policy.model.backbone.",))
    state_only = make_lerobot_policy(camera_task.observation_spec, camera_task.action_spec,
                                     LerobotPolicyConfig(type="act", config=TINY_ACT, use_cameras=False))
    assert state_only.observation_keys == ("state",)
    np.testing.assert_array_equal(chunk_for(state_only, obs), chunk_for(state_only, dark))


def test_a_smolvla_built_by_type_from_a_local_backbone_folder_reads_the_instruction_and_habc_trains_it(
        camera_task, camera_buffer, tmp_path):
    """SmolVLA by type: its vision-language backbone's config and tokenizer from a local folder
    (``policy.config.vlm_model_name``), nothing from the hub; the task's instruction is its task string."""
    from types import SimpleNamespace

    from robolearn.builders import task_specs
    from robolearn.sim.cube_tasks import INSTRUCTION_BYTES, PickCubeColorConfig
    from robolearn.specs import encode_text
    from tests.tiny_smolvla import tiny_vlm_folder

    config = LerobotPolicyConfig(type="smolvla", config={
        "vlm_model_name": str(tiny_vlm_folder(tmp_path / "vlm")), "load_vlm_weights": False, "chunk_size": H,
        "max_state_dim": 32, "max_action_dim": 32, "resize_imgs_with_padding": (SIZE, SIZE),
        "tokenizer_max_length": 16, "num_steps": 2, "num_vlm_layers": 2})
    torch.manual_seed(0)
    smolvla = make_lerobot_policy(camera_task.observation_spec, camera_task.action_spec, config)
    assert smolvla.observation_keys == ("state", "front", "instruction") and smolvla.horizon == H
    obs, _ = camera_task.reset(seed=0)
    red, blue = ({**obs, "instruction": encode_text(f"pick up the {c} cube", INSTRUCTION_BYTES)}
                 for c in ("red", "blue"))
    assert not np.allclose(chunk_for(smolvla, red), chunk_for(smolvla, blue))  # the words reach the model
    # lerobot's default trains the action expert on the frozen backbone's features
    assert habc_update_changes(smolvla, camera_buffer, camera_task, ("policy.model.vlm_with_expert.lm_expert.",))
    one_hot = PickCubeColorConfig(scene_state=False, cameras=["front"], camera_size=SIZE)  # no instruction
    with pytest.raises(ValueError, match="lerobot smolvla policy reads an instruction.*task.language=true"):
        make_lerobot_policy(task_specs(SimpleNamespace(task=one_hot, robot=None))[0], camera_task.action_spec,
                            config)
    with pytest.raises(ValueError, match="policy.config for lerobot 'smolvla' on this task.*no-such-folder"):
        make_lerobot_policy(camera_task.observation_spec, camera_task.action_spec, LerobotPolicyConfig(
            type="smolvla", config={**config.config, "vlm_model_name": str(tmp_path / "no-such-folder")}))


def test_a_diffusion_whose_crop_is_larger_than_the_camera_is_refused_by_name(camera_task):
    with pytest.raises(ValueError, match="policy.config for lerobot 'diffusion' on this task.*crop"):
        make_lerobot_policy(camera_task.observation_spec, camera_task.action_spec,
                            LerobotPolicyConfig(type="diffusion", config={**TINY_DIFFUSION, "crop_shape": (84, 84)}))
