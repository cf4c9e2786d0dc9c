"""The learner process: ingest transitions, persist them, update, publish weights, checkpoint.

    loop (the same for every algorithm: ``algo=sac|habc|hiors``; the schedule is ``learner.*``):
        drain the transitions socket -> validate -> persist in the replay buffer (the ack point)
        while updates < utd * (env_steps - max(learning_starts, batch_size)):
            algo.update(algo.sample_batch(buffer, action_spec, batch_size))
        every ``publish_every`` updates: version += 1, PUB the actor weights with a ``LearnerStatus``
        every ``weights_heartbeat_s``: a full snapshot, of a new version if none went out for that long and there
        were updates since (weights reach actors within about a heartbeat however slow the updates), else the
        last version again
        every ``checkpoint_every_s``: an atomic checkpoint (``robolearn.checkpoint``)

The loop owns the schedule; the algorithm (``learner.algorithm.Algorithm``) owns only its losses.

The learner also owns the run's rerun recording and the metrics log, because every transition and
every loss passes through it.
"""

from __future__ import annotations

import collections
import os
import queue
import random
import sys
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
import zmq

from robolearn.buffer.prefetch import Prefetcher
from robolearn.buffer.replay_buffer import EpisodeGap, ReplayBuffer
from robolearn.buffer.samplers import NotEnoughData
from robolearn.builders import build_policy, task_specs
from robolearn.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from robolearn.learner.algorithm import Algorithm
from robolearn.learner.device import batch_to, resolve_device
from robolearn.logging.recording import Recording
from robolearn.logging.status import MetricsLog, read_json, write_json_atomic
from robolearn.registry import lookup
from robolearn.rundir import RunDir
from robolearn.specs import SpecError
from robolearn.stop_flag import StopFlag
from robolearn.transport.learner_status import LearnerStatus
from robolearn.transport.security import Authenticator, load_keys
from robolearn.transport.sockets import endpoint_port
from robolearn.transport.transitions import BatchId, TransitionReceiver
from robolearn.transport.weights import WeightPublisher
from robolearn.transport.wire import RejectCounter, WireError

if TYPE_CHECKING:  # the config is built above this layer (robolearn.config); only its type is named here
    from robolearn.config import RunConfig

def lag_stats(histogram: collections.Counter) -> dict[str, float]:
    """Mean, p95 and max policy lag (versions) of the transitions ingested so far."""
    if not histogram:
        return {"policy_lag_mean": 0.0, "policy_lag_p95": 0, "policy_lag_max": 0}
    lags = np.array(sorted(histogram))
    counts = np.array([histogram[k] for k in lags])
    cdf = np.cumsum(counts) / counts.sum()
    return {"policy_lag_mean": float((lags * counts).sum() / counts.sum()),
            "policy_lag_p95": int(lags[np.searchsorted(cdf, 0.95)]), "policy_lag_max": int(lags[-1])}


