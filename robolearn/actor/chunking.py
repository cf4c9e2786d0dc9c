"""Asynchronous action-chunk execution: when to ask for the next chunk and how to splice it in.

Per control tick ``t`` the ``ChunkExecutor`` (never blocks):

    1. splice in every chunk that has arrived            (measure its delay in ticks)
    2. if the scheduler says so, send a request          (observation at t, committed prefix, planned delay)
    3. pop the action for tick t                         (none queued: a stall, hold the last safe command)

Modes (``ChunkingConfig.mode``), docs/algorithms.md, "Latency-aware chunk scheduling":

    sync           ask only when the queue is empty; the robot holds still while the policy thinks and
                   the chunk starts when it arrives
    naive_async    lerobot's async inference: ask when queued/H <= queue_threshold, blend overlapping
                   ticks (old_weight * old + (1 - old_weight) * new); no delay model, no prefix
    latency_aware  keep a sliding window of measured delays; ask when the queue would run out within
                   the ``delay_quantile`` of them (+ margin), so the answer arrives before it does.
                   The request carries the committed actions that execute meanwhile (state
                   augmentation); ``splice``: ``prefix`` (the chunk agrees with the committed prefix,
                   taken from where the prefix ends), ``replace`` or ``blend``. With
                   ``mid_observation_ticks`` = d_RL > 0 the request is two-stage (ARLI late binding):
                   d_RL ticks before the chunk is due the executor sends the then-current observation
                   and the policy finishes the chunk with it. With ``max_in_flight`` > 1 requests are
                   pipelined: the next chunk is asked for so that it is due s actions after the newest one
                   is expected, whether or not that one has arrived, so a server that answers several at once keeps the
                   robot fed when inference takes more than H - s ticks (one request at a time stalls
                   once it takes more than H / 2).

Units: ticks everywhere; actions in the queue are robot units, the policy sees normalised ones.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from robolearn.actor.action_queue import ActionQueue, TimedAction
from robolearn.clock import Clock
from robolearn.inference.client import ChunkClient
from robolearn.inference.protocol import ChunkRequest, ChunkResponse
from robolearn.specs import ActionSpec

MODES = ("sync", "naive_async", "latency_aware")
SPLICES = ("prefix", "replace", "blend")


@dataclass
class ChunkingConfig:
    """``actor.chunking.*``."""

    mode: str = "latency_aware"
    splice: str = "prefix"          # latency_aware only; naive_async always blends, sync replaces
    queue_threshold: float = 0.5    # naive_async: ask when queued / H <= this (lerobot's chunk_size_threshold)
    old_weight: float = 0.3         # blend: weight of the already queued action
    delay_quantile: float = 0.95    # latency_aware: plan for this quantile of measured delays
    delay_window: int = 50          # requests remembered by the delay estimate
    initial_delay: int = 2          # ticks assumed before anything was measured
    margin: int = 0                 # extra ticks of slack when asking
    max_prefix: int = 6             # the most committed actions sent (the policy's max_prefix)
    execute_horizon: int = 0        # s: each chunk runs s actions (0 = all H); sync asks after s actions,
                                    # latency_aware asks planned-delay ticks before s actions since arrival
    request_timeout: int = 100      # ticks without an answer after which a request is re-sent
    mid_observation_ticks: int = 0  # latency_aware: d_RL, send a mid-inference observation this many ticks
                                    # before the chunk is due (0 = one-stage requests)
    max_in_flight: int = 1          # latency_aware: requests in flight at once (> 1: pipelined)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"chunking.mode must be one of {MODES}, got {self.mode!r}")
        if self.splice not in SPLICES:
            raise ValueError(f"chunking.splice must be one of {SPLICES}, got {self.splice!r}")
        if not 0 < self.queue_threshold <= 1:
            raise ValueError(f"chunking.queue_threshold must be in (0, 1], got {self.queue_threshold}")
        if not 0 <= self.old_weight <= 1:
            raise ValueError(f"chunking.old_weight must be in [0, 1], got {self.old_weight}")
        if not 0 < self.delay_quantile <= 1:
            raise ValueError(f"chunking.delay_quantile must be in (0, 1], got {self.delay_quantile}")
        if self.execute_horizon < 0:
            raise ValueError(f"chunking.execute_horizon must be >= 0, got {self.execute_horizon}")
        if self.delay_window < 1 or self.initial_delay < 0 or self.margin < 0 or self.max_prefix < 0:
            raise ValueError("chunking.delay_window must be >= 1; initial_delay, margin, max_prefix >= 0")
        if self.request_timeout < 1:
            raise ValueError(f"chunking.request_timeout must be >= 1, got {self.request_timeout}")
        if self.mid_observation_ticks < 0:
            raise ValueError(f"chunking.mid_observation_ticks must be >= 0, got {self.mid_observation_ticks}")
        if self.mid_observation_ticks and self.mode != "latency_aware":
            raise ValueError("chunking.mid_observation_ticks needs chunking.mode=latency_aware")
        if self.max_in_flight < 1 or (self.max_in_flight > 1 and self.mode != "latency_aware"):
            raise ValueError(f"chunking.max_in_flight must be >= 1, and > 1 only with mode=latency_aware; got "
                             f"{self.max_in_flight} with mode={self.mode}")
        if self.max_in_flight > 1 and self.mid_observation_ticks:
            # a later request may load newer weights between an earlier one's trunk and its head
            raise ValueError("chunking.max_in_flight > 1 (pipelined) and mid_observation_ticks > 0 (two-stage) "
                             "cannot be combined")


class DelayEstimator:
    """Sliding window of measured inference delays (ticks); ``planned()`` is the chosen quantile."""

    def __init__(self, window: int, quantile: float, initial: int) -> None:
        self.samples: deque[int] = deque(maxlen=window)
        self.quantile = quantile
        self._planned = initial  # recomputed when a delay is measured, read every tick

    def add(self, ticks: int) -> None:
        self.samples.append(int(ticks))
        self._planned = int(np.ceil(np.quantile(np.fromiter(self.samples, float), self.quantile)))

    def planned(self) -> int:
        return self._planned


@dataclass
class ExecutorMetrics:
    ticks: int = 0
    stalled_ticks: int = 0
    requests: int = 0
    chunks: int = 0
    resent: int = 0
    delays: Counter = field(default_factory=Counter)          # measured delay (ticks) -> count
    horizon: int = 1

    def utilisation(self) -> float:
        """Mean fraction of each received chunk's actions that were executed (every tick that did not
        stall executed one chunk action)."""
        if not self.chunks:
            return 0.0
        return (self.ticks - self.stalled_ticks) / (self.chunks * self.horizon)

    def summary(self) -> dict:
        return {"ticks": self.ticks, "stalled_ticks": self.stalled_ticks, "requests": self.requests,
                "chunks": self.chunks, "resent_requests": self.resent,
                "delay_histogram": {str(k): v for k, v in sorted(self.delays.items())},
                "chunk_utilisation": round(self.utilisation(), 4)}


@dataclass
class InFlight:
    """A request the executor waits on."""

    request: ChunkRequest
    sent_at: int                # tick it was sent
    expected_at: int            # sent_at + the delay planned then: when the scheduler counts on its chunk
    mid_due: int | None = None  # two-stage: the tick to send its mid observation (None: sent, or one-stage)


class ChunkExecutor:
    """One robot's chunk queue, scheduler and splicer around a policy client (``inference.client``)."""

    def __init__(self, client: ChunkClient, action_spec: ActionSpec, horizon: int, config: ChunkingConfig | None = None,
                 robot_id: str = "", before_request: Callable[[], None] | None = None,
                 on_chunk: Callable[[int, np.ndarray], None] | None = None,
                 while_waiting: Callable[[], bool] | None = None) -> None:
        self.client = client
        self.before_request = before_request  # e.g. load the newest weights: each chunk is one version
        self.on_chunk = on_chunk              # (start tick, (H, A) robot units) of each chunk received
        self.while_waiting = while_waiting    # called every 20 ms while an episode waits for its first chunk
                                              # (real clock); False: stop waiting (the process is stopping)
        self.action_spec = action_spec
        self.horizon = horizon
        self.cfg = config or ChunkingConfig()
        self.robot_id = robot_id
        self.queue = ActionQueue()
        self.delay = DelayEstimator(self.cfg.delay_window, self.cfg.delay_quantile, self.cfg.initial_delay)
        self.metrics = ExecutorMetrics(horizon=horizon)
        self._next_id = 0
        self._in_flight: dict[int, InFlight] = {}  # request id -> its request, oldest first
        self._arrived = 0                 # tick the newest chunk arrived
        if self.cfg.mid_observation_ticks and not getattr(client, "takes_mid_observation", False):
            raise ValueError(f"chunking.mid_observation_ticks needs a client that takes mid-inference "
                             f"observations; {type(client).__name__} does not")

    # --- scheduling --------------------------------------------------------------------------------
    def should_request(self, tick: int) -> bool:
        if len(self._in_flight) >= self.cfg.max_in_flight:
            return False
        remaining = self.queue.remaining(tick)
        s = self.cfg.execute_horizon or self.horizon
        if self.cfg.mode == "sync":
            return remaining <= self.horizon - s
        if self.cfg.mode == "naive_async":
            return remaining / self.horizon <= self.cfg.queue_threshold
        # latency-aware: each chunk runs s actions from its arrival, so the next one must be asked for
        # planned ticks before that (for a chunk that starts at its request's tick this is "s actions into
        # the chunk"; a two-stage chunk starts later, at its mid observation); never let the queue run dry
        planned = self.delay.planned()
        if self._in_flight:  # pipelined: s actions after the newest chunk asked for is expected to start
            return tick - max(f.expected_at for f in self._in_flight.values()) >= s - planned
        return tick - self._arrived >= s - planned or remaining <= planned + self.cfg.margin

    def _request(self, tick: int, observation: dict[str, np.ndarray], two_stage: bool = True) -> None:
        planned = self.delay.planned() if self.cfg.mode == "latency_aware" else 0
        prefix = np.zeros((0, self.action_spec.dim), np.float32)
        if self.cfg.mode == "latency_aware" and self.cfg.splice == "prefix":
            # the committed actions: queued ticks that execute while the chunk is computed
            n = min(planned, self.cfg.max_prefix, self.horizon - 1)
            committed = self.queue.actions(tick, n)
            committed = committed[:self.queue.remaining(tick)]
            if committed:
                prefix = self.action_spec.to_normalised(np.stack([c.action for c in committed])).astype(np.float32)
        if self.cfg.mode == "sync":
            self.queue.clear_from(tick)  # the robot stops here and waits for the new chunk
        if self.before_request is not None:
            self.before_request()
        # two-stage only when the mid observation would be newer than the first one and taken while the
        # committed prefix still runs (the chunk then starts from it)
        d_rl = self.cfg.mid_observation_ticks
        mid_ticks = d_rl if two_stage and d_rl < planned <= len(prefix) + d_rl else 0
        req = ChunkRequest(self._next_id, tick, observation, prefix, planned, self.robot_id, mid_ticks=mid_ticks)
        self._next_id += 1
        self._in_flight[req.request_id] = InFlight(req, tick, tick + planned,
                                                   tick + planned - mid_ticks if mid_ticks else None)
        self.metrics.requests += 1
        self.client.submit(req)

    # --- splicing ----------------------------------------------------------------------------------
    def _splice(self, resp: ChunkResponse, tick: int, measure: bool = True) -> None:
        if self._in_flight.pop(resp.request_id, None) is None:
            return  # an answer to a request given up on, or superseded by a newer chunk
        for older in [i for i in self._in_flight if i < resp.request_id]:
            del self._in_flight[older]  # pipelined: an older chunk arriving after this one would undo it
        self._arrived = tick
        delay = tick - resp.tick
        if measure:
            # an answer held back for our own mid observation was computed earlier than it shows: record
            # one tick less, so an estimate that is too high comes down (else it would confirm itself)
            self.delay.add(max(0, delay - 1) if resp.waited_for_mid else delay)
            self.metrics.delays[delay] += 1
        self.metrics.chunks += 1
        actions = self.action_spec.to_robot(np.asarray(resp.actions, np.float32))
        # sync: the robot held still while the policy thought, so the chunk starts when it arrives;
        # two-stage: it starts at the mid observation's tick
        start = tick if self.cfg.mode == "sync" else (resp.tick if resp.chunk_start is None else resp.chunk_start)
        if self.on_chunk is not None:
            self.on_chunk(start, actions)
        args = (start, actions)
        tags = dict(chunk_id=resp.request_id, policy_version=resp.policy_version, delay_ticks=delay)
        mode, splice = self.cfg.mode, self.cfg.splice
        if mode == "naive_async" or (mode == "latency_aware" and splice == "blend"):
            self.queue.blend_from(tick, *args, self.cfg.old_weight, **tags)
        elif mode == "latency_aware" and splice == "prefix":
            # the first prefix_len actions equal the committed ones still queued: keep those entries
            self.queue.replace_from(max(tick, start + resp.prefix_len), *args, **tags)
        else:
            self.queue.replace_from(tick, *args, **tags)

    # --- the tick ----------------------------------------------------------------------------------
    def start_episode(self, observation: dict[str, np.ndarray], tick: int, clock: Clock) -> None:
        """Before an episode's first tick (the robot is at rest): clear the queue and wait until a first chunk
        is in. Under a real clock (``clock.period > 0``) this sleeps between polls, asks again after
        ``request_timeout`` ticks without an answer (a server that restarted lost the request), calls
        ``while_waiting`` every 20 ms, and measures the wait as a delay (in ticks) for the scheduler (unless it
        asked again); under a
        simulated one it does not wait. Returns early, with the queue empty and the request in flight, when
        ``while_waiting`` says to stop."""
        real = clock.period > 0
        self.queue.clear()
        self._in_flight.clear()
        self._request(tick, observation, two_stage=False)  # at rest: a later observation is the same
        asked = set(self._in_flight)  # at rest, an answer to any of them will do
        t0 = t_hook = time.perf_counter()
        while self._in_flight:
            # at rest time does not count: take the answer whenever it is ready (a simulated clock's
            # answer is due some ticks later, so ask for everything due up to far in the future)
            for resp in self.client.poll(tick + 10**9):
                if resp.request_id in asked:
                    self._splice(replace(resp, request_id=next(iter(self._in_flight))), tick, measure=False)
                    break
            if not self._in_flight or not real:
                continue
            time.sleep(0.0005)
            now = time.perf_counter()
            if now - t0 > self.cfg.request_timeout * clock.period * len(asked):  # lost (a server restarted)
                self._in_flight.clear()
                self._request(tick, observation, two_stage=False)
                asked |= set(self._in_flight)
                self.metrics.resent += 1
            if self.while_waiting is not None and now - t_hook > 0.02:
                t_hook = now
                if not self.while_waiting():
                    return
        if real and len(asked) == 1:  # an answer after an outage measures the outage, not the policy's delay
            self.delay.add(int(np.ceil((time.perf_counter() - t0) / clock.period)))

    def interrupt(self, tick: int) -> None:
        """A human took over at ``tick``: drop the queued actions and forget the request in flight (its
        chunk was planned for a robot that is no longer where it expected). Afterwards ``tick`` asks anew."""
        self.queue.clear_from(tick)
        self._in_flight.clear()

    def tick(self, tick: int, observation: dict[str, np.ndarray]) -> TimedAction | None:
        """The action for ``tick``, or None for a stall (the caller holds the last safe command)."""
        for resp in self.client.poll(tick):
            self._splice(resp, tick)
        for request_id, flight in list(self._in_flight.items()):
            if tick - flight.sent_at > self.cfg.request_timeout:
                del self._in_flight[request_id]  # lost (e.g. the server restarted): ask again
                self.metrics.resent += 1
            elif flight.mid_due is not None and tick >= flight.mid_due:
                self.client.submit_mid(request_id, tick, observation)
                flight.mid_due = None
        if self.should_request(tick):
            self._request(tick, observation)
            for resp in self.client.poll(tick):  # a zero-delay answer is usable this very tick
                self._splice(resp, tick)
        item = self.queue.pop(tick)
        self.metrics.ticks += 1
        if item is None:
            self.metrics.stalled_ticks += 1
        return item
