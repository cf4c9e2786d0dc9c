"""Batches prepared on a background thread while the learner updates on the previous one."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class Prefetcher:
    """Calls ``sample()`` on a daemon thread and keeps up to ``depth`` batches ready.

    ``get`` re-raises an exception from the sampler in the caller's thread, so a sampling error is
    never swallowed. ``sample`` may raise ``LookupError``-free ``RuntimeError`` while the buffer is still
    too small: the thread then retries after ``retry_s``.
    """

    def __init__(self, sample: Callable[[], dict], depth: int = 2, retry_s: float = 0.05) -> None:
        self._sample = sample
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._retry_s = retry_s
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._sample()
            except RuntimeError:  # not enough data yet
                self._stop.wait(self._retry_s)
                continue
            except Exception as exc:  # handed to the consumer
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue

    def get(self, timeout: float | None = None) -> dict:
        item = self._queue.get(timeout=timeout)
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
