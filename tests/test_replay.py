import numpy as np
import pytest

from robolearn.buffer.replay import Replay


def _episode(ep, n, terminated, start=0):
    steps = np.arange(start, start + n)
    b = {
        "obs.state": np.stack([np.full(2, 100 * ep + s, np.float32) for s in steps]),
        "reward": (steps + 1).astype(np.float32), "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool),
        "episode_id": np.full(n, ep, np.int64), "step": steps.astype(np.int32), "policy_version": np.ones(n, np.int64),
    }
    if terminated is not None:
        (b["terminated"] if terminated else b["truncated"])[-1] = True
        b["final_obs.state"] = np.full(2, 100 * ep + start + n, np.float32)
    return b


def _add(r, b):
    r.add("arm", b, np.repeat(b["obs.state"][:, :1], 1, axis=1))  # action = first obs element


def test_next_obs_links_steps_and_final_obs_and_readiness():
    r = Replay(obs_dim=2, action_dim=1, capacity=100)
    _add(r, _episode(0, 3, None))
    assert r.num_sampleable() == 2  # the last step waits for its successor
    _add(r, _episode(0, 2, True, start=3))
    assert r.num_sampleable() == 5
    np.testing.assert_array_equal(r.next_obs[:5, 0], [1, 2, 3, 4, 5])


def test_interleaved_episodes_link_within_their_own_episode():
    r = Replay(obs_dim=2, action_dim=1, capacity=100)
    _add(r, _episode(0, 2, None))
    _add(r, _episode(1, 2, None))
    _add(r, _episode(0, 1, True, start=2))
    np.testing.assert_array_equal(r.next_obs[:2, 0], [1, 2])   # episode 0 step 1 -> step 2 (slot 4)
    assert not r.has_next[3]                                       # episode 1 still open


@pytest.mark.parametrize("terminated", [True, False])
def test_three_step_windows_match_hand_computed_returns(terminated):
    gamma = 0.5
    r = Replay(obs_dim=2, action_dim=1, capacity=100, seed=1)
    _add(r, _episode(0, 4, terminated))  # rewards 1, 2, 3, 4; obs 0..3, final obs 4
    b = r.sample(64, horizon=3, gamma=gamma)
    for obs, act, rew, disc, nxt in zip(b["obs"][:, 0], b["action"], b["reward"], b["discount"], b["next_obs"][:, 0]):
        i = int(obs)
        steps = list(range(i, min(i + 3, 4)))
        assert rew == pytest.approx(sum(gamma**k * (s + 1) for k, s in enumerate(steps)))
        expected_disc = 0.0 if (terminated and steps[-1] == 3) else gamma ** len(steps)
        assert disc == pytest.approx(expected_disc)
        assert nxt == steps[-1] + 1
        assert list(act) == [float(s) for s in steps] + [float(steps[-1])] * (3 - len(steps))
