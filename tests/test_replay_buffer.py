import numpy as np
import pytest

from robolearn.buffer.replay_buffer import ReplayBuffer
from robolearn.buffer.samplers import FINAL_IDS, NotEnoughData
from robolearn.specs import SpecError
from tests.buffer_data import ACT, OBS, batch, obs_at


def _buf(path, **kw):
    return ReplayBuffer(path, OBS, ACT, **{"capacity": 10_000, **kw})


def _steps(buf):
    """(table, episode_id, step) -> slot, for every live step."""
    out = {}
    for name, t in buf.tables.items():
        gids = np.arange(max(0, t.n - t.capacity) if t.ring else 0, t.n)
        for g in gids:
            s = t.slot(g)
            out[(name, int(t.cols["episode_id"][s]), int(t.cols["step"][s]))] = s
    return out


def test_reopen_restores_every_value_and_images_stay_compressed_uint8(tmp_path):
    buf = _buf(tmp_path)
    buf.add("r", batch(0, 0, 5))
    buf.add("r", batch(0, 5, 3, end="terminated", success=True))
    buf.add("r", batch(1, 0, 4, end="truncated"))
    raw_image_bytes = 12 * 8 * 8 * 3
    assert buf.ram_image_bytes < raw_image_bytes  # held lz4-compressed
    buf.close()
    again = _buf(tmp_path)
    again.check_consistency()
    episodes = {ep.episode_id: (ep, d) for ep, d in again.iter_episodes()}
    assert set(episodes) == {0, 1} and episodes[0][0].success and not episodes[1][0].success
    ep0 = episodes[0][1]
    for s in range(8):
        np.testing.assert_array_equal(ep0["obs.front"][s], obs_at(0, s)["front"])
        np.testing.assert_array_equal(ep0["obs.state"][s], obs_at(0, s)["state"])
        assert ep0["action"][s].tolist() == [s, -s] and ep0["tick"][s] == s and ep0["t_act"][s] == 0.5 * s + 0.01
    assert again.info()["episodes_committed"] == 2 and not again.info()["problems"]


@pytest.mark.parametrize("terminated", [True, False])
def test_windows_and_n_step_returns_match_hand_computed(tmp_path, terminated):
    gamma = 0.5
    buf = _buf(tmp_path, seed=1)
    buf.add("r", batch(0, 0, 4, end="terminated" if terminated else "truncated"))  # rewards 1..4
    b = buf.sample(64, horizon=3, gamma=gamma)
    for i in range(64):
        t = int(b["obs.state"][i, 1])
        steps = list(range(t, min(t + 3, 4)))
        assert b["reward"][i] == pytest.approx(sum(gamma**k * (s + 1) for k, s in enumerate(steps)))
        ends_episode = steps[-1] == 3
        assert b["discount"][i] == pytest.approx(0.0 if terminated and ends_episode else gamma ** len(steps))
        np.testing.assert_array_equal(b["next_obs.state"][i], obs_at(0, steps[-1] + 1)["state"])
        np.testing.assert_array_equal(b["next_obs.front"][i], obs_at(0, steps[-1] + 1)["front"])
        np.testing.assert_array_equal(b["obs.front"][i], obs_at(0, t)["front"])
        assert b["action"][i, :, 0].tolist() == [float(s) for s in steps] + [float(steps[-1])] * (3 - len(steps))
        assert b["action_mask"][i].tolist() == [True] * len(steps) + [False] * (3 - len(steps))


def test_open_episode_steps_wait_for_their_next_observation(tmp_path):
    buf = _buf(tmp_path)
    buf.add("r", batch(0, 0, 3))
    assert buf.partition_sizes()["online"] == 2  # step 2 has no next observation yet
    b = buf.sample(50, horizon=4, gamma=1.0)
    assert set(b["obs.state"][:, 1].astype(int)) <= {0, 1}
    assert b["action_mask"].sum(axis=1).max() == 2  # windows stop before step 2


def test_interleaved_robots_link_within_their_own_episodes(tmp_path):
    buf = _buf(tmp_path)
    buf.add("a", batch(0, 0, 2))
    buf.add("b", batch(0, 0, 2))
    buf.add("a", batch(0, 2, 1, end="terminated"))
    buf.check_consistency()
    b = buf.sample(200, horizon=1, gamma=1.0)
    assert np.all(b["next_obs.state"][:, 1] == b["obs.state"][:, 1] + 1)


def test_rejects_gaps_steps_after_the_end_and_mixed_episodes(tmp_path):
    buf = _buf(tmp_path)
    buf.add("r", batch(0, 0, 2))
    with pytest.raises(SpecError, match="not consecutive"):
        buf.add("r", batch(0, 5, 2))
    buf.add("r", batch(0, 2, 1, end="terminated"))
    with pytest.raises(SpecError, match="already ended"):
        buf.add("r", batch(0, 3, 1))
    mixed = batch(1, 0, 2)
    mixed["episode_id"][1] = 2
    with pytest.raises(SpecError, match="one episode"):
        buf.add("r", mixed)
    buf.check_consistency()


