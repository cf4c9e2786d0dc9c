"""The learner process: ingest transitions, persist them, update, publish weights, checkpoint.

    loop:
        drain the transitions socket -> validate -> append to the on-disk log (ack) -> replay
        while updates < utd * (env_steps - learning_starts): sample a batch, update
        every ``publish_every`` updates: version += 1, PUB the actor weights (+ heartbeat re-sends)
        every ``checkpoint_every_s``: atomic checkpoint (weights, optimisers, temperature, RNG, counters)

The learner also owns the run's rerun recording and the metrics log, because every transition and
every loss passes through it.
"""

from __future__ import annotations

import collections
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import zmq

from robolearn import registry
from robolearn.buffer.log import RecordLog
from robolearn.buffer.replay import Replay
from robolearn.config import RunConfig
from robolearn.logging.recording import Recording
from robolearn.logging.status import MetricsLog, write_json_atomic
from robolearn.runtime.process import StopFlag
from robolearn.runtime.rundir import RunDir
from robolearn.specs import SpecError
from robolearn.transition import validate_batch
from robolearn.transport.sockets import bind_random_port, send
from robolearn.transport.wire import RejectCounter, WireError, decode

TRANSITIONS = frozenset({"transitions"})


def build_task_and_policy(cfg: RunConfig):
    """The task env (for its specs) and a fresh policy for it, both picked from the registries."""
    env = registry.lookup("task", cfg.task.name).factory(cfg.task, cfg.robot)
    policy = registry.lookup("policy", cfg.policy.name).factory(env.observation_spec, env.action_spec, cfg.policy)
    return env, policy


def weights_arrays(policy: torch.nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in policy.state_dict().items()}


