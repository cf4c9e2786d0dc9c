"""Crash safety, corruption handling, eviction and the RAM budget of the persistent buffer."""

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from robolearn.buffer.log import _parse_at
from robolearn.buffer.replay_buffer import ReplayBuffer
from tests.buffer_data import ACT, OBS, batch, obs_at


def _buf(path, **kw):
    return ReplayBuffer(path, OBS, ACT, **{"capacity": 10_000, **kw})


class _LiveSteps:
    """(episode, step) -> (state, image, action) of every live step, read through the buffer."""

    def __init__(self, buf):
        self.buf = buf
        self.where = {}
        for t in buf.tables.values():
            gids = np.arange(max(0, t.n - t.capacity) if t.ring else 0, t.n)
            s = t.slot(gids)
            for g, e, st in zip(gids, t.cols["episode_id"][s], t.cols["step"][s]):
                self.where[(int(e), int(st))] = (t, int(g))

    def items(self):
        return ((k, self[k]) for k in self.where)

    def __getitem__(self, key):
        t, g = self.where[key]
        s = t.slot(g)
        img = self.buf._decompress("front", [self.buf._blob(t, "front", g)])[0]
        return t.cols["obs.state"][s].copy(), img, t.cols["action"][s].copy()


_live_steps = _LiveSteps


def test_episode_cut_by_a_crash_is_kept_and_marked_truncated_once(tmp_path):
    buf = _buf(tmp_path)
    buf.add("r", batch(0, 0, 4, end="terminated"))
    buf.add("r", batch(1, 0, 3))
    buf.flush()
    del buf  # the process dies: episode 1 never ended
    again = _buf(tmp_path)
    assert again.recovered_episodes == [("r", 1)]
    ep = [e for e in again.episodes.values() if e.episode_id == 1][0]
    assert ep.ended and ep.truncated_by_recovery and ep.n_steps == 3
    t = again.tables["online"]
    assert t.cols["truncated"][t.slot(ep.last_gid)]
    again.check_consistency()
    again.close()
    third = _buf(tmp_path)  # the recovery itself was made durable
    assert third.recovered_episodes == [] and third.info()["episodes_recovered_after_crash"] == 1


def test_episode_closed_at_a_recovery_continues_when_its_actor_outlived_the_learner(tmp_path):
    buf = _buf(tmp_path)
    buf.add("r", batch(1, 0, 3))
    buf.flush()
    del buf  # the learner dies; the actor goes on with episode 1
    again = _buf(tmp_path)
    assert again.recovered_episodes == [("r", 1)]
    again.add("r", batch(1, 3, 2, end="terminated"))  # the actor's next batch: the episode reopens
    ep = again.episode("r", 1)
    assert ep.ended and not ep.truncated_by_recovery and ep.n_steps == 5
    t = again.tables["online"]
    steps = t.cols["truncated"][t.slot(np.arange(ep.first_gid, ep.last_gid + 1))]
    assert not steps.any()  # step 2 is no longer the end
    assert again.partition_sizes()["online"] == 5  # step 2 links to step 3: every step sampleable
    again.check_consistency()
    again.close()
    third = _buf(tmp_path)  # the log replays batch, recovery close, batch: the same episode
    ep = third.episode("r", 1)
    assert ep.ended and not ep.truncated_by_recovery and ep.n_steps == 5 and third.partition_sizes()["online"] == 5
    third.check_consistency()


def test_a_batch_that_skips_steps_is_a_gap_and_an_ended_episode_takes_no_more(tmp_path):
    import pytest

    from robolearn.buffer.replay_buffer import EpisodeGap
    from robolearn.specs import SpecError

    buf = _buf(tmp_path)
    buf.add("r", batch(1, 0, 3))
    with pytest.raises(EpisodeGap):
        buf.add("r", batch(1, 5, 3))  # steps 3-4 are still on their way
    with pytest.raises(EpisodeGap):
        buf.add("r", batch(2, 4, 3))  # a new episode must start at step 0
    with pytest.raises(SpecError) as err:
        buf.add("r", batch(1, 1, 3))  # overlaps what is stored: never taken, not even later
    assert not isinstance(err.value, EpisodeGap) and "stored already" in str(err.value)
    buf.add("r", batch(1, 3, 2, end="terminated"))
    with pytest.raises(SpecError) as err:
        buf.add("r", batch(1, 5, 1))
    assert not isinstance(err.value, EpisodeGap) and "already ended" in str(err.value)


def test_an_episode_its_actor_cut_is_closed_durably(tmp_path):
    buf = _buf(tmp_path)
    buf.add("r", batch(1, 0, 3))
    buf.close_episode("r", 1)
    ep = buf.episode("r", 1)
    assert ep.ended and buf.partition_sizes()["online"] == 2  # the last step has no next observation
    buf.close()
    again = _buf(tmp_path)
    assert again.recovered_episodes == [] and again.episode("r", 1).ended


