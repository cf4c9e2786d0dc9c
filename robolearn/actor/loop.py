"""The actor process: one robot's episodes through the shared ``EpisodeLoop``, wired to the learner.

    lease the robot -> connect it -> wait for the learner's endpoints and first weights
    episodes (``actor.episode.EpisodeLoop``):
        gate before each tick   sim pacing (the learner's utd ratio), max_policy_lag, stop / budget / lost lease
        each tick               observe -> act (chunk executor or the human) -> apply -> notify:
                                ``TransitionRecorder`` journals the step (and ``StepLedger`` notes it
                                recorded; it noted it begun before the apply) and sends batches,
                                this actor counts, polls weights, writes status
        each episode end        learner.learning=sync: wait until the learner did the updates due
    disconnect the robot -> release the lease

The newest received weights are loaded just before each chunk request, so every chunk comes from one
version. Inference runs in this process, unless ``runtime.policy_server=true`` (then the run's one policy
server process answers every actor of this machine). With ``actor.realtime=false`` it runs under a
simulated clock (an inference takes ``actor.inference_delay_ticks`` ticks, and the loop runs as fast as the
learner's update-to-data ratio allows); with ``realtime=true`` the loop sleeps to the robot's control period,
as on hardware, and the policy answers inside the tick or, with ``actor.async_inference=true``, while the
robot keeps executing (a worker thread, or the server: needs chunks longer than the delay in ticks).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import zmq

from robolearn.actor.chunking import ChunkExecutor
from robolearn.actor.episode import EpisodeLoop, StepRecord
from robolearn.actor.gui_feed import GuiFeed
from robolearn.actor.step_ledger import StepLedger
from robolearn.actor.transition_recorder import TransitionRecorder
from robolearn.actor.weights_cache import WeightsCache
from robolearn.builders import build_policy, build_task
from robolearn.clock import Clock, DelaySampler, RealClock, SimClock
from robolearn.hardware.resources import LeaseClient
from robolearn.hardware.safety import EStop, GuardedRobot
from robolearn.hardware.teleop import Intervener
from robolearn.inference.client import ChunkClient, RemoteClient, SimulatedLatencyClient, ThreadedClient
from robolearn.inference.runner import ChunkPolicyRunner
from robolearn.logging.recording import Recording
from robolearn.logging.status import read_json, write_json_atomic
from robolearn.registry import lookup
from robolearn.rundir import RunDir
from robolearn.stop_flag import StopFlag
from robolearn.transport.gui_channel import Command
from robolearn.transport.security import load_keys
from robolearn.transport.spool import Spool
from robolearn.transport.transitions import TRANSITIONS, TransitionSender
from robolearn.transport.weights import WeightSubscriber
from robolearn.transport.wire import RejectCounter, decode

if TYPE_CHECKING:  # the config is built above this layer (robolearn.config); only its type is named here
    from robolearn.config import RunConfig


class Actor:
    def __init__(self, run: RunDir, cfg: RunConfig, index: int, stop: StopFlag) -> None:
        self.run, self.cfg, self.index, self.stop = run, cfg, index, stop
        self.settings = cfg.actor
        torch.set_num_threads(self.settings.threads)
        torch.manual_seed(cfg.seed + 1000 + index)
        self.env = build_task(cfg)  # its robot is constructed, not connected: that waits for the lease
        self.policy = build_policy(cfg, self.env.observation_spec, self.env.action_spec)
        self.policy.eval()
        self.robot_id = ""  # the leased resource's name
        self.name = f"actor-{index}"
        self.rejects = RejectCounter()
        self.env_steps = 0
        self.episodes = 0
        self.successes = 0
        self.intervention_steps = 0
        self.throttled_s = 0.0  # waiting for weights within actor.max_policy_lag
        self.waited_for_learner_s = 0.0  # learner.learning=sync: waiting at episode ends
        self.spool_full_s = 0.0  # holding the robot while the spool was past actor.max_spool_mb
        # budget.env_steps is the run's total: each actor takes its share and then waits to be stopped,
        # so the run ends at the budget instead of wherever the actors got to before the runtime noticed
        budget = cfg.budget.env_steps
        self.share = -(-budget // cfg.runtime.total_actors) if budget is not None else None
        self._status_env_steps: int | None = None  # the learner's ingested steps in the newest status
        self._steps_since_status = 0
        self._last_status_write = 0.0
        self.operator = None  # the person at a real robot (teleop=...), connected after the lease
        self.gui: GuiFeed | None = None  # gui.enabled: this robot's tile on the page
        self.gui_commands_ignored = 0    # acts from the page this run has no use for (no person, another device)
        self.help_wait_s = 0.0           # held while asking for help (gui.help_holds)

    # --- start and end: the lease brackets every use of the robot ----------------------------------------
    def run_forever(self) -> None:
        cfg = self.cfg
        resources = self._wait_for_file(self.run.resources, "resource manager")
        if resources is None:
            return
        self.keys = load_keys(cfg.runtime.keys_dir)
        # a robot PC that joined a run elsewhere leases its robots from its own machine's manager, on loopback
        self.lease = LeaseClient(resources["endpoint"], self.name, keys=self.keys if resources.get("curve") else None)
        try:
            # the Ray runtime assigns each actor the robot on the node it placed it on; elsewhere any free one
            assigned = str(resources.get("assigned", {}).get(self.name, ""))
            self.robot_id = self.lease.acquire(self.env.robot.name, timeout_s=cfg.runtime.startup_timeout_s,
                                               stop=lambda: bool(self.stop), name=assigned)[0]
            self.env.robot.connect()
            # from here on every command goes through the guard (limits, non-finite, watchdog, e-stop)
            self.guard = GuardedRobot(self.env.robot, self.settings.safety,
                                      EStop(self.run.estop(self.robot_id), also=(self.run.estop(),)),
                                      self.env.robot.config.control_hz, watch_time=self.settings.realtime)
            self.env.robot = self.guard
            if self.guard.estop.latched:
                print(f"[{self.name}] the e-stop is latched: {self.robot_id} holds until a person re-arms it "
                      f"(robolearn rearm {self.run.root})", file=sys.stderr, flush=True)
            try:
                self.operator = self._operator()  # the person's devices too open only once the lease is held
                self._act()
            finally:
                try:
                    if self.operator is not None:
                        self.operator.disconnect()
                finally:
                    self.env.close()  # disconnects the robot before the lease is released
        finally:
            self.lease.close()

    def _wait_for(self, what: str, ready: Callable[[], Any], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while not self.stop:
            value = ready()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"[{self.name}] no {what} after {timeout_s:.0f} s")
            time.sleep(0.02)
        return None

    def _wait_for_file(self, path: Path, what: str) -> dict | None:
        """A rendezvous file another process writes (resources.json, endpoints.json), once it is there."""
        return self._wait_for(what, lambda: read_json(path), self.cfg.runtime.startup_timeout_s)

    def _human(self) -> Intervener | None:
        """The teleop that may take over: the person of task=real (``teleop=...``), or the scripted human of a
        sim task (``actor.human=scripted``)."""
        if self.operator is not None:
            return self.operator
        if self.settings.human == "none":
            return None
        return lookup("human", self.settings.human).factory(self.env)

    def _operator(self):
        """``teleop=...``: the person at the robot (``hardware.operator``), connected, its e-stop key wired to
        this robot's latch. None for sim tasks."""
        if self.cfg.teleop.name == "none":
            return None
        operator = lookup("teleop", self.cfg.teleop.name).factory(self.cfg.teleop, self.env)
        operator.estop = self.guard.estop
        operator.connect()
        return operator

    def _client(self, runner: ChunkPolicyRunner, ctx: zmq.Context) -> tuple[Clock, ChunkClient] | None:
        """None: stopped while waiting for the policy server."""
        settings = self.settings
        if settings.realtime:
            clock = RealClock(self.env.robot.config.control_hz)
            if self.cfg.runtime.policy_server:  # the run's one policy server process (it follows the learner)
                server = self._wait_for_file(self.run.policy_server, "policy server")
                if server is None:
                    return None
                print(f"[{self.name}] asking the policy server at {server['endpoint']} for chunks", flush=True)
                # inside the tick (no async_inference): wait up to half the period for each answer
                wait_s = 0.0 if settings.async_inference else 0.5 * clock.period
                return clock, RemoteClient(server["endpoint"], self.robot_id, getattr(self.policy, "horizon", 1),
                                           self.env.action_spec.dim, ctx, self.keys, wait_s=wait_s)
            if settings.async_inference:  # a worker thread; the loop never waits for the policy
                return clock, ThreadedClient(runner, threads=settings.threads,
                                             mid_timeout_s=self.cfg.runtime.mid_timeout_s)
            # inside the tick: fine while a forward pass is a small part of the control period
            return clock, SimulatedLatencyClient(runner, SimClock())
        clock = SimClock(DelaySampler("fixed", ticks=settings.inference_delay_ticks))
        return clock, SimulatedLatencyClient(runner, clock)

    def _act(self) -> None:
        cfg = self.cfg
        endpoints = self._wait_for_file(self.run.endpoints, "learner endpoints")
        if endpoints is None:
            return
        ctx = zmq.Context()
        spool = Spool(self.run.spool(self.name), int(self.settings.max_spool_mb * 1e6))
        self.sender = TransitionSender(ctx, endpoints["transitions"], self.name, spool, self.keys,
                                       self.settings.resend_after_s)
        recovered = self.sender.recover_staged()
        if recovered:
            print(f"[{self.name}] recovered {recovered} steps an earlier process took but had not sent as a batch "
                  "(its episode ends there, truncated)", flush=True)
        if spool.pending():
            print(f"[{self.name}] re-sending {len(spool.pending())} batches an earlier run left unacknowledged",
                  flush=True)
        self.weights = WeightSubscriber(ctx, endpoints["weights"], self.policy, self.rejects, self.keys)

        def first_weights() -> bool:
            self.weights.poll(timeout_ms=20)
            return self.weights.apply_pending()

        self.weights_cache = WeightsCache(self.run.spool(self.name) / "weights.npz")
        kept = self.weights_cache.load(self.policy)
        if kept is not None:  # an earlier process of this actor acted with these: go on with them at once
            self.weights.version = kept
            print(f"[{self.name}] acting with the weights v{kept} it kept; newer ones come from the learner",
                  flush=True)
        elif self._wait_for("weights from the learner", first_weights, cfg.runtime.startup_timeout_s):
            self.weights_cache.save(self.weights.version, self.policy)
        else:
            return
        print(f"[{self.name}] weights v{self.weights.version}; acting on {self.robot_id}", flush=True)

        self.runner = ChunkPolicyRunner(self.policy, self.env.observation_spec, self.env.action_spec.dim,
                                        version=self.weights.version, explore=True)
        got = self._client(self.runner, ctx)
        if got is None:
            return
        self.clock, client = got
        self.recording = Recording(self.run.root, cfg.run_name, self.run.root / f"{self.name}.rrd")
        self.executor = ChunkExecutor(client, self.env.action_spec, getattr(self.policy, "horizon", 1),
                                      self.settings.chunking, self.robot_id, before_request=self._newest_weights,
                                      on_chunk=self._on_chunk,
                                      while_waiting=self._while_waiting_for_chunk)
        ledger = StepLedger(self.run.ledger(self.name), self.robot_id)

        def journal(step: dict) -> None:  # the ledger says recorded the instant the journal holds the step
            self.sender.stage(self.robot_id, step)
            ledger.recorded(int(step["episode_id"][0]), int(step["step"][0]))

        recorder = TransitionRecorder(self.env.observation_spec,
                                      lambda arrays: self.sender.send(self.robot_id, arrays), self.settings.send_every,
                                      stage=journal)
        if self.operator is not None:  # resets and waits for the person keep the channels going
            self.env.attach_operator(self.operator, keep_waiting=self._keep_waiting_for_person,
                                     realtime=self.settings.realtime)
        subscribers = [ledger, recorder, self]
        if cfg.gui.on_for(cfg.robot.name):
            self.gui = GuiFeed(cfg.gui, self.run, self.robot_id, self.env, ctx, self.keys, self._in_control,
                               lambda: getattr(self.operator, "prompt", ""), self._queued_actions, self._gui_command,
                               uncertainty=self._uncertainty if cfg.gui.uncertainty_samples else None)
            subscribers.append(self.gui)
        loop = EpisodeLoop(self.env, self.executor, self.clock, self._human(), subscribers=subscribers,
                           gate=self._gate, policy_version=lambda: self.weights.version)
        episode_id = self._first_episode_id(int(endpoints["next_episode_id"]), spool)
        while not self.stop and not self._share_taken():
            self._hold_while_estopped()
            if self.stop:
                break
            spool.note("next_episode", episode_id + cfg.runtime.total_actors)  # a restart continues past it
            result = loop.run(seed=cfg.seed * 1_000_003 + episode_id, episode_id=episode_id)
            if not result.stopped and cfg.learner.learning == "sync":
                self._wait_for_updates()
            episode_id += cfg.runtime.total_actors
        if not self.stop:
            print(f"[{self.name}] took its share of budget.env_steps ({self.share}); waiting to be stopped",
                  flush=True)
            self._write_status()
        while not self.stop:
            self.sender.poll(timeout_ms=50)
        if not self.sender.drain(self.settings.drain_timeout_s):
            print(f"[{self.name}] {len(spool.pending())} batches still unacknowledged after "
                  f"{self.settings.drain_timeout_s:.0f} s; kept in {spool.dir} for the next start", flush=True)
        self._write_status(final=True)
        if self.gui is not None:
            self.gui.close()
        ledger.close()
        client.close()
        self.recording.close()
        self.weights.close()
        self.sender.close()
        ctx.term()

    def _first_episode_id(self, next_free: int, spool: Spool) -> int:
        """Episode ids of actor ``index`` are ``index`` mod the run's actors, so no two actors ever share one.
        The first is past ``next_free`` (what the learner's buffer held when it last started: a restarted
        learner offers a new one, of any residue), past what an earlier process of this actor used (the
        spool's note) and past every batch still spooled."""
        used = [next_free - 1, (spool.noted("next_episode") or 0) - 1]
        for seq in spool.pending():
            frames = spool.read(seq)
            if frames:
                used.append(int(decode(frames, frozenset({TRANSITIONS})).arrays["episode_id"][-1]))
        return first_episode_id(max(used) + 1, self.index, self.cfg.runtime.total_actors)

    def _share_taken(self) -> bool:
        return self.share is not None and self.env_steps >= self.share

    def _newest_weights(self) -> bool:
        """Before each request: load the newest received weights, so the chunk comes from the newest version."""
        if self.weights.apply_pending():
            self.runner.version = self.weights.version
            self.weights_cache.save(self.weights.version, self.policy)
            return True
        return False

    # --- the gate before each tick -------------------------------------------------------------------------
    def _gate(self, tick: int) -> bool:
        if self.gui is not None:
            self.gui.take_commands()
        if self.gui is not None and self.cfg.gui.help_holds and self.gui.asks_for_help and not self.gui.dismissed:
            self._hold_for_help()
            self.executor.interrupt(tick)  # what was queued before the hold is stale now
        if not self.settings.realtime:
            self._wait_for_learner()
        if self.lease.lost.is_set():
            print(f"[{self.name}] lost the lease on {self.robot_id}; stopping", file=sys.stderr, flush=True)
            self.stop.set()
        if self.sender.spool.full:
            self._hold_for_spool()
        if self.stop or self._share_taken():
            return False
        if self.guard.estop.latched:  # the episode ends here (truncated); the next one waits for a re-arm
            return False
        if self.settings.max_policy_lag:
            self._throttle(tick)
        return True

    def _hold_while_estopped(self) -> None:
        """Before an episode: while the e-stop is latched the robot holds (no step, no reset) and the channels
        keep going; only a person's re-arm ends the wait."""
        if not self.guard.estop.latched:
            return
        state = self.guard.estop.state()
        why = f"{state.by}: {state.reason}" if state.reason else state.by
        print(f"[{self.name}] e-stop latched ({why}); {self.robot_id} holds until re-armed "
              f"(robolearn rearm {self.run.root})", file=sys.stderr, flush=True)
        while self.guard.estop.latched and not self.stop:
            if self.lease.lost.is_set():  # the robot may be another actor's now: not one more command to it
                print(f"[{self.name}] lost the lease on {self.robot_id}; stopping", file=sys.stderr, flush=True)
                self.stop.set()
                break
            self.guard.hold()
            self._wait_a_moment()
            self._write_status_when_due()
        if not self.stop:
            print(f"[{self.name}] re-armed; {self.robot_id} acts again", flush=True)

    def _hold_for_spool(self) -> None:
        """Back-pressure: while more than ``actor.max_spool_mb`` waits for the learner's acks, the robot holds
        (no step) instead of dropping data."""
        t0 = time.monotonic()
        print(f"[{self.name}] spool full ({self.sender.spool.bytes / 1e6:.0f} MB unacknowledged); holding the robot",
              file=sys.stderr, flush=True)
        while self.sender.spool.full and not self.stop:
            self.sender.poll(timeout_ms=50)
            if self.gui is not None:
                self.gui.pump()
        self.spool_full_s += time.monotonic() - t0

    def _while_waiting_for_chunk(self) -> bool:
        """An episode's first chunk is late (the policy server restarting): keep the channels going meanwhile."""
        self.weights.poll()
        self.sender.poll()
        if self.gui is not None:
            self.gui.pump()
        return not self.stop

    def _keep_waiting_for_person(self) -> bool:
        """A beat of a reset or of the wait for the person's "ready": channels polled, status and page kept fresh;
        False once the run stops or the e-stop latches (the episode then ends before its first step)."""
        self.weights.poll()
        self.sender.poll()
        self._write_status_when_due()
        if self.gui is not None:
            self.gui.pump()
        return not self.stop and not self.guard.estop.latched

    def _wait_a_moment(self) -> None:
        """One beat of a wait for the learner: weights and status in, and the transitions channel kept going
        (acks in, re-sends out): the learner may be waiting for a batch a reset link lost."""
        self.weights.poll(timeout_ms=20)
        self.sender.poll()
        if self.gui is not None:
            self.gui.pump()

    def _uncertainty(self, obs: dict[str, np.ndarray]) -> float:
        """The policy's spread at ``obs`` (``gui.uncertainty_samples`` sampled chunks; on the GUI feed's thread)."""
        return ChunkPolicyRunner(self.policy, self.env.observation_spec, self.env.action_spec.dim).spread(
            obs, self.cfg.gui.uncertainty_samples)

    def _on_chunk(self, start: int, chunk: np.ndarray) -> None:
        self.recording.log_chunk(self.robot_id, start, chunk)
        if self.gui is not None:
            self.gui.on_chunk(start, chunk)

    # --- the page (gui.enabled)
    def _in_control(self) -> str:
        """Who drives the robot now, as its tile shows it."""
        if self.guard.estop.latched:
            return "estop"
        if getattr(self.operator, "intervening", False):
            return "human"
        if getattr(self.operator, "prompt", ""):
            return "waiting"
        return "policy"

    def _queued_actions(self, tick: int) -> tuple[np.ndarray, int]:
        """The actions queued from ``tick`` on (what the robot executes unless a new chunk replaces them) and how
        many of them are committed (they run while the next chunk is computed)."""
        entries = self.executor.queue.actions(tick, self.executor.horizon)
        if not entries:
            return np.zeros((0, self.env.action_spec.dim), np.float32), 0
        return np.stack([e.action for e in entries]), self.executor.delay.planned()

    def _gui_command(self, command: Command) -> None:
        if command.kind == "dismiss":  # the person saw the robot's help request and lets it go on
            self.gui.dismissed = True
        elif not (hasattr(self.operator, "gui_command") and self.operator.gui_command(command)):
            self.gui_commands_ignored += 1

    def _hold_for_help(self) -> None:
        """``gui.help_holds``: while the robot asks for help (its policy's uncertainty above ``gui.help_threshold``)
        it holds (no step) until a person takes over or dismisses the request (robot-gated intervention)."""
        t0 = time.monotonic()
        while not self.stop and not self.guard.estop.latched and self.gui.asks_for_help and not self.gui.dismissed:
            if self.lease.lost.is_set():
                return
            if self.operator is not None:
                self.operator.poll()
                if getattr(self.operator, "intervening", False):
                    self.gui.dismissed = True  # taking over answers the request
                    break
            self.guard.hold()  # held by command, as a real arm's servos hold it (a twin settles, not freezes)
            self._wait_a_moment()
            self._write_status_when_due()
        self.help_wait_s += time.monotonic() - t0

    def _wait_for_learner(self) -> None:
        """Sim only: hold the (frozen) simulation while the learner is behind its update-to-data ratio. The
        learner's status carries its ingested step count; steps taken since that status are counted here."""
        while not self.stop:
            status = self.weights.learner_status
            if status is not None:
                if status.env_steps != self._status_env_steps:
                    self._status_env_steps, self._steps_since_status = status.env_steps, 0
                allowed = status.learned_env_steps + self.settings.max_steps_ahead
                if status.env_steps + self._steps_since_status < allowed:
                    return
            self._wait_a_moment()

    def _throttle(self, tick: int) -> None:
        """``actor.max_policy_lag``: while the learner is more than that many versions ahead of the weights
        this actor acts with, do not step (a real robot holds its last command): wait for newer weights,
        load them and drop the queued chunk they make stale, so the next chunk comes from them."""
        t0 = None
        while not self.stop:
            status = self.weights.learner_status
            learner_version = status.version if status is not None else 0
            if learner_version - self.weights.version <= self.settings.max_policy_lag:
                break
            t0 = t0 or time.monotonic()
            self._wait_a_moment()
            if self._newest_weights():
                self.executor.interrupt(tick)
        if t0 is not None:
            self.throttled_s += time.monotonic() - t0

    def _wait_for_updates(self) -> None:
        """``learner.learning=sync``: the robot waits (holding still) until the learner has ingested every step
        sent and done the updates due for them, then takes the newest weights."""
        t0 = time.monotonic()
        while not self.stop:
            status = self.weights.learner_status
            if status is not None and status.env_steps >= self.env_steps and status.caught_up:
                break
            self._wait_a_moment()
        self._newest_weights()
        self.waited_for_learner_s += time.monotonic() - t0

    # --- EpisodeLoop subscriber ----------------------------------------------------------------------------
    def on_step(self, step: StepRecord) -> None:
        self.guard.note_stalled(step.stalled)
        if step.stalled:
            self.recording.log_stall(self.robot_id, step.tick)
        self.intervention_steps += int(step.fields["intervention"])
        self.env_steps += 1
        self._steps_since_status += 1
        self.sender.poll()
        if step.done:
            self.episodes += 1
            self.successes += int(step.success)
            return
        self.weights.poll()
        self._write_status_when_due()

    def _write_status_when_due(self) -> None:
        """The status file, at most every ``runtime.status_every_s``."""
        now = time.monotonic()
        if now - self._last_status_write >= self.cfg.runtime.status_every_s:
            self._write_status()
            self._last_status_write = now

    def _frame_ages(self) -> dict[str, dict[str, float]]:
        """A real robot's camera frame ages (p50, max in ms, per camera); {} for the twin, which renders on read."""
        ages = getattr(self.guard.robot, "frame_ages", None)
        return ages.summary() if ages is not None else {}

    def _write_status(self, final: bool = False) -> None:
        clock = self.clock
        write_json_atomic(self.run.status(self.name), {
            "robot_id": self.robot_id, "env_steps": self.env_steps, "episodes": self.episodes,
            "successes": self.successes, "intervention_steps": self.intervention_steps,
            "throttled_s": self.throttled_s, "waited_for_learner_s": self.waited_for_learner_s,
            "batches_sent": self.sender.sent, "batches_acked": self.sender.acked,
            "batches_rejected": self.sender.rejected, "batches_unacked": len(self.sender.spool.pending()),
            "batches_duplicate": self.sender.duplicates, "batches_later": self.sender.later,
            "reconnects": self.sender.reconnects,
            "spool_full_s": self.spool_full_s, "spool_problems": self.sender.spool.problems[-5:],
            "version": self.weights.version,
            "versions_received": len(self.weights.versions_received),
            "first_version": min(self.weights.versions_received, default=0), "rejected_messages": self.rejects.total,
            "last_reject": self.rejects.last_reason, "missed_deadlines": clock.missed_deadlines,
            **self.executor.metrics.summary(), "planned_delay_ticks": self.executor.delay.planned(),
            "p50_period_error_ms": clock.period_error_ms(0.5) if isinstance(clock, RealClock) else 0.0,
            "p99_period_error_ms": clock.period_error_ms(0.99) if isinstance(clock, RealClock) else 0.0,
            "safety": self.guard.counts.as_dict(), "estop_latched": self.guard.estop.latched,
            "robot_failed_reads": getattr(self.guard.robot, "failed_reads", 0),  # a real robot's re-reads
            "robot_frame_age_ms": self._frame_ages(),
            "watchdog_tripped": self.guard.watchdog_tripped,
            "operator_prompt": getattr(self.operator, "prompt", ""),
            "gui": {"frames_sent": self.gui.frames_sent, "commands_ignored": self.gui_commands_ignored,
                    "help_wait_s": round(self.help_wait_s, 2), "uncertainty": self.gui.uncertainty,
                    "command_delay_p50_ms": self.gui.command_delay_ms(0.5),
                    "command_delay_p99_ms": self.gui.command_delay_ms(0.99),
                    "error": repr(self.gui.failure) if self.gui.failure else ""} if self.gui is not None else {},
            "task": asdict(self.env.counts) if is_dataclass(getattr(self.env, "counts", None)) else {},
            "pid": os.getpid(), "final": final,
        })


def first_episode_id(at_least: int, index: int, actors: int) -> int:
    """The smallest episode id >= ``at_least`` that is actor ``index``'s (``index`` mod ``actors``)."""
    return at_least + (index - at_least) % actors


def main(run: RunDir, cfg: RunConfig, index: int) -> int:
    stop = StopFlag()
    try:
        Actor(run, cfg, index, stop).run_forever()
    except (TimeoutError, LookupError) as exc:
        print(exc, file=sys.stderr, flush=True)
        return 2
    return 0
