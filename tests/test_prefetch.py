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
