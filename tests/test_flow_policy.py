"""The prefix-conditioned flow-matching chunk policy and behaviour cloning from expert demos."""

import numpy as np
import pytest
import torch

from robolearn.learner.bc import Validation, chunk_pairs, expert_demos, held_out_loss, train_bc
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


def test_sampling_starts_from_noise_of_the_configured_scale():
    """``noise_scale`` scales the drawn start noise (checked against the flow from a given noise); 0 is the flow from
    zero noise, the same chunk every time."""
    env = ReachEnv()
    obs, _ = env.reset(seed=0)
    state = torch.as_tensor(np.stack([obs["state"]] * 2))
    for scale in (0.5, 0.0):
        policy = tiny_policy(env, max_prefix=0, noise_scale=scale)
        with torch.no_grad():
            torch.manual_seed(7)
            drawn = torch.randn(2, 6, 6)
            torch.manual_seed(7)
            torch.testing.assert_close(policy.sample(state), policy.chunk_from_noise(state, scale * drawn))
            scaled, unscaled = policy.chunk_from_noise(state, scale * drawn), policy.chunk_from_noise(state, drawn)
            assert not torch.allclose(scaled, unscaled)
    assert torch.equal(policy.sample(state), policy.sample(state))
    with pytest.raises(ValueError, match="noise_scale must be in"):
        FlowChunkPolicyConfig(noise_scale=-0.1)


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


def test_validation_scores_held_out_demos_and_leaves_the_training_as_it_was():
    env = ReachEnv()
    data, held_out = expert_demos(env, 10, horizon=6, seed=100), expert_demos(env, 5, horizon=6, seed=900)
    plain, watched = tiny_policy(env), tiny_policy(env)
    train_bc(plain, data, steps=120, batch_size=64, lr=2e-3, log_every=40)
    history = train_bc(watched, data, steps=120, batch_size=64, lr=2e-3, log_every=40,
                       validation=Validation(held_out, batches=3, batch_size=32, seed=5))
    for a, b in zip(plain.state_dict().values(), watched.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # scoring the held-out demos drew nothing from the training's random streams
    assert [step for step, _ in history.validation] == [40, 80, 120] and len(history.losses) == 120
    assert history.validation[-1][1] < history.validation[0][1]
    # the last score, recomputed by hand: the same 3 batches of 32 held-out rows and flow noise, in eval mode
    rows = torch.randint(0, len(held_out.states), (3, 32), generator=torch.Generator().manual_seed(5))
    torch.manual_seed(5)
    with torch.no_grad():
        by_hand = np.mean([watched.loss(torch.as_tensor(held_out.states[r]), torch.as_tensor(held_out.chunks[r]),
                                        valid=torch.as_tensor(held_out.valid[r])).mean().item() for r in rows])
    assert history.validation[-1][1] == pytest.approx(by_hand, rel=1e-6)
    assert held_out_loss(watched, Validation(held_out, batches=3, batch_size=32, seed=5)) == history.validation[-1][1]
    assert not watched.training
    with pytest.raises(ValueError, match="batches and batch_size"):
        Validation(held_out, batches=0)


def test_chunk_pairs_pad_past_the_episode_end_and_mask_it():
    s, c, v = chunk_pairs([np.zeros(2)] * 3, [np.full(1, k, np.float32) for k in range(3)], horizon=4)
    assert c[:, :, 0].tolist() == [[0, 1, 2, 0], [1, 2, 0, 0], [2, 0, 0, 0]]
    assert v.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]]


def test_behaviour_cloning_fits_expert_demos():
    env = ReachEnv()
    data = expert_demos(env, 20, horizon=6, seed=100)
    assert data.successes == 20 and data.chunks.shape[1:] == (6, 6)
    policy = tiny_policy(env)
    losses = train_bc(policy, data, steps=400, batch_size=128, lr=2e-3).losses
    assert np.mean(losses[-50:]) < 0.5 * np.mean(losses[:50])
    # the sampled chunk's first action points the same way as the expert's
    obs, _ = env.reset(seed=7)
    expert = env.action_spec.to_normalised(env.expert_action())
    sampled = policy.sample(torch.as_tensor(obs["state"])[None])[0, 0].numpy()
    cos = sampled[:5] @ expert[:5] / (np.linalg.norm(sampled[:5]) * np.linalg.norm(expert[:5]) + 1e-9)
    assert cos > 0.5


def test_past_rows_hold_the_first_tick_before_the_episode_start():
    from robolearn.learner.bc import past_rows
    assert past_rows(4, max_offset=2).tolist() == [[0, 0, 0], [1, 0, 0], [2, 1, 0], [3, 2, 1]]
    assert past_rows(2, max_offset=2, start=10).tolist() == [[10, 10, 10], [11, 10, 10]]


