"""The prefix-conditioned flow-matching chunk policy and behaviour cloning from expert demos."""

import numpy as np
import pytest
import torch

from robolearn.learner.bc import chunk_pairs, expert_demos, train_bc
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig, prefix_mask
from robolearn.sim.reach import ReachEnv


def tiny_policy(env, **kw):
    torch.manual_seed(0)
    cfg = FlowChunkPolicyConfig(**{"chunk_horizon": 6, "max_prefix": 3, "hidden_dims": [64, 64], "flow_steps": 4, **kw})
    return FlowChunkPolicy(env.observation_spec, env.action_spec, cfg)


def test_sampling_keeps_the_committed_prefix_exactly():
    env = ReachEnv()
    policy = tiny_policy(env)
    obs, _ = env.reset(seed=0)
    state = torch.as_tensor(np.stack([obs["state"]] * 3))
    prefix = torch.rand(3, 3, 6) * 2 - 1
    lens = torch.tensor([0, 2, 3])
    out = policy.sample(state, prefix, lens)
    assert out.shape == (3, 6, 6) and out.abs().max() <= 1
    torch.testing.assert_close(out[1, :2], prefix[1, :2], atol=1e-6, rtol=0)
    torch.testing.assert_close(out[2, :3], prefix[2, :3], atol=1e-6, rtol=0)
    assert not torch.allclose(out[1, 2], prefix[1, 2])


def test_loss_measures_only_positions_after_the_prefix():
    env = ReachEnv()
    policy = tiny_policy(env)
    state = torch.rand(4, 18)
    actions = torch.rand(4, 6, 6) * 2 - 1
    assert prefix_mask(torch.full((4,), 3), 6)[0].tolist() == [0, 0, 0, 1, 1, 1]
    with torch.no_grad():
        mean_part = ((policy.mean_chunk(policy.condition(state)) - actions) ** 2).sum(-1).mean(-1)
        # a prefix covering the whole chunk leaves nothing for the flow term: only the mean head's loss
        torch.testing.assert_close(policy.loss(state, actions, torch.full((4,), 6)), mean_part)
        assert (policy.loss(state, actions, torch.full((4,), 3)) > mean_part).all()


def test_chunk_pairs_pad_past_the_episode_end_and_mask_it():
    s, c, v = chunk_pairs([np.zeros(2)] * 3, [np.full(1, k, np.float32) for k in range(3)], horizon=4)
    assert c[:, :, 0].tolist() == [[0, 1, 2, 0], [1, 2, 0, 0], [2, 0, 0, 0]]
    assert v.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]]


def test_behaviour_cloning_fits_expert_demos():
    env = ReachEnv()
    data = expert_demos(env, 20, horizon=6, seed=100)
    assert data.successes == 20 and data.chunks.shape[1:] == (6, 6)
    policy = tiny_policy(env)
    losses = train_bc(policy, data, steps=400, batch_size=128, lr=2e-3)
    assert np.mean(losses[-50:]) < 0.5 * np.mean(losses[:50])
    # the sampled chunk's first action points the same way as the expert's
    obs, _ = env.reset(seed=7)
    expert = env.action_spec.to_normalised(env.expert_action())
    sampled = policy.sample(torch.as_tensor(obs["state"])[None])[0, 0].numpy()
    cos = sampled[:5] @ expert[:5] / (np.linalg.norm(sampled[:5]) * np.linalg.norm(expert[:5]) + 1e-9)
    assert cos > 0.5


def test_future_states_hold_the_last_state_past_the_episode_end():
    from robolearn.learner.bc import future_states
    f = future_states(np.arange(4, dtype=np.float32)[:, None], max_offset=2)
    assert f[:, :, 0].tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 3], [3, 3, 3]]


def test_mid_observation_policy_uses_the_later_state():
    env = ReachEnv()
    policy = tiny_policy(env, mid_observation=True)
    state, actions = torch.rand(4, 18), torch.rand(4, 6, 6) * 2 - 1
    with pytest.raises(ValueError, match="future states"):
        policy.loss(state, actions)
    assert policy.loss(state, actions, future=torch.rand(4, 4, 18)).shape == (4,)
    # one-stage (no mid state) == mid state equal to the first one at offset 0; a different mid state
    # changes the chunk
    torch.manual_seed(1)
    one = policy.sample(state)
    torch.manual_seed(1)
    same = policy.sample(state, mid_state=state, mid_offset=torch.zeros(4, dtype=torch.long))
    torch.manual_seed(1)
    other = policy.sample(state, mid_state=torch.rand(4, 18), mid_offset=torch.full((4,), 2))
    torch.testing.assert_close(one, same)
    assert not torch.allclose(one, other)