class Learner:
    def __init__(self, run: RunDir, cfg: RunConfig, stop: StopFlag) -> None:
        self.run, self.cfg, self.stop = run, cfg, stop
        self.schedule = cfg.learner
        torch.set_num_threads(self.schedule.threads)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.obs_spec, self.action_spec = task_specs(cfg)  # the robot is not connected: actors own it
        self.device = resolve_device(self.schedule.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # this thread's current device (cuda:N: no context on cuda:0)
        # the algorithm builds its other networks where the policy is (learner/device.py)
        self.policy = build_policy(cfg, self.obs_spec, self.action_spec).to(self.device)
        self.algo: Algorithm = lookup("algo", cfg.algo.name).factory(self.policy, cfg.algo, cfg.seed)
        self.rejects = RejectCounter()
        self.duplicates = 0  # batches an actor re-sent that the buffer already held (acknowledged, dropped)
        self.out_of_order = 0  # batches that came before an earlier one of their episode (answered "later")
        self.cut_episodes = 0  # episodes whose actor crashed mid-way (closed at its recovered last step)
        self.version = 0
        self.episodes = 0
        self.successes = 0
        self.recent = collections.deque(maxlen=50)
        self.recent_returns: collections.deque[float] = collections.deque(maxlen=50)
        self.max_episode_id = -1
        self.latest_transition_version = 0
        self.policy_lag: collections.Counter[int] = collections.Counter()  # lag (versions) -> transitions
        self.resumed_from: dict | None = None
        self.updates_per_s = 0.0
        self._steps_at_episode_end = 0
        self._announced = (0, 0)  # (updates, env steps) at the last sync-mode announcement
        self._published_updates = -1  # algo.num_updates when the last version was published
        self._published_at = 0.0      # time.monotonic() then
        self._replay_rng: dict | None = None  # replay generator state after the last consumed batch
        store = cfg.buffer
        self.buffer = ReplayBuffer(run.buffer, self.obs_spec, self.action_spec, store.capacity, store.ram_budget_mb,
                                   store.fsync, store.fsync_interval_s, store.segment_mb, seed=cfg.seed)
        self._restore()
        self._import_demos()
        self._report_buffer()

    # --- start-up ------------------------------------------------------------------------------
    def _restore(self) -> None:
        if not self.run.checkpoint.exists():
            return
        ckpt = load_checkpoint(self.run.checkpoint)
        self.algo.load_state_dict(ckpt.algo)
        self.version = ckpt.version
        self.buffer.rng.bit_generator.state = ckpt.replay_rng
        torch.set_rng_state(ckpt.torch_rng)
        if ckpt.cuda_rng is not None and self.device.type == "cuda":  # one written on the CPU: this device's seed
            torch.cuda.set_rng_state(ckpt.cuda_rng, self.device)
        self.resumed_from = {"updates": self.algo.num_updates, "version": self.version, "env_steps": ckpt.env_steps}

    def _import_demos(self) -> None:
        """``learner.demos``: the demonstrations go into the demo partition (never evicted; RLPD samples them) the
        first time; they are then in the buffer's log, so a restarted learner does not import them again."""
        if not self.schedule.demos or self.buffer.partition_sizes().get("demo", 0):
            return
        from robolearn.buffer.lerobot_io import import_lerobot

        n = import_lerobot(self.buffer, self.schedule.demos, robot_id="demos",
                           control_hz=self.cfg.configured_control_hz())
        print(f"[learner] imported {n} demo episodes ({self.buffer.partition_sizes().get('demo', 0)} steps) from "
              f"{self.schedule.demos}", flush=True)

    def _report_buffer(self) -> None:
        for problem in self.buffer.log.problems:
            print(f"[learner] buffer: {problem}", file=sys.stderr, flush=True)
        for robot_id, episode_id in self.buffer.recovered_episodes:
            print(f"[learner] buffer: episode {episode_id} of {robot_id} was cut by a crash; kept up to its last "
                  "stored step and marked truncated", flush=True)
        for ep in self.buffer.episodes.values():
            if ep.partition == "demo":  # demonstrations are not the robots' episodes
                continue
            self.max_episode_id = max(self.max_episode_id, ep.episode_id)
            if ep.ended and not ep.truncated_by_recovery:  # one a crash cut has no outcome
                self._count_episode(ep.success, float(ep.ret))
        steps = self._steps_at_episode_end = self.env_steps
        if steps:
            print(f"[learner] loaded {steps} transitions ({self.episodes} episodes) from {self.run.buffer}", flush=True)

    @property
    def env_steps(self) -> int:
        return self.buffer.tables["online"].n

    def _count_episode(self, success: bool, ret: float) -> None:
        self.episodes += 1
        self.successes += int(success)
        self.recent.append(success)
        self.recent_returns.append(ret)

    # --- one update ----------------------------------------------------------------------------
    def _sample(self) -> tuple[dict, dict]:
        """A batch on the learner's device and the replay generator's state right after drawing it (prefetch
        thread or inline)."""
        with self.buffer.lock:
            batch = self.algo.sample_batch(self.buffer, self.action_spec, self.schedule.batch_size)
            rng_state = self.buffer.rng.bit_generator.state
        return batch_to(batch, self.device), rng_state

    def start_prefetch(self) -> Prefetcher | None:
        """Batches drawn ahead on a thread (up to ``learner.prefetch_batches`` queued, and one in hand), drawn only
        while an update is due: none before ``learning_starts`` (the first updates train on the buffer as it is
        then, not on the few steps it held when the learner started). Those drawn just before the learner caught
        up wait, queued, for the next updates due: they lack the steps that came in between."""
        depth = self.schedule.prefetch_batches
        return Prefetcher(self._sample, depth, ready=self._update_due) if depth else None

    def _update_due(self) -> bool:
        return self.algo.num_updates < self._updates_due()

    def update_once(self, prefetch: Prefetcher | None = None) -> dict[str, float]:
        """Take the next batch and update. The generator state that follows the consumed batch is what a
        checkpoint saves, so batches drawn ahead by the prefetcher are drawn again after a resume: the
        resumed run's updates equal the uninterrupted run's."""
        batch, self._replay_rng = prefetch.get(timeout=0.5) if prefetch else self._sample()
        return self.algo.update(batch)

    # --- the loop ------------------------------------------------------------------------------
    def run_forever(self) -> None:
        cfg = self.cfg
        ctx = zmq.Context()
        keys = load_keys(cfg.runtime.keys_dir)
        auth = Authenticator(ctx, keys) if keys else None  # only authorized clients complete a CURVE handshake
        earlier = read_json(self.run.endpoints) or {}  # a restart in the same run: the actors are connected there
        receiver = TransitionReceiver(ctx, cfg.runtime.host, self.rejects, keys,
                                      port=endpoint_port(earlier.get("transitions")))
        self.publisher = pub = WeightPublisher(ctx, cfg.runtime.host, self.schedule.weights_full_every, keys,
                                               port=endpoint_port(earlier.get("weights")),
                                               version_file=self.run.root / "published_version")
        endpoints = {
            "transitions": receiver.endpoint,
            "weights": pub.endpoint,
            "next_episode_id": self.max_episode_id + 1,
            "learner_pid": os.getpid(),
        }
        self.recording = Recording(self.run.root, cfg.run_name)
        self.metrics_log = MetricsLog(self.run.metrics)
        poller = zmq.Poller()
        poller.register(receiver.sock, zmq.POLLIN)
        # the initial weights are version 1; restored weights go out as a version past every one published before
        # (the actors may hold versions published after the checkpoint, and the checkpoint's weights carry the
        # updates made after its own version went out: under that number they would be a second set of weights)
        self.version = max(self.version, pub.published_before) + 1
        self._publish(pub)
        write_json_atomic(self.run.endpoints, endpoints)
        print(f"[learner] listening: transitions {endpoints['transitions']}, weights {endpoints['weights']}; "
              f"learning on {self.device}", flush=True)

        schedule = self.schedule
        t_start = time.monotonic()
        last = {"heartbeat": t_start, "status": 0.0, "metrics": t_start, "checkpoint": t_start}
        updates_at_last_metrics = self.algo.num_updates
        metrics: dict[str, float] = {}
        prefetch = self.start_prefetch()
        while not self.stop:
            self._ingest(receiver, max_messages=256)
            if self._update_due():
                try:
                    metrics = self.update_once(prefetch)
                except (queue.Empty, NotEnoughData):  # no batch ready yet: keep ingesting, watch the stop flag
                    continue  # any other error ends the learner with its traceback (robolearn.runtime.worker)
                if self.algo.num_updates % schedule.publish_every == 0:
                    self.version += 1
                    if self._publish(pub):  # only a full snapshot counts as a heartbeat: a subscriber that
                        last["heartbeat"] = time.monotonic()  # joined late cannot apply a delta
                if self.algo.num_updates % 10 == 0:
                    self.recording.log_learner(self.algo.num_updates, metrics)
            else:
                if schedule.learning == "sync":
                    self._announce_caught_up(pub)
                poller.poll(timeout=5)
            now = time.monotonic()
            if now - last["heartbeat"] >= schedule.weights_heartbeat_s:
                self._heartbeat(pub)  # late subscribers get the latest version within a heartbeat
                last["heartbeat"] = now
            if now - last["status"] >= cfg.runtime.status_every_s:
                self._write_status(now - t_start)
                last["status"] = now
            if now - last["metrics"] >= 1.0:
                self.updates_per_s = (self.algo.num_updates - updates_at_last_metrics) / (now - last["metrics"])
                updates_at_last_metrics, last["metrics"] = self.algo.num_updates, now
                self.metrics_log.write({**self._counters(), **metrics})
            if now - last["checkpoint"] >= schedule.checkpoint_every_s:
                self.checkpoint()
                last["checkpoint"] = now

        # graceful stop: take what is still queued, persist, checkpoint
        drain_until = time.monotonic() + 0.5
        while time.monotonic() < drain_until:
            if not self._ingest(receiver, max_messages=1024):
                time.sleep(0.02)
        if prefetch:
            prefetch.close()
        self.checkpoint()
        self.buffer.close()
        self._write_status(time.monotonic() - t_start, final=True)
        self.recording.close()
        self.metrics_log.close()
        receiver.close()
        pub.close()
        if auth:
            auth.stop()
        ctx.term()

    def _ingest(self, receiver: TransitionReceiver, max_messages: int) -> int:
        """Take up to ``max_messages`` batches: validate, store (the acknowledgement point), then ack. A batch
        stored before (an actor re-sent it) is acknowledged again and dropped."""
        got = 0
        for _ in range(max_messages):
            try:
                received = receiver.recv()
            except WireError as exc:  # not even a well-formed message: nobody to acknowledge
                self._reject(exc)
                continue
            if received is None:
                break
            peer, msg = received
            try:
                batch = BatchId.from_meta(msg.meta)
            except WireError as exc:
                self._reject(exc)
                continue
            if batch is not None and self.buffer.has_batch(batch.actor, batch.seq):
                self.duplicates += 1
                receiver.ack(peer, batch, "duplicate")
                continue
            try:
                self.buffer.add(msg.sender, msg.arrays, batch_key=(batch.actor, batch.seq) if batch else None)
            except EpisodeGap as exc:  # an earlier batch of this episode is still on its way (re-sends)
                self.out_of_order += 1
                if batch is None:
                    self._reject(exc)
                else:
                    receiver.ack(peer, batch, "later", str(exc))
                continue
            except SpecError as exc:
                self._reject(exc)
                if batch is not None:
                    receiver.ack(peer, batch, "rejected", str(exc))
                continue
            arrays = msg.arrays
            if batch is not None and batch.cut:  # its actor crashed after these steps: the episode ends here
                self.cut_episodes += self.buffer.close_episode(msg.sender, int(arrays["episode_id"][-1]))
            if batch is not None:
                receiver.ack(peer, batch, "stored")
            self.max_episode_id = max(self.max_episode_id, int(arrays["episode_id"][-1]))
            self.latest_transition_version = int(arrays["policy_version"][-1])
            # staleness: versions the learner is ahead of the weights that produced each step
            lags = np.maximum(self.version - arrays["policy_version"], 0)
            self.policy_lag.update(lags.tolist())
            self.recording.log_policy_lag(msg.sender, arrays["tick"], lags)
            if arrays["terminated"][-1] or arrays["truncated"][-1]:
                ep = self.buffer.episode(msg.sender, int(arrays["episode_id"][-1]))
                self._count_episode(bool(arrays["success"][-1]), float(ep.ret))
                self._steps_at_episode_end = self.env_steps
                self.algo.on_episode(ep.ret)  # e.g. Hi-ORS moves its acceptance threshold
            self.recording.log_transitions(msg.sender, msg.arrays)
            got += 1
        return got

    def _reject(self, exc: Exception) -> None:
        self.rejects.reject(str(exc))
        print(f"[learner] rejected a message: {exc}", file=sys.stderr, flush=True)

    def _updates_due(self) -> float:
        """utd * (learnable steps - max(learning_starts, batch_size)). Learnable: every ingested step; with
        ``learner.learning=sync`` only the steps of ended episodes, so the learner updates only while the
        robot waits at an episode end (strict alternation, the sync baseline)."""
        steps = self._steps_at_episode_end if self.schedule.learning == "sync" else self.env_steps
        return self.schedule.utd_ratio * (steps - self.schedule.learning_start)

    def _announce_caught_up(self, pub: WeightPublisher) -> None:
        """``learner.learning=sync``: once every update due for the ingested steps is done, tell the actors
        (they wait at each episode end) and hand them the newest weights."""
        if self.algo.num_updates != self._announced[0]:
            self.version += 1  # the updates since the last publication become a version now
            self._publish(pub)
        elif self.env_steps != self._announced[1]:
            pub.heartbeat(self.status())  # nothing new to learn yet (before learning_starts): a heartbeat
        else:
            return
        self._announced = (self.algo.num_updates, self.env_steps)

    def status(self) -> LearnerStatus:
        """What actors read from every weights message (``transport.learner_status``)."""
        learned = self.schedule.learning_start + self.algo.num_updates / self.schedule.utd_ratio
        return LearnerStatus(version=self.version, updates=self.algo.num_updates, env_steps=self.env_steps,
                             learned_env_steps=int(learned), caught_up=self.algo.num_updates >= self._updates_due())

    def _publish(self, pub: WeightPublisher, full: bool = False) -> bool:
        """PUB the actor weights as ``self.version``: a sparse delta from the previous version when that is
        smaller, a full snapshot when ``full`` and every ``learner.weights_full_every`` versions. Whether it was a
        full snapshot."""
        self._published_updates, self._published_at = self.algo.num_updates, time.monotonic()
        return pub.publish(self.version, self.policy, self.status(), full=full)

    def _heartbeat(self, pub: WeightPublisher) -> None:
        """A full snapshot for late subscribers. When no version went out for a heartbeat interval and the learner
        has updated since the last one (slow updates, ``publish_every`` of them not yet done), those weights become
        a new version, so actors hold weights at most about a heartbeat old; otherwise the last version goes out
        again as it was published. Never newer weights under a number already out: a version names one set of
        weights, and a subscriber that holds it skips its repeat."""
        stale = time.monotonic() - self._published_at >= self.schedule.weights_heartbeat_s
        if stale and self.algo.num_updates != self._published_updates:
            self.version += 1
            self._publish(pub, full=True)
        else:
            pub.heartbeat(self.status())

    def _counters(self) -> dict:
        return {
            "env_steps": self.env_steps, "episodes": self.episodes, "successes": self.successes,
            "success_rate_50": (sum(self.recent) / len(self.recent)) if self.recent else 0.0,
            "return_50": (sum(self.recent_returns) / len(self.recent_returns)) if self.recent_returns else 0.0,
            "updates": self.algo.num_updates, "updates_per_s": self.updates_per_s, "version": self.version,
            "version_lag": self.version - self.latest_transition_version, "rejected_messages": self.rejects.total,
            "duplicate_batches": self.duplicates, "out_of_order_batches": self.out_of_order,
            "cut_episodes": self.cut_episodes,
            **lag_stats(self.policy_lag),
        }

    def _write_status(self, elapsed_s: float, final: bool = False) -> None:
        write_json_atomic(self.run.status("learner"), {
            **self._counters(), "elapsed_s": elapsed_s, "pid": os.getpid(), "final": final, "device": str(self.device),
            "last_reject": self.rejects.last_reason, "resumed_from": self.resumed_from,
            "policy_lag_histogram": {str(k): v for k, v in sorted(self.policy_lag.items())},
            "buffer_records": self.buffer.log.num_records,
            # bytes of weights published / bytes had every version gone out in full (sparse deltas < 1)
            "weights_bytes_ratio": self.publisher.bytes_ratio,
        })

    def checkpoint(self) -> None:
        replay_rng = self._replay_rng
        if replay_rng is None:  # nothing consumed yet
            with self.buffer.lock:  # the prefetch thread draws from the same generator
                replay_rng = self.buffer.rng.bit_generator.state
        cuda_rng = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None
        save_checkpoint(self.run.checkpoint, Checkpoint(self.algo.state_dict(), self.version, self.env_steps,
                                                        replay_rng, torch.get_rng_state(), cuda_rng))


def main(run: RunDir, cfg: RunConfig) -> int:
    stop = StopFlag()
    learner = Learner(run, cfg, stop)
    learner.run_forever()
    return 0
