"""Image SAC: a CNN encoder shared by actor and critic (trained by the critic, read by the actor with
stop-gradient) and random-shift augmentation of uint8 frames sampled from the replay buffer."""

import numpy as np
import torch
import torch.nn.functional as F

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.learner.sac import SAC, SACConfig
from robolearn.policies.encoders import random_shift
from robolearn.policies.mlp import MLPPolicyConfig, make_policy
from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec
from robolearn.transition import TransitionWriter

OBS = ObservationSpec({"state": ArraySpec((3,), low=(-1.0,) * 3, high=(1.0,) * 3),
                       "front": ArraySpec((24, 24, 3), dtype="uint8")})
ACT = ActionSpec(ArraySpec((2,), low=(-1.0, -1.0), high=(1.0, 1.0)))


def image_buffer(tmp_path, episodes=4, steps=20):
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(tmp_path, OBS, ACT, fsync="off")
    for ep in range(episodes):
        w = TransitionWriter(OBS)
        for t in range(steps):
            obs = {"state": rng.uniform(-1, 1, 3).astype(np.float32),
                   "front": rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)}
            last = t == steps - 1
            w.add(obs, rng.uniform(-1, 1, 2).astype(np.float32), action_source=0, intervention=False,
                  reward=float(t), terminated=False, truncated=last, success=False, episode_id=ep, step=t, tick=t,
                  t_obs=0.0, t_act=0.0, policy_version=1, chunk_id=0, chunk_index=0, delay_ticks=0)
        buf.add("cam-0", w.flush(final_obs=obs))
    return buf


def image_sac(**kw):
    torch.manual_seed(0)
    policy = make_policy(OBS, ACT, MLPPolicyConfig(hidden_dims=[32], image_feature_dim=8))
    return SAC(policy, SACConfig(critic_hidden_dims=[32], **kw))


def test_random_shift_is_a_crop_of_the_edge_padded_frame():
    frames = torch.randint(0, 256, (5, 10, 12, 3), dtype=torch.uint8)
    out = random_shift(frames, np.random.default_rng(3), pad=2)
    dy, dx = np.random.default_rng(3).integers(0, 5, 5), np.random.default_rng(3).integers(0, 5, 10)[5:]
    padded = F.pad(frames.permute(0, 3, 1, 2).float(), (2, 2, 2, 2), mode="replicate").permute(0, 2, 3, 1)
    assert out.dtype == torch.uint8 and out.shape == frames.shape
    for i in range(5):
        assert torch.equal(out[i], padded[i, dy[i]:dy[i] + 10, dx[i]:dx[i] + 12].to(torch.uint8))
    assert not all(torch.equal(out[i], frames[i]) for i in range(5))


def test_image_batches_are_uint8_frames_shifted_with_the_replay_generator(tmp_path):
    buf = image_buffer(tmp_path)
    sac = image_sac()
    batch = sac.sample_batch(buf, ACT, 16)
    assert batch["obs"]["front"].dtype == torch.uint8 and batch["obs"]["front"].shape == (16, 24, 24, 3)
    assert batch["obs"]["state"].shape == (16, 3) and batch["next_obs"]["front"].shape == (16, 24, 24, 3)
    # the same generator state draws the same batch, shifts included (exact resume)
    state = buf.rng.bit_generator.state
    again = sac.sample_batch(buf, ACT, 16)
    buf.rng.bit_generator.state = state
    third = sac.sample_batch(buf, ACT, 16)
    assert torch.equal(again["obs"]["front"], third["obs"]["front"])
    buf.close()


def test_the_encoder_learns_from_the_critic_only(tmp_path):
    buf = image_buffer(tmp_path)
    # critic_lr = 0: whatever moves the encoder must come through the actor loss, which must not
    sac = image_sac(critic_lr=0.0, actor_lr=1e-2)
    enc0 = {k: v.clone() for k, v in sac.actor.encoder.state_dict().items()}
    trunk0 = sac.actor.trunk[0].weight.clone()
    for _ in range(3):
        sac.update(sac.sample_batch(buf, ACT, 16))
    assert all(torch.equal(enc0[k], v) for k, v in sac.actor.encoder.state_dict().items())
    assert not torch.equal(trunk0, sac.actor.trunk[0].weight)
    # with a critic learning rate the encoder moves
    sac = image_sac(critic_lr=1e-2)
    enc0 = sac.actor.encoder.cameras["front"].project[0].weight.clone()
    sac.update(sac.sample_batch(buf, ACT, 16))
    assert not torch.equal(enc0, sac.actor.encoder.cameras["front"].project[0].weight)
    # the actor process serves the same policy from a raw observation dict
    obs = {"state": np.zeros((2, 3), np.float32), "front": np.zeros((2, 24, 24, 3), np.uint8)}
    chunk = sac.actor.predict_chunk(obs, np.zeros((2, 0, 2), np.float32), np.zeros(2, np.int64))
    assert chunk.shape == (2, 1, 2) and np.abs(chunk).max() <= 1
    buf.close()