def test_observation_ids_name_one_observation_each_and_the_same_one_on_every_draw(tmp_path):
    """The ids a frozen encoder's features are kept by (DSRL), checked against the observations' own contents (every
    observation in buffer_data is unique): both tables (their gids both start at 0), episode ends, a ring that
    overwrote itself."""
    buf = _buf(tmp_path, seed=4, capacity=24)
    content: dict[int, tuple] = {}

    def draw() -> None:
        for horizon in (1, 3):
            b = buf.sample(512, horizon=horizon, with_ids=True)
            for side in ("obs", "next_obs"):
                for i, state, front in zip(b[f"{side}_id"].tolist(), b[f"{side}.state"], b[f"{side}.front"]):
                    seen = (*state.tolist(), front.tobytes())
                    assert content.setdefault(i, seen) == seen, f"id {i} named two observations"

    for ep in range(2):
        buf.add("r", batch(ep, 0, 8, end="terminated" if ep % 2 else "truncated"))
    buf.add("demo", batch(7, 0, 6, end="terminated", success=True), partition="demo")
    draw()  # before the ring wraps, and again after: an id must not move to the step that took a slot over
    buf.add("r", batch(2, 0, 8, end="terminated"))
    buf.add("r", batch(9, 0, 4))  # 28 online steps in a ring of 24: episode 0's first 4 are gone
    draw()
    assert len(set(content.values())) == len(content), "one observation drawn under two ids"
    steps = {(ep, s) for ep in range(3) for s in range(8)} | {(9, s) for s in range(4)}
    finals = {(0, 8), (1, 8), (2, 8), (7, 6)}
    demo = {(7, s) for s in range(6)}
    assert {v[:2] for v in content.values()} == steps | finals | demo  # each drawn (1,024 draws of 22, then 34)
    assert {v[:2] for i, v in content.items() if i >= FINAL_IDS} == finals


def test_partition_mix_age_weights_and_success_filter(tmp_path):
    buf = _buf(tmp_path, seed=3)
    for ep in range(10):
        buf.add("r", batch(ep, 0, 20, end="terminated", version=ep + 1, success=ep % 2 == 0))
    buf.add("r", batch(100, 0, 20, end="truncated", intervention=True, reward=0.0))
    buf.add("demo", batch(200, 0, 20, end="terminated", success=True), partition="demo")
    sizes = buf.partition_sizes()
    assert sizes == {"online": 200, "intervention": 20, "demo": 20}

    b = buf.sample(4000, mix={"online": 0.5, "demo": 0.25, "intervention": 0.25}, with_info=True)
    frac = np.bincount(b["partition"], minlength=3) / 4000
    assert frac == pytest.approx([0.5, 0.25, 0.25], abs=0.03)
    assert np.all(b["intervention"][b["partition"] == 1])
    uniform = buf.sample(4000, with_info=True)
    assert np.bincount(uniform["partition"], minlength=3) / 4000 == pytest.approx([200 / 240, 20 / 240, 20 / 240],
                                                                                   abs=0.03)

    aged = buf.sample(4000, mix={"online": 1.0}, age_decay=0.5, age_uniform=0.0, current_version=10, with_info=True)
    newest = np.mean(aged["policy_version"] == 10)
    assert newest == pytest.approx(0.5, abs=0.04)  # weights 1, 1/2, 1/4, ... over equal-sized versions
    with pytest.raises(ValueError, match="unknown partition"):
        buf.sample(4, mix={"offline": 1.0})

    good = buf.sample(2000, success_only=True, with_info=True)
    eps = set(good["obs.state"][:, 0].astype(int).tolist())
    assert eps == {0, 2, 4, 6, 8, 200} and good["episode_success"].all()
    returned = buf.sample(2000, min_return=1.0)  # Hi-ORS acceptance: every episode but the 0-return one
    assert set(returned["obs.state"][:, 0].astype(int).tolist()) == set(range(10)) | {200}


def test_return_filter_follows_new_episodes_interleaved_robots_and_ring_eviction(tmp_path):
    """The return filter's cached candidates must never serve a stale answer: a newly ended episode joins,
    steps of another robot interleaved in the same gid range stay out, and overwritten steps are not drawn."""
    buf = _buf(tmp_path, capacity=64, seed=1)
    buf.add("a", batch(0, 0, 10))                            # gids 0-9
    buf.add("b", batch(1, 0, 10, reward=0.0))                # gids 10-19, inside episode 0's gid range
    buf.add("a", batch(0, 10, 10, end="terminated"))         # gids 20-29
    buf.add("b", batch(1, 10, 10, end="terminated", reward=0.0))
    assert set(buf.sample(500, min_return=1.0)["obs.state"][:, 0].astype(int).tolist()) == {0}
    buf.add("a", batch(2, 0, 20, end="terminated"))          # gids 40-59
    assert set(buf.sample(500, min_return=1.0)["obs.state"][:, 0].astype(int).tolist()) == {0, 2}

    def drawn_steps_of_episode_0():
        state = buf.sample(2000, min_return=1.0)["obs.state"]
        assert set(state[:, 0].astype(int).tolist()) == {0, 2}  # an overwritten slot would show episode 3
        return set(state[state[:, 0] == 0, 1].astype(int).tolist())

    buf.add("c", batch(3, 0, 10))  # an open episode: no episode ends, but the ring overwrites gids 0-5
    assert drawn_steps_of_episode_0() == set(range(6, 20))
    buf.add("c", batch(3, 10, 20))  # gids 0-25 overwritten: episode 0 keeps gids 26-29, its steps 16-19
    assert drawn_steps_of_episode_0() == set(range(16, 20))
    buf.check_consistency()


def test_return_filter_never_returns_a_short_batch_when_its_cached_episodes_were_overwritten(tmp_path):
    buf = _buf(tmp_path, capacity=64, seed=2)
    buf.add("a", batch(0, 0, 3, end="terminated"))           # gids 0-2, the only episode that passes
    for ep in range(1, 62):
        buf.add("a", batch(ep, 0, 1, end="terminated", reward=0.0))  # gids 3-63
    assert len(buf.sample(64, min_return=1.0)["obs.state"]) == 64
    buf.add("b", batch(100, 0, 3))  # overwrites gids 0-2 while still in the same eighth of the ring
    with pytest.raises(NotEnoughData, match="passes the success/return filter"):
        buf.sample(64, min_return=1.0)
