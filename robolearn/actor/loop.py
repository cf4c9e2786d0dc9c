"""The actor process: one robot's control loop executing action chunks through a ``ChunkExecutor``.

    per tick t:
        executor.tick(t, obs)       splice arrived chunks; ask for the next one when the scheduler says
                                    (``runtime.chunking``); pop the action for t (none: a stall, hold)
        obs', r, done = env.step(a)
        record the transition (tagged with the chunk, its weight version and delay); PUSH a batch every
        ``send_every`` steps and at the episode end

The newest received weights are loaded just before each request, so every chunk comes from one
version. Inference runs in this process: with ``runtime.realtime=false`` under a simulated clock (an
inference takes ``runtime.inference_delay_ticks`` ticks, and the loop runs as fast as the learner's
update-to-data ratio allows); with ``realtime=true`` the loop sleeps to the robot's control period, as
on hardware, and the policy runs inside the tick or, with ``runtime.async_inference=true``, on a
worker thread while the robot keeps executing (needs chunks longer than the delay in ticks).
"""

from __future__ import annotations

import os
import sys
import time

import torch
import zmq

from robolearn.actor.chunk_loop import TickDriver
from robolearn.actor.chunking import ChunkExecutor
from robolearn.actor.weights import WeightSubscriber
from robolearn.clock import DelaySampler, RealClock, SimClock
from robolearn.config import RunConfig
from robolearn.hardware.resources import LeaseClient
from robolearn.inference.client import SimulatedLatencyClient, ThreadedClient
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.logging.recording import Recording
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.registry import build_task_and_policy
from robolearn.runtime.process import StopFlag
from robolearn.runtime.rundir import RunDir
from robolearn.transition import TransitionWriter
from robolearn.transport.sockets import send
from robolearn.transport.wire import RejectCounter