def test_corrupt_record_is_reported_skipped_and_other_episodes_load(tmp_path):
    buf = _buf(tmp_path, segment_mb=0.002)  # tiny segments: several files
    for ep in range(6):
        buf.add("r", batch(ep, 0, 3))
        buf.add("r", batch(ep, 3, 3, end="terminated"))
    buf.close()
    segs = sorted(tmp_path.glob("seg-*.log"))
    assert len(segs) >= 3
    victim = segs[1]
    data = bytearray(victim.read_bytes())
    first_end = _parse_at(bytes(data), 0)[0]
    data[first_end - 5] ^= 0xFF  # flip one byte inside the first record's arrays
    victim.write_bytes(bytes(data))
    again = _buf(tmp_path)
    problems = again.info()["problems"]
    assert any(victim.name in p and "checksum mismatch" in p for p in problems), problems
    again.check_consistency()
    complete = {ep.episode_id for ep, _ in again.iter_episodes() if not ep.truncated_by_recovery}
    assert len(complete) == 5  # only the episode with the bad record is affected
    steps = _live_steps(again)
    for (ep, step), (state, img, _action) in steps.items():
        np.testing.assert_array_equal(state, obs_at(ep, step)["state"])
        np.testing.assert_array_equal(img, obs_at(ep, step)["front"])


def test_truncated_segment_is_reported_and_later_segments_load(tmp_path):
    buf = _buf(tmp_path, segment_mb=0.002)
    for ep in range(6):
        buf.add("r", batch(ep, 0, 6, end="terminated"))
    buf.close()
    segs = sorted(tmp_path.glob("seg-*.log"))
    victim = segs[0]
    victim.write_bytes(victim.read_bytes()[:-100])  # cut inside its last record
    again = _buf(tmp_path)
    assert any(victim.name in p and "skipped" in p for p in again.info()["problems"])
    assert any(e.episode_id == 5 and e.ended for e in again.episodes.values())  # a later segment loaded
    again.check_consistency()


def test_capacity_evicts_oldest_online_steps_and_never_demos(tmp_path):
    buf = _buf(tmp_path, capacity=1000, seed=0)
    buf.add("d", batch(999, 0, 50, end="terminated"), partition="demo")
    for ep in range(15):
        buf.add("r", batch(ep, 0, 100, end="truncated"))
    assert buf.tables["online"].n == 1500
    b = buf.sample(5000, gamma=1.0, with_info=True)
    online = b["partition"] == 0
    assert b["obs.state"][online, 0].min() >= 5  # episodes 0..4 (the oldest 500 steps) are gone
    assert np.any(b["obs.state"][~online, 0] == 999)  # demos stay
    assert np.all(b["next_obs.state"][:, 1] == b["obs.state"][:, 1] + 1)
    buf.check_consistency()
    assert {e.episode_id for e, _ in buf.iter_episodes()} == set(range(5, 15)) | {999}


def test_ram_budget_pages_old_images_out_and_reads_them_back_from_disk(tmp_path):
    buf = _buf(tmp_path, ram_budget_mb=0.001)  # ~1 KB of compressed images in RAM
    for ep in range(20):
        buf.add("r", batch(ep, 0, 10, end="terminated"))
    assert buf.ram_image_bytes <= 1100
    assert sum(b is None for b in buf.tables["online"].blobs["front"][:200]) > 100  # most paged out
    b = buf.sample(300, gamma=1.0)
    for i in range(300):
        ep, step = int(b["obs.state"][i, 0]), int(b["obs.state"][i, 1])
        np.testing.assert_array_equal(b["obs.front"][i], obs_at(ep, step)["front"])
        np.testing.assert_array_equal(b["next_obs.front"][i], obs_at(ep, step + 1)["front"])


# 8 kills in the fast tier (about 18 s), 20 in the slow one (make test stays under its 15 minutes)
@pytest.mark.parametrize("kills", [8, pytest.param(20, marks=pytest.mark.slow)])
def test_sigkill_at_random_points_loses_no_acknowledged_transition(tmp_path, kills):
    rng = np.random.default_rng(0)
    acked: dict[int, int] = {}  # episode -> last acknowledged step
    for round_ in range(kills):
        proc = subprocess.Popen([sys.executable, "-m", "tests.fault_writer", str(tmp_path), str(1000 * round_)],
                                stdout=subprocess.PIPE, text=True)
        first = proc.stdout.readline()  # wait until it is writing
        assert first.startswith("ack"), first
        time.sleep(float(rng.uniform(0.02, 0.4)))
        proc.send_signal(signal.SIGKILL)
        out = first + proc.stdout.read()
        proc.wait()
        for line in out.splitlines():
            _, ep, step = line.split()
            acked[int(ep)] = max(acked.get(int(ep), -1), int(step))
        buf = _buf(tmp_path, capacity=1_000_000)
        buf.check_consistency()
        live = _live_steps(buf)
        for ep, last in acked.items():
            for step in range(last + 1):
                state, img, action = live[(ep, step)]
                np.testing.assert_array_equal(state, obs_at(ep, step)["state"])
                np.testing.assert_array_equal(img, obs_at(ep, step)["front"])
                assert action.tolist() == [step, -step]
        assert all(e.ended for e in buf.episodes.values())  # cut episodes were closed as truncated
        buf.close()
    assert sum(last + 1 for last in acked.values()) > 200
