import queue
import threading
import time

import pytest

from robolearn.buffer.prefetch import Prefetcher
from robolearn.buffer.samplers import NotEnoughData


def test_prefetcher_hands_out_batches_made_on_another_thread():
    made_on = []

    def sample():
        made_on.append(threading.current_thread().name)
        return {"n": len(made_on)}

    p = Prefetcher(sample, depth=2)
    got = [p.get(timeout=5)["n"] for _ in range(5)]
    p.close()
    assert got == [1, 2, 3, 4, 5]
    assert set(made_on) == {"prefetch"}


def test_prefetcher_waits_while_the_buffer_is_too_small_and_reraises_real_errors():
    calls = {"n": 0}

    def sample():
        calls["n"] += 1
        if calls["n"] < 3:
            raise NotEnoughData("the buffer has no sampleable step yet")
        if calls["n"] == 3:
            return {"ok": True}
        raise ValueError("broken sampler")

    p = Prefetcher(sample, depth=1, retry_s=0.01)
    assert p.get(timeout=5) == {"ok": True}
    with pytest.raises(ValueError, match="broken sampler"):
        p.get(timeout=5)
    p.close()
    time.sleep(0.05)


def test_a_runtime_error_of_the_sampler_is_not_taken_for_missing_data():
    def sample():
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")  # what torch raises

    p = Prefetcher(sample, depth=1, retry_s=0.01)
    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        p.get(timeout=5)
    p.close()


def test_prefetcher_draws_nothing_until_batches_are_wanted():
    wanted, drawn = threading.Event(), []

    p = Prefetcher(lambda: drawn.append(1) or {"n": len(drawn)}, depth=2, retry_s=0.01, ready=wanted.is_set)
    time.sleep(0.2)
    assert drawn == []
    wanted.set()
    assert p.get(timeout=5) == {"n": 1}
    p.close()


def test_the_learners_first_batch_is_drawn_after_learning_starts(tmp_path):
    """The learner's own prefetcher, started on an almost empty buffer (as ``run_forever`` starts it): the first
    batch an update trains on is drawn once ``learning_starts`` steps are in, counted by the buffer's writer
    (``fill``), not by the prefetcher."""
    from robolearn.config import validate
    from robolearn.learner.loop import Learner
    from robolearn.rundir import RunDir
    from tests.test_cli_config import _cfg
    from tests.test_exact_resume import fill

    cfg = validate(_cfg(task="reach", run_name="starts", **{
        "policy.hidden_dims": "[32,32]", "algo.critic_hidden_dims": "[32,32]", "learner.batch_size": "32",
        "learner.learning_starts": "100"}))
    learner = Learner(RunDir(tmp_path), cfg, stop=None)
    fill(learner, episodes=1, first=1)  # 30 online steps: below learning_starts
    drawn_at: list[int] = []
    sample_batch = learner.algo.sample_batch

    def recording(buffer, *args, **kwargs):
        drawn_at.append(buffer.tables["online"].n)
        return sample_batch(buffer, *args, **kwargs)

    learner.algo.sample_batch = recording
    prefetch = learner.start_prefetch()
    time.sleep(0.3)
    with pytest.raises(queue.Empty):
        learner.update_once(prefetch)  # nothing due, nothing drawn
    fill(learner, episodes=6, first=2)  # 180 more
    learner.update_once(prefetch)
    prefetch.close()
    learner.buffer.close()
    assert drawn_at and min(drawn_at) >= 100, drawn_at


def test_an_error_in_ready_reaches_the_consumer():
    def ready():
        raise KeyError("buffer table 'online'")

    p = Prefetcher(lambda: {"n": 1}, depth=1, retry_s=0.01, ready=ready)
    with pytest.raises(KeyError, match="online"):
        p.get(timeout=5)
    p.close()


def test_a_get_wakes_a_thread_waiting_for_ready_at_once():
    wanted = threading.Event()
    p = Prefetcher(lambda: {"n": 1}, depth=1, retry_s=30.0, ready=wanted.is_set)  # it would look again in 30 s
    time.sleep(0.1)
    wanted.set()
    t0 = time.monotonic()
    assert p.get(timeout=5) == {"n": 1}
    assert time.monotonic() - t0 < 2.0
    p.close()