def test_mid_observation_chunk_starts_at_the_mid_state_and_keeps_the_remaining_prefix():
    env = ReachEnv()
    policy = tiny_policy(env, mid_observation=True)
    state, actions = torch.rand(4, 18), torch.rand(4, 6, 6) * 2 - 1
    with pytest.raises(ValueError, match="past observations"):
        policy.loss(state, actions)
    assert policy.loss(state, actions, past=torch.rand(4, 4, 18)).shape == (4,)
    first, mid = np.random.rand(2, 18).astype(np.float32), np.random.rand(2, 18).astype(np.float32)
    prefix = np.random.uniform(-1, 1, (2, 3, 6)).astype(np.float32)
    torch.manual_seed(1)
    out = policy.predict_chunk({"state": first}, prefix, np.array([3, 3]), mid_observations={"state": mid},
                               mid_offsets=np.array([2, 0]))
    # row 0: the mid state is 2 ticks later, so 1 committed action is left; row 1: all 3
    np.testing.assert_allclose(out[0, :1], prefix[0, 2:3], atol=1e-6)
    np.testing.assert_allclose(out[1, :3], prefix[1], atol=1e-6)
    # a one-stage request is the mid state at offset 0 being the first one
    torch.manual_seed(1)
    one = policy.predict_chunk({"state": first}, prefix, np.array([3, 3]))
    torch.manual_seed(1)
    same = policy.predict_chunk({"state": first}, prefix, np.array([3, 3]), mid_observations={"state": first},
                                mid_offsets=np.array([0, 0]))
    np.testing.assert_allclose(one, same, atol=1e-6)


def test_two_stage_trunk_never_sees_the_mid_observation_and_the_head_does():
    """Late binding is honest only if the mid state reaches the light head alone: perturbing it leaves the trunk's
    features bit-identical (captured from inside the serving call) while the chunk changes."""
    from robolearn.inference.protocol import ChunkRequest
    from robolearn.inference.runner import ChunkPolicyRunner

    env = ReachEnv()
    policy = tiny_policy(env, mid_observation=True, head_dims=[16])
    seen = []
    policy.trunk.register_forward_hook(lambda module, inputs, output: seen.append(output.clone()))
    first = np.random.default_rng(0).uniform(-1, 1, 18).astype(np.float32)
    prefix = np.random.default_rng(1).uniform(-1, 1, (3, 6)).astype(np.float32)
    runner = ChunkPolicyRunner(policy, env.observation_spec, 6)
    chunks = []
    for shift in (0.0, 0.5):
        req = ChunkRequest(0, 10, {"state": first}, prefix, planned_delay=3, mid_ticks=1)
        trunk = runner.run_trunk([req])  # at request time: no mid observation exists yet
        req.mid_observation, req.mid_tick = {"state": first + shift}, 12
        torch.manual_seed(3)
        chunks.append(runner.run_head([req], trunk)[0])
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])
    assert not np.allclose(chunks[0].actions, chunks[1].actions)
    assert chunks[0].chunk_start == 12 and chunks[0].prefix_len == 1  # anchored at the mid tick
    np.testing.assert_allclose(chunks[0].actions[:1], prefix[2:3], atol=1e-6)
    # the same with the mid observation in hand from the start (one call given both): still the trunk's features
    # cannot depend on it, so nothing but the serving order keeps it from the trunk above
    seen.clear()
    direct = []
    for shift in (0.0, 0.5):
        torch.manual_seed(3)
        direct.append(policy.predict_chunk({"state": first[None]}, prefix[None], np.array([3]),
                                           mid_observations={"state": (first + shift)[None]},
                                           mid_offsets=np.array([2])))
    assert len(seen) == 2 and torch.equal(seen[0], seen[1])
    assert not np.allclose(direct[0], direct[1])
    flops = policy.trunk_head_flops()
    assert flops["trunk"] > 0 and flops["head"] > 0 and 0 < flops["head_share"] < 1


def test_the_delay_sweeps_two_stage_head_is_at_most_one_sixth_of_the_compute():
    """At the sweep's largest delay, d = 6 with mid_ticks = 1, late binding is real only if the head is <= 1/6."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    from delay_sweep import DELAYS, TWO_STAGE, make_policy

    from robolearn.sim.cube_tasks import PushCubeEnv

    env = PushCubeEnv()
    share = make_policy(env, TWO_STAGE, seed=0).trunk_head_flops()["head_share"]
    env.close()
    assert share <= 1 / max(DELAYS), share
