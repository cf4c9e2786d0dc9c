"""A real-time control loop at 50 Hz under slow inference: stalls and tick period error per mode.

    make bench-control-loop        (python benchmarks/control_loop.py [--ticks 10000])

The robot is the MuJoCo SO-101 (reach scene, stepped once per tick) driven by the actors' own episode loop
(``actor.episode.EpisodeLoop``: a ``ChunkExecutor`` under a ``RealClock`` at 50 Hz). The policy runs in a
separate policy-server process (as deployed); each answer is held back to a uniform draw of latency. Chunks hold
H = 24 actions (480 ms at 50 Hz). Two cases, each mode one after the other:

    executed_part   latency 0.5-0.75 of what the robot executes of each chunk (s = 12 actions: 120-180 ms,
                    6-9 ticks); the server answers one batch at a time
        latency_aware   asks when the queue would run out within the 0.95 quantile of measured delays (or after s
                        actions), sending the committed actions as the chunk's prefix
        naive_async     lerobot's rule: asks when queued / H <= 0.5
    whole_chunk     latency 0.5-0.75 of the whole chunk (240-360 ms, 12-18 ticks), a server that answers
                    requests concurrently (``--concurrent-latency``: a later request is served while earlier
                    answers wait out their latency)
        latency_aware_pipelined   asks for a chunk every s = 4 actions after the newest one is expected,
                                  up to 6 in flight (``chunking.max_in_flight``)
        latency_aware             the same with one request at a time
        naive_async               lerobot's rule (one request at a time, as its client)

With one request at a time a chunk that arrives after d ticks brings at most H - d new actions while the next
answer takes d ticks again, so any such scheduler stalls once d > H / 2: the whole_chunk case. Pipelined, a
chunk is due every s ticks and each arrives within the planned delay, which holds while s + delay <= H.

Goals: ``stalled_ticks`` == 0 and ``p99_period_error_ms`` <= 2 (latency_aware, executed_part), and
``pipelined_stalled_ticks`` == 0 (latency_aware_pipelined, whole_chunk). The policy is a randomly initialised
flow chunk policy: what it outputs does not matter here, only when it arrives. One episode lasts the whole run
(no resets inside the timed ticks).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

from robolearn.actor.chunking import ChunkExecutor, ChunkingConfig  # noqa: E402
from robolearn.actor.episode import EpisodeLoop, StepRecord  # noqa: E402
from robolearn.clock import RealClock  # noqa: E402
from robolearn.inference.client import RemoteClient  # noqa: E402
from robolearn.policies.flow_chunk import FlowChunkPolicy, FlowChunkPolicyConfig  # noqa: E402
from robolearn.runtime.policy_server import spawn_server  # noqa: E402
from robolearn.sim.reach import ReachConfig, ReachEnv  # noqa: E402
from robolearn.sim.so101 import SimSO101Config  # noqa: E402

HZ, H = 50, 24
# case -> (latency as a fraction of this many actions' time, the server answers concurrently, modes)
# mode -> (chunking mode, s = execute horizon, requests in flight)
CASES = {"executed_part": (12, False, {"latency_aware": ("latency_aware", 12, 1),
                                       "naive_async": ("naive_async", 12, 1)}),
         "whole_chunk": (H, True, {"latency_aware_pipelined": ("latency_aware", 4, 6),
                                   "latency_aware": ("latency_aware", 4, 1),
                                   "naive_async": ("naive_async", 4, 1)})}
POLICY = {"chunk_horizon": H, "max_prefix": 12, "hidden_dims": [256, 256], "flow_steps": 10}


class TickWork:
    """Gate and subscriber of the episode loop: ends the episode after ``ticks`` ticks and measures each tick's
    work (from the start of the tick, after the clock's wait, to the end of its env step) in ms."""

    def __init__(self, ticks: int) -> None:
        self.ticks, self.ms, self._start = ticks, [], 0.0

    def gate(self, tick: int) -> bool:
        self._start = time.perf_counter()
        return tick < self.ticks

    def on_step(self, step: StepRecord) -> None:  # noqa: ARG002
        self.ms.append((time.perf_counter() - self._start) * 1e3)


def run_mode(mode: str, execute: int, in_flight: int, ticks: int, endpoint: str) -> dict:
    env = ReachEnv(ReachConfig(episode_ticks=10 * ticks, success_radius=1e-9), SimSO101Config(control_hz=HZ))
    client = RemoteClient(endpoint, f"robot-{mode}-{in_flight}", H, env.action_spec.dim)
    cfg = ChunkingConfig(mode=mode, splice="prefix", max_prefix=POLICY["max_prefix"], delay_quantile=0.95,
                         execute_horizon=execute, max_in_flight=in_flight)
    executor = ChunkExecutor(client, env.action_spec, H, cfg)
    clock = RealClock(HZ)
    work = TickWork(ticks)
    loop = EpisodeLoop(env, executor, clock, subscribers=[work], gate=work.gate)
    env.robot.connect()
    t0 = time.perf_counter()
    loop.run(seed=0)
    wall = time.perf_counter() - t0
    client.close()
    env.close()
    m = executor.metrics.summary()
    return {"ticks": ticks, "execute_horizon": execute, "max_in_flight": in_flight, "wall_s": round(wall, 2),
            "stalled_ticks": m["stalled_ticks"],
            "p50_period_error_ms": round(clock.period_error_ms(0.5), 4),
            "p99_period_error_ms": round(clock.period_error_ms(0.99), 4),
            "max_period_error_ms": round(clock.period_error_ms(1.0), 3),
            "missed_deadlines": clock.missed_deadlines, "p99_tick_work_ms": round(float(np.quantile(work.ms, 0.99)), 3),
            "planned_delay_ticks": executor.delay.planned(), **{k: m[k] for k in
                                                                ("requests", "delay_histogram", "chunk_utilisation")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=10_000)
    args = ap.parse_args()
    env = ReachEnv()
    torch.manual_seed(0)
    policy = FlowChunkPolicy(env.observation_spec, env.action_spec, FlowChunkPolicyConfig(**POLICY))
    env.close()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "policy.pt"
        torch.save(policy.state_dict(), weights)
        for case, (actions, concurrent, modes) in CASES.items():
            latency_ms = (0.5 * actions / HZ * 1e3, 0.75 * actions / HZ * 1e3)
            extra = ["--extra-latency-ms", str(latency_ms[0]), str(latency_ms[1])]
            proc, endpoint = spawn_server("reach", "flow_chunk", str(weights), Path(tmp) / f"{case}.json", 0, POLICY,
                                          extra + (["--concurrent-latency"] if concurrent else []))
            results[case] = {"inference_latency_ms": list(latency_ms), "server_concurrent": concurrent, "modes": {}}
            try:
                for mode, (kind, execute, in_flight) in modes.items():
                    print(f"{case} {mode}: {args.ticks} ticks at {HZ} Hz ({args.ticks / HZ:.0f} s)...", flush=True)
                    results[case]["modes"][mode] = run_mode(kind, execute, in_flight, args.ticks, endpoint)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
    print(f"\n{'case':>14} {'mode':>24} {'stalled':>8} {'p50 err ms':>11} {'p99 err ms':>11} {'max err ms':>11} "
          f"{'util':>6}")
    for case, r in results.items():
        for mode, m in r["modes"].items():
            print(f"{case:>14} {mode:>24} {m['stalled_ticks']:>8} {m['p50_period_error_ms']:>11.3f} "
                  f"{m['p99_period_error_ms']:>11.3f} {m['max_period_error_ms']:>11.3f} {m['chunk_utilisation']:>6.2f}")
    la = results["executed_part"]["modes"]["latency_aware"]
    piped = results["whole_chunk"]["modes"]["latency_aware_pipelined"]
    command = run_command(ap, args, "bench-control-loop", "control_loop.py")
    path = write_result(
        "control_loop", command,
        [goal("stalled_ticks", la["stalled_ticks"], "<=", 0),
         goal("p99_period_error_ms", la["p99_period_error_ms"], "<=", 2.0),
         goal("pipelined_stalled_ticks", piped["stalled_ticks"], "<=", 0)],
        cases=results, settings={"hz": HZ, "chunk_horizon": H, "policy": POLICY,
                                 "transport": "policy server process, zmq DEALER/ROUTER"})
    print(f"\nlatency_aware: stalled_ticks {la['stalled_ticks']} (goal 0), p99 period error "
          f"{la['p99_period_error_ms']:.3f} ms (goal <= 2); pipelined at 0.5-0.75 of the whole chunk: stalled_ticks "
          f"{piped['stalled_ticks']} (goal 0; naive_async "
          f"{results['whole_chunk']['modes']['naive_async']['stalled_ticks']}) -> {path}")


if __name__ == "__main__":
    main()