class Actor:
    def __init__(self, run: RunDir, cfg: RunConfig, index: int, stop: StopFlag) -> None:
        self.run, self.cfg, self.index, self.stop = run, cfg, index, stop
        torch.set_num_threads(cfg.runtime.actor_threads)
        torch.manual_seed(cfg.seed + 1000 + index)
        self.env, self.policy = build_task_and_policy(cfg)
        self.policy.eval()
        self.robot_id = ""  # the leased resource's name
        self.name = f"actor-{index}"
        self.rejects = RejectCounter()
        self.env_steps = 0
        self.episodes = 0
        self.successes = 0
        self.intervention_steps = 0
        self.throttled_s = 0.0  # waiting for weights within runtime.max_policy_lag
        self.waited_for_learner_s = 0.0  # runtime.learning=sync: waiting at episode ends
        self._meta_env_steps: int | None = None
        self._steps_since_meta = 0

    def _human(self):
        """The teleop that may take over: the scripted human in sim (``runtime.human=scripted``)."""
        if self.cfg.runtime.human == "scripted":
            from robolearn.sim.intervention import ScriptedHuman  # sim only; not imported for real robots
            return ScriptedHuman(self.env)
        return None

    def _wait_for(self, what: str, ready, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while not self.stop:
            value = ready()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"[{self.name}] no {what} after {timeout_s:.0f} s")
            time.sleep(0.02)
        return None

    def _wait_for_updates(self, newest_weights) -> None:
        """``runtime.learning=sync``: the robot waits (holding still) until the learner has ingested every step
        sent and done the updates due for them, then takes the newest weights."""
        t0 = time.monotonic()
        while not self.stop:
            meta = self.weights.learner_meta
            if meta.get("env_steps", 0) >= self.env_steps and meta.get("caught_up", False):
                break
            self.weights.poll(timeout_ms=20)
        newest_weights()
        self.waited_for_learner_s += time.monotonic() - t0

    def _throttle(self, tick: int, newest_weights) -> None:
        """``runtime.max_policy_lag``: while the learner is more than that many versions ahead of the weights
        this actor acts with, do not step (a real robot holds its last command): wait for newer weights,
        load them and drop the queued chunk they make stale, so the next chunk comes from them."""
        t0 = None
        while not self.stop:
            learner_version = self.weights.learner_meta.get("version", 0)
            if learner_version - self.weights.version <= self.cfg.runtime.max_policy_lag:
                break
            t0 = t0 or time.monotonic()
            self.weights.poll(timeout_ms=20)
            if newest_weights():
                self.executor.interrupt(tick)
        if t0 is not None:
            self.throttled_s += time.monotonic() - t0

    def _wait_for_learner(self) -> None:
        """Sim only: hold the (frozen) simulation while the learner is behind its update-to-data ratio.

        The learner's weight messages carry its ingested step count and the step count it allows;
        steps taken since that message are counted here.
        """
        while not self.stop:
            meta = self.weights.learner_meta
            if meta.get("env_steps") != self._meta_env_steps:
                self._meta_env_steps, self._steps_since_meta = meta.get("env_steps"), 0
            if meta.get("env_steps", 0) + self._steps_since_meta < meta.get("allowed_env_steps", 0):
                return
            self.weights.poll(timeout_ms=20)

    def run_forever(self) -> None:
        cfg = self.cfg
        resources = self._wait_for("resource manager", lambda: read_json(self.run.resources),
                                   cfg.runtime.startup_timeout_s)
        if resources is None:
            return
        self.lease = LeaseClient(resources["endpoint"], self.name)
        try:
            self.robot_id = self.lease.acquire(self.env.robot.name, timeout_s=cfg.runtime.startup_timeout_s,
                                               stop=lambda: bool(self.stop))[0]
            self._act()
        finally:
            self.lease.close()

    def _act(self) -> None:
        cfg = self.cfg
        endpoints = self._wait_for("learner endpoints", lambda: read_json(self.run.endpoints),
                                   cfg.runtime.startup_timeout_s)
        if endpoints is None:
            return
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDHWM, 100000)
        push.setsockopt(zmq.LINGER, 5000)  # a stopping actor still delivers what it sent
        push.connect(endpoints["transitions"])
        self.weights = WeightSubscriber(ctx, endpoints["weights"], self.policy, self.rejects)

        def first_weights() -> bool:
            self.weights.poll(timeout_ms=20)
            return self.weights.apply_pending()

        if not self._wait_for("weights from the learner", first_weights, cfg.runtime.startup_timeout_s):
            return
        print(f"[{self.name}] got weights v{self.weights.version}; acting on {self.robot_id}", flush=True)

        runner = ChunkPolicyRunner(self.policy, self.env.observation_spec, self.env.action_spec.dim,
                                   version=self.weights.version, explore=True)
        if cfg.runtime.realtime:
            clock = RealClock(self.env.robot.config.control_hz)
            if cfg.runtime.async_inference:  # a worker thread; the loop never waits for the policy
                client = ThreadedClient(runner, threads=cfg.runtime.actor_threads)
            else:  # inside the tick: fine while a forward pass is a small part of the control period
                client = SimulatedLatencyClient(runner, SimClock())
        else:
            clock = SimClock(DelaySampler("fixed", ticks=cfg.runtime.inference_delay_ticks))
            client = SimulatedLatencyClient(runner, clock)

        def newest_weights() -> bool:  # before each request: the chunk comes from the newest version
            if self.weights.apply_pending():
                runner.version = self.weights.version
                return True
            return False

        recording = Recording(self.run.root, cfg.run_name, self.run.root / f"{self.name}.rrd")
        self.executor = ChunkExecutor(client, self.env.action_spec, getattr(self.policy, "horizon", 1),
                                      cfg.runtime.chunking, self.robot_id, before_request=newest_weights,
                                      on_chunk=lambda start, chunk: recording.log_chunk(self.robot_id, start, chunk))
        driver = TickDriver(self.env, self.executor, self._human())
        episode_id = int(endpoints["next_episode_id"]) + self.index
        # budget.env_steps is the run's total: each actor takes its share and then waits to be stopped,
        # so the run ends at the budget instead of wherever the actors got to before the runtime noticed
        budget = cfg.budget.env_steps
        share = -(-budget // cfg.runtime.num_actors) if budget is not None else None
        tick = 0
        seq = 0
        last_status = 0.0
        while not self.stop and (share is None or self.env_steps < share):
            obs, _ = self.env.reset(seed=cfg.seed * 1_000_003 + episode_id)
            t_obs = time.time()  # when the current observation was taken
            writer = TransitionWriter(self.env.observation_spec)
            driver.reset()
            self.executor.start_episode(obs, tick, clock)
            clock.reset()
            for step in range(10**9):
                if not cfg.runtime.realtime:
                    self._wait_for_learner()
                if self.lease.lost.is_set():
                    print(f"[{self.name}] lost the lease on {self.robot_id}; stopping", file=sys.stderr, flush=True)
                    self.stop.set()
                if self.stop or (share is not None and self.env_steps >= share):
                    break
                if cfg.runtime.max_policy_lag:
                    self._throttle(tick, newest_weights)
                # the policy's chunk action, a held command on a stall, or the human's while it intervenes
                action, fields, stalled = driver.act(tick, obs, self.weights.version)
                if stalled:
                    recording.log_stall(self.robot_id, tick)
                self.intervention_steps += int(fields["intervention"])
                t_act = time.time()
                next_obs, reward, terminated, truncated, info = self.env.step(action)
                driver.executed(action)
                writer.add(obs, action, reward=reward, terminated=terminated, truncated=truncated,
                           success=bool(info.get("success", False)), episode_id=episode_id, step=step, tick=tick,
                           t_obs=t_obs, t_act=t_act, **fields)
                obs, t_obs = next_obs, time.time()
                tick += 1
                self.env_steps += 1
                self._steps_since_meta += 1
                if terminated or truncated:
                    self.episodes += 1
                    self.successes += int(bool(info.get("success", False)))
                    send(push, "transitions", self.robot_id, seq, {}, writer.flush(final_obs=obs))
                    seq += 1
                    if cfg.runtime.learning == "sync":
                        self._wait_for_updates(newest_weights)
                    break
                if len(writer) >= cfg.runtime.send_every:
                    send(push, "transitions", self.robot_id, seq, {}, writer.flush())
                    seq += 1
                self.weights.poll()
                now = time.monotonic()
                if now - last_status >= cfg.runtime.status_every_s:
                    self._write_status(clock)
                    last_status = now
                clock.wait()
            if len(writer):  # stopped mid-episode: deliver what was done, marked truncated; nothing is lost
                send(push, "transitions", self.robot_id, seq, {}, writer.flush(final_obs=obs, truncate=True))
                seq += 1
            episode_id += cfg.runtime.num_actors
        if not self.stop:
            print(f"[{self.name}] took its share of budget.env_steps ({share}); waiting to be stopped", flush=True)
            self._write_status(clock)
        while not self.stop:
            time.sleep(0.05)
        self._write_status(clock, final=True)
        client.close()
        recording.close()
        self.weights.close()
        push.close()  # lingers up to 5 s to deliver queued transitions
        ctx.term()
        self.env.close()

    def _write_status(self, clock, final: bool = False) -> None:
        write_json_atomic(self.run.status(self.name), {
            "robot_id": self.robot_id, "env_steps": self.env_steps, "episodes": self.episodes,
            "successes": self.successes, "intervention_steps": self.intervention_steps,
            "throttled_s": self.throttled_s, "waited_for_learner_s": self.waited_for_learner_s,
            "version": self.weights.version,
            "versions_received": len(self.weights.versions_received),
            "first_version": min(self.weights.versions_received, default=0), "rejected_messages": self.rejects.total,
            "last_reject": self.rejects.last_reason, "missed_deadlines": clock.missed_deadlines,
            **self.executor.metrics.summary(), "planned_delay_ticks": self.executor.delay.planned(),
            "p50_period_error_ms": clock.period_error_ms(0.5) if isinstance(clock, RealClock) else 0.0,
            "p99_period_error_ms": clock.period_error_ms(0.99) if isinstance(clock, RealClock) else 0.0,
            "pid": os.getpid(), "final": final,
        })


def main(run: RunDir, cfg: RunConfig, index: int) -> int:
    stop = StopFlag()
    try:
        Actor(run, cfg, index, stop).run_forever()
    except (TimeoutError, LookupError) as exc:
        print(exc, file=sys.stderr, flush=True)
        return 2
    return 0
