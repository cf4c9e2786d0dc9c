"""``learner.device``: the names it takes, a CUDA device that is not there is an error (never a quiet CPU run), what
the learner asks Ray for, and an update on every device this machine has."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robolearn.config import ConfigError
from robolearn.learner.config import LearnerConfig
from robolearn.learner.device import batch_to, module_device, resolve_device
from robolearn.learner.habc import HABC, HABCConfig
from robolearn.learner.sac import SAC, SACConfig
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig
from robolearn.policies.mlp import GaussianChunkPolicy, MLPPolicyConfig
from robolearn.runtime.ray_runtime import learner_gpus
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


@pytest.mark.parametrize("name", ["gpu", "cuda:x", "CPU", ""])
def test_a_device_name_it_does_not_take_is_refused_naming_the_key(name):
    with pytest.raises(ValueError, match="learner.device must be auto, cpu, cuda or cuda:N"):
        LearnerConfig(device=name)


def test_auto_is_the_cpu_without_cuda_and_a_missing_cuda_device_is_an_error():
    if torch.cuda.is_available():
        assert resolve_device("auto").type == "cuda"
        with pytest.raises(ValueError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    else:
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ValueError, match="torch sees no CUDA device here"):
            resolve_device("cuda")
    assert resolve_device("cpu") == torch.device("cpu")


def test_the_learner_asks_ray_for_a_gpu_only_when_it_may_use_one_and_the_node_has_one():
    assert learner_gpus("cpu", 2) == 0
    assert learner_gpus("auto", 0) == 0
    assert learner_gpus("auto", 1) == 1 and learner_gpus("cuda", 4) == 1 and learner_gpus("cuda:0", 1) == 1
    with pytest.raises(ConfigError, match="has no GPU resource"):
        learner_gpus("cuda", 0)
    with pytest.raises(ConfigError, match="sees as cuda:0"):
        learner_gpus("cuda:1", 2)


def _specs() -> tuple[ObservationSpec, ActionSpec]:
    obs = ObservationSpec({"state": ArraySpec((6,), low=(-1.0,) * 6, high=(1.0,) * 6)})
    return obs, ActionSpec(ArraySpec((3,), low=(-1.0,) * 3, high=(1.0,) * 3))


def _batch(b: int, obs_dim: int, act_dim: int, horizon: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"obs": torch.rand(b, obs_dim, generator=g), "next_obs": torch.rand(b, obs_dim, generator=g),
            "action": torch.rand(b, horizon * act_dim, generator=g) * 2 - 1, "reward": torch.rand(b, generator=g),
            "discount": torch.full((b,), 0.97)}


@pytest.mark.parametrize("device", DEVICES)
def test_sac_builds_its_critics_where_the_policy_is_and_updates_there(device):
    obs, act = _specs()
    policy = GaussianChunkPolicy(obs, act, MLPPolicyConfig(hidden_dims=[32, 32])).to(device)
    sac = SAC(policy, SACConfig(critic_hidden_dims=[32, 32]))
    assert module_device(sac.critic) == module_device(sac.critic_target) == torch.device(device)
    metrics = sac.update(batch_to(_batch(16, 6, 3, policy.horizon), torch.device(device)))
    assert np.isfinite(metrics["critic_loss"]) and np.isfinite(metrics["actor_loss"])
    # a checkpoint written there loads on the CPU (the policy server's and robolearn eval's side)
    state = sac.state_dict()
    cpu_policy = GaussianChunkPolicy(obs, act, MLPPolicyConfig(hidden_dims=[32, 32]))
    cpu_policy.load_state_dict({k: v.cpu() for k, v in state["actor"].items()})


@pytest.mark.parametrize("device", DEVICES)
def test_habc_builds_its_value_heads_where_the_policy_is_and_updates_there(device):
    obs, act = _specs()
    config = FlowChunkPolicyConfig(hidden_dims=[32, 32], chunk_horizon=4, max_prefix=2)
    policy = FlowChunkPolicy(obs, act, config).to(device)
    habc = HABC(policy, HABCConfig(value_hidden_dims=[32]))
    assert module_device(habc.heads) == torch.device(device)
    b, h = 16, 4
    zeros = torch.zeros(b)
    batch = {"obs": torch.rand(b, 6), "next_obs": torch.rand(b, 6), "actions": torch.rand(b, h, 3) * 2 - 1,
             "valid": torch.ones(b, h), "done": zeros, "demo": zeros, "intervention": zeros, "labelled": zeros,
             "episode_success": zeros}
    metrics = habc.update(batch_to(batch, torch.device(device)))
    assert all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("device", DEVICES)
def test_habc_trains_a_lerobot_act_with_a_camera_where_the_policy_is(device):
    """lerobot's preprocessor is built for the CPU (its config's device); the batch still reaches the policy on
    learner.device."""
    from robolearn.policies.lerobot_policy import LerobotPolicyConfig, make_lerobot_policy

    obs = ObservationSpec({**_specs()[0].arrays, "front": ArraySpec((32, 32, 3), dtype="uint8", unit="RGB")})
    torch.manual_seed(0)
    policy = make_lerobot_policy(obs, _specs()[1], LerobotPolicyConfig(type="act", config={
        "chunk_size": 4, "dim_model": 32, "n_heads": 2, "dim_feedforward": 64, "n_encoder_layers": 1,
        "n_decoder_layers": 1, "n_vae_encoder_layers": 1, "latent_dim": 8})).to(device)
    habc = HABC(policy, HABCConfig(value_hidden_dims=[32]))
    b, h = 8, 4
    zeros = torch.zeros(b)
    state = torch.rand(b, 6)
    batch = {"obs": state, "next_obs": torch.rand(b, 6), "actions": torch.rand(b, h, 3) * 2 - 1,
             "valid": torch.ones(b, h), "done": zeros, "demo": zeros, "intervention": zeros, "labelled": zeros,
             "episode_success": zeros,
             "observation": {"state": state, "front": torch.randint(0, 255, (b, 32, 32, 3), dtype=torch.uint8)}}
    metrics = habc.update(batch_to(batch, torch.device(device)))
    assert all(np.isfinite(v) for v in metrics.values())
    served = policy.predict_chunk({"state": np.zeros((1, 6), np.float32), "front": np.zeros((1, 32, 32, 3), np.uint8)},
                                  np.zeros((1, 0, 3), np.float32), np.zeros(1, np.int64))
    assert served.shape == (1, 4, 3)


def test_a_checkpoint_keeps_the_cuda_generator_when_there_is_one_and_loads_without_it(tmp_path):
    from robolearn.checkpoint import Checkpoint, load_checkpoint, save_checkpoint

    state = torch.arange(16, dtype=torch.uint8)  # what torch.cuda.get_rng_state returns: a uint8 tensor
    save_checkpoint(tmp_path / "gpu.pt", Checkpoint({"actor": {}}, 3, 10, {}, torch.get_rng_state(), state))
    assert torch.equal(load_checkpoint(tmp_path / "gpu.pt").cuda_rng, state)
    save_checkpoint(tmp_path / "cpu.pt", Checkpoint({"actor": {}}, 3, 10, {}, torch.get_rng_state()))
    assert load_checkpoint(tmp_path / "cpu.pt").cuda_rng is None
    assert "cuda_rng" not in torch.load(tmp_path / "cpu.pt", weights_only=True)  # a CPU learner's, as before
