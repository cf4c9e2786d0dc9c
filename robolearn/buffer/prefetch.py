"""Batches prepared on a background thread while the learner updates on the previous one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from robolearn.buffer.samplers import NotEnoughData


class Prefetcher:
    """Calls ``sample()`` on a daemon thread and keeps up to ``depth`` batches ready, drawing only while
    ``ready()`` says batches are wanted (the learner: while an update is due). A batch drawn earlier would come
    from whatever the buffer held then: before ``learning_starts``, a handful of steps drawn again and again.

    ``get`` re-raises an exception from the sampler or from ``ready`` in the caller's thread, so an error is
    never swallowed. Only ``NotEnoughData`` (the buffer is still too small for the request) is retried,
    after ``retry_s``; the consumer then sees ``queue.Empty`` from ``get`` until a batch is ready. A thread
    waiting for ``ready`` looks again at once when ``get`` is called (the caller wants a batch now), else every
    ``retry_s``.
    """

    def __init__(self, sample: Callable[[], dict], depth: int = 2, retry_s: float = 0.05,
                 ready: Callable[[], bool] = lambda: True) -> None:
        self._sample = sample
        self._ready = ready
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by get() and close(): look again now
        self._retry_s = retry_s
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before looking: a get() from here on wakes the wait below
            try:
                if not self._ready():
                    self._wake.wait(self._retry_s)
                    continue
                item = self._sample()
            except NotEnoughData:
                self._wake.wait(self._retry_s)
                continue
            except Exception as exc:  # noqa: BLE001 -- not swallowed: get() re-raises it in the consumer
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def get(self, timeout: float | None = None) -> dict:
        self._wake.set()
        item = self._queue.get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=2)