class Learner:
    def __init__(self, run: RunDir, cfg: RunConfig, stop: StopFlag) -> None:
        self.run, self.cfg, self.stop = run, cfg, stop
        torch.set_num_threads(cfg.runtime.learner_threads)
        random.seed(cfg.seed)
        np.random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        env, self.policy = build_task_and_policy(cfg)
        self.obs_spec, self.action_spec = env.observation_spec, env.action_spec
        env.close()
        self.algo = registry.lookup("algo", cfg.algo.name).factory(self.policy, cfg.algo, cfg.seed)
        self.horizon = self.policy.horizon
        self.replay = Replay(self.policy.obs_dim, self.policy.action_dim, cfg.buffer.capacity, cfg.seed)
        self.rejects = RejectCounter()
        self.version = 0
        self.episodes = 0
        self.successes = 0
        self.recent = collections.deque(maxlen=50)
        self.max_episode_id = -1
        self.latest_transition_version = 0
        self.resumed_from: dict | None = None
        self.updates_per_s = 0.0
        self._restore()
        self.log = RecordLog(run.buffer_log, cfg.buffer.fsync, cfg.buffer.fsync_interval_s)
        self._load_buffer()

    # --- start-up ------------------------------------------------------------------------------
    def _restore(self) -> None:
        path = self.run.checkpoint
        if not path.exists():
            return
        state = torch.load(path, weights_only=True)  # our own file, tensors and primitives only
        self.algo.load_state_dict(state["algo"])
        self.version = int(state["version"])
        self.replay.rng.bit_generator.state = state["replay_rng"]
        torch.set_rng_state(state["torch_rng"])
        self.resumed_from = {"updates": self.algo.num_updates, "version": self.version,
                             "env_steps": int(state["env_steps"])}

    def _load_buffer(self) -> None:
        for msg in self.log.read(TRANSITIONS):
            self._add_to_replay(msg.sender, msg.arrays)
        if self.log.corruption:
            print(f"[learner] buffer log: {self.log.corruption}; {self.log.recovered_bytes_dropped} bytes "
                  "after the last intact record were dropped", file=sys.stderr, flush=True)
        if self.replay.total_added:
            print(f"[learner] loaded {self.replay.total_added} transitions ({self.episodes} episodes) from "
                  f"{self.run.buffer_log}", flush=True)

    def _add_to_replay(self, robot_id: str, arrays: dict[str, np.ndarray]) -> None:
        self.replay.add(robot_id, arrays, self.action_spec.to_normalised(arrays["action"]))
        self.max_episode_id = max(self.max_episode_id, int(arrays["episode_id"][-1]))
        self.latest_transition_version = int(arrays["policy_version"][-1])
        if arrays["terminated"][-1] or arrays["truncated"][-1]:
            self.episodes += 1
            self.successes += int(arrays["success"][-1])
            self.recent.append(bool(arrays["success"][-1]))

    # --- the loop ------------------------------------------------------------------------------
    def run_forever(self) -> None:
        cfg = self.cfg
        ctx = zmq.Context()
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.RCVHWM, 10000)
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, 4)
        endpoints = {
            "transitions": bind_random_port(pull, cfg.runtime.host),
            "weights": bind_random_port(pub, cfg.runtime.host),
            "next_episode_id": self.max_episode_id + 1,
            "learner_pid": os.getpid(),
        }
        self.recording = Recording(self.run.root, cfg.run_name)
        self.metrics_log = MetricsLog(self.run.metrics)
        poller = zmq.Poller()
        poller.register(pull, zmq.POLLIN)
        if self.version == 0:
            self.version = 1  # the initial weights are version 1; actors wait for a version
        self._publish(pub)
        write_json_atomic(self.run.endpoints, endpoints)
        print(f"[learner] listening: transitions {endpoints['transitions']}, weights {endpoints['weights']}",
              flush=True)

        algo_cfg = cfg.algo
        t_start = time.monotonic()
        last = {"heartbeat": t_start, "status": 0.0, "metrics": t_start, "checkpoint": t_start}
        updates_at_last_metrics = self.algo.num_updates
        metrics: dict[str, float] = {}
        while not self.stop:
            self._ingest(pull, max_messages=256)
            due = algo_cfg.utd_ratio * (self.replay.total_added - algo_cfg.learning_starts)
            if self.algo.num_updates < due and self.replay.num_sampleable() >= algo_cfg.batch_size:
                batch = self.replay.sample(algo_cfg.batch_size, self.horizon, algo_cfg.gamma)
                metrics = self.algo.update({k: torch.from_numpy(v) for k, v in batch.items()})
                if self.algo.num_updates % algo_cfg.publish_every == 0:
                    self.version += 1
                    self._publish(pub)
                    last["heartbeat"] = time.monotonic()
                if self.algo.num_updates % 10 == 0:
                    self.recording.log_learner(self.algo.num_updates, metrics)
            else:
                poller.poll(timeout=5)
            now = time.monotonic()
            if now - last["heartbeat"] >= cfg.runtime.weights_heartbeat_s:
                self._publish(pub)  # late subscribers get the latest version within a heartbeat
                last["heartbeat"] = now
            if now - last["status"] >= cfg.runtime.status_every_s:
                self._write_status(now - t_start)
                last["status"] = now
            if now - last["metrics"] >= 1.0:
                self.updates_per_s = (self.algo.num_updates - updates_at_last_metrics) / (now - last["metrics"])
                updates_at_last_metrics, last["metrics"] = self.algo.num_updates, now
                self.metrics_log.write({**self._counters(), **metrics})
            if now - last["checkpoint"] >= algo_cfg.checkpoint_every_s:
                self.checkpoint()
                last["checkpoint"] = now

        # graceful stop: take what is still queued, persist, checkpoint
        drain_until = time.monotonic() + 0.5
        while time.monotonic() < drain_until:
            if not self._ingest(pull, max_messages=1024):
                time.sleep(0.02)
        self.checkpoint()
        self.log.close()
        self._write_status(time.monotonic() - t_start, final=True)
        self.recording.close()
        self.metrics_log.close()
        pull.close(linger=0)
        pub.close(linger=0)
        ctx.term()

    def _ingest(self, pull: zmq.Socket, max_messages: int) -> int:
        got = 0
        for _ in range(max_messages):
            try:
                frames = pull.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                msg = decode(frames, TRANSITIONS)
                validate_batch(msg.arrays, self.obs_spec, self.action_spec)
                if len(set(msg.arrays["episode_id"].tolist())) != 1:
                    raise SpecError("a transition batch must hold steps of one episode")
            except (WireError, SpecError) as exc:
                self.rejects.reject(str(exc))
                print(f"[learner] rejected a message: {exc}", file=sys.stderr, flush=True)
                continue
            self.log.append(frames)  # acknowledged: on disk (OS) before it is used
            self._add_to_replay(msg.sender, msg.arrays)
            self.recording.log_transitions(msg.sender, msg.arrays)
            got += 1
        return got

    def _publish(self, pub: zmq.Socket) -> None:
        cfg = self.cfg.algo
        allowed = cfg.learning_starts + self.algo.num_updates / cfg.utd_ratio + self.cfg.runtime.max_steps_ahead
        meta = {"version": self.version, "updates": self.algo.num_updates, "env_steps": self.replay.total_added,
                "allowed_env_steps": int(allowed)}
        send(pub, "weights", "learner", self.version, meta, weights_arrays(self.policy))

    def _counters(self) -> dict:
        return {
            "env_steps": self.replay.total_added, "episodes": self.episodes, "successes": self.successes,
            "success_rate_50": (sum(self.recent) / len(self.recent)) if self.recent else 0.0,
            "updates": self.algo.num_updates, "updates_per_s": self.updates_per_s, "version": self.version,
            "version_lag": self.version - self.latest_transition_version, "rejected_messages": self.rejects.total,
        }

    def _write_status(self, elapsed_s: float, final: bool = False) -> None:
        write_json_atomic(self.run.status("learner"), {
            **self._counters(), "elapsed_s": elapsed_s, "pid": os.getpid(), "final": final,
            "last_reject": self.rejects.last_reason, "resumed_from": self.resumed_from,
            "buffer_records": self.log.num_records,
        })

    def checkpoint(self) -> None:
        state = {
            "algo": self.algo.state_dict(), "version": self.version, "env_steps": self.replay.total_added,
            "replay_rng": self.replay.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
        }
        path: Path = self.run.checkpoint
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def main(run: RunDir, cfg: RunConfig) -> int:
    stop = StopFlag()
    learner = Learner(run, cfg, stop)
    learner.run_forever()
    return 0
