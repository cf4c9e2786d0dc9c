import numpy as np
import pytest

from robolearn.actor.action_queue import ActionQueue


def test_each_tick_pops_its_own_action_once_in_order():
    q = ActionQueue()
    q.push_chunk(10, np.arange(4, dtype=np.float32)[:, None], chunk_id=1, policy_version=3)
    got = [q.pop(t) for t in range(10, 14)]
    assert [g.tick for g in got] == [10, 11, 12, 13]
    assert [g.chunk_index for g in got] == [0, 1, 2, 3]
    assert all(g.policy_version == 3 for g in got)
    with pytest.raises(ValueError, match="already executed"):
        q.pop(13)  # never twice


def test_stale_actions_are_dropped_and_empty_is_a_stall():
    q = ActionQueue()
    q.push_chunk(0, np.zeros((5, 1), np.float32), chunk_id=0, policy_version=1)
    item = q.pop(3)
    assert item.tick == 3 and q.dropped_stale == 3
    assert q.pop(7) is None and q.dropped_stale == 4


def test_newer_chunk_replaces_overlapping_ticks():
    q = ActionQueue()
    q.push_chunk(0, np.zeros((4, 1), np.float32), chunk_id=0, policy_version=1)
    q.push_chunk(2, np.ones((4, 1), np.float32), chunk_id=1, policy_version=2)
    assert [q.pop(t).chunk_id for t in range(6)] == [0, 0, 1, 1, 1, 1]
