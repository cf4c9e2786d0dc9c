"""A fleet of simulated robots in real time, one learner, one batched policy server: ``runtime=local`` against
``runtime=ray``, side by side.

    make bench-fleet      (python benchmarks/fleet.py [--robots 1 2 4 8] [--runs 3] [--window-s 40])

Each run is ``robolearn run task=reach actor.realtime=true runtime.policy_server=true runtime.num_actors=N
runtime={local|ray} robot.control_hz=50 policy.chunk_horizon=10 actor.async_inference=true
actor.chunking.margin=2`` (SAC from state;
every robot a MuJoCo SO-101 paced at 50 Hz, asking the one policy server for chunks of 10 actions ahead of need,
off the tick; the learner updating as it does in any run). Ray's instance is started by the run
itself (no address), so its start-up is the run's. For each N the two runtimes alternate, ``--runs`` times,
the order flipped every run. The measurement window opens ``--settle-s`` after every actor has taken its first
step and lasts ``--window-s``; what is read in it comes from the processes' own status files:

    throughput efficiency   the actors' env steps in the window / (N x 50 Hz x window)
    learner ingest          the learner's stored env steps in the window / window (steps/s)
    server batch size       the policy server's requests / batches over the run
    stalled ticks           ticks with no action to apply (also reported over the whole run, start-up included)
    chunk utilisation       the share of each chunk's actions executed (start to window end, median over robots)
and from the run's summary: policy lag p95 (versions between the weights that acted and the learner's newest,
over every stored transition). The run is then stopped as on Ctrl-C.

Goals (N = 8): ``fleet_throughput_efficiency_n8`` >= 0.95 on both runtimes, ``stalled_ticks_n8`` = 0 and
``policy_lag_p95_n8`` <= 2 (the worse of the two runtimes), ``ray_over_local_throughput_n8`` >= 0.95 (medians
of the runs). This machine has 2 cores for N actors, a policy server and a learner: what it shows at N = 8 is a
lower bound for a machine with a core per robot. Both runtimes run here, on one machine: ``ray_over_local``
is the cost of hosting the same processes under Ray (its daemons, a Ray actor per process, the driver's polling),
not of placing them on other machines. With 3 runs, ``local`` goes first twice.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ROBOLEARN, goal, run_command, spread, write_result  # noqa: E402

HZ = 50
# chunks of 10 actions asked for ahead (latency-aware, off the tick): the product's own way to keep a 50 Hz loop fed;
# two ticks of slack on the planned delay (actor.chunking.margin): 8 loops on 2 cores answer late now and then, and
# each answer later than the planned delay plus the slack is a stalled tick: with none, 10-33 in a 40 s window; with
# one, 0-5 (an answer takes 3 ticks or more about once in 200-500 requests here); with two, none in 4 development
# runs. The cost: a chunk is asked for a tick earlier, so a little more of the last one goes unused
# (chunk_utilisation in the results)
POLICY = ["policy.chunk_horizon=10", "actor.async_inference=true", "actor.chunking.margin=2"]


def _status(run: Path, name: str, retry_s: float = 0.0) -> dict:
    """A process's status file; {} if it is not there (yet): with ``retry_s``, asked again until then."""
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return json.loads((run / "status" / f"{name}.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):  # not written yet
            if time.monotonic() >= deadline:
                return {}
            time.sleep(0.02)


def _wait_for_ray_to_go(timeout_s: float = 60.0) -> None:
    """Until no Ray daemon of the last run is left (its shutdown must not overlap the next run)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        names = []
        for comm in Path("/proc").glob("[0-9]*/comm"):
            try:
                names.append(comm.read_text().strip())
            except OSError:  # the process exited meanwhile
                continue
        if not {"raylet", "gcs_server"} & set(names):
            return
        time.sleep(0.5)
    raise RuntimeError(f"Ray's daemons were still running {timeout_s:.0f} s after the run ended")


def one_run(work: Path, runtime: str, n: int, settle_s: float, window_s: float, tag: str) -> dict:
    name = f"{runtime}-{n}-{tag}"
    minutes = (settle_s + window_s + 300) / 60  # a bound only: the run is stopped (Ctrl-C) when the window closes
    args = [str(ROBOLEARN), "run", "task=reach", f"runtime={runtime}", f"runtime.num_actors={n}",
            "runtime.policy_server=true", "actor.realtime=true", f"robot.control_hz={HZ}", *POLICY,
            f"budget.minutes={minutes:.2f}", "runtime.status_every_s=0.1",  # status read at +-5 steps
            f"run_name={name}", "runtime.live_console=false"]
    if runtime == "ray":
        args.append("runtime.num_cpus=2")
    run = work / "runs" / name
    proc = subprocess.Popen(args, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    actors = [f"actor-{i}" for i in range(n)]
    t_start = time.monotonic()
    try:
        while not all(_status(run, a).get("env_steps", 0) > 0 for a in actors):
            if proc.poll() is not None or time.monotonic() - t_start > 240:
                raise RuntimeError(f"{name}: the actors did not all start:\n{proc.communicate()[0][-3000:]}")
            time.sleep(0.5)
        acting_after_s = time.monotonic() - t_start
        time.sleep(settle_s)
        t0 = time.monotonic()
        first = {a: _status(run, a, retry_s=2.0) for a in actors}
        learner0 = _status(run, "learner", retry_s=2.0).get("env_steps", 0)
        time.sleep(window_s)
        t1 = time.monotonic()
        last = {a: _status(run, a, retry_s=2.0) for a in actors}
        learner1 = _status(run, "learner", retry_s=2.0).get("env_steps", 0)
        proc.send_signal(signal.SIGINT)  # the run stops as on Ctrl-C: actors drain, the summary is written
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    if runtime == "ray":
        _wait_for_ray_to_go()
    summary = json.loads((run / "summary.json").read_text())
    if not summary["ok"]:
        raise RuntimeError(f"{name} failed: {summary['stopped_because']}\n{out[-3000:]}")
    if summary["restarts"]:  # a restarted process counts from 0 again: the window's figures would be wrong
        raise RuntimeError(f"{name}: processes restarted during the run: {summary['restarts']}")
    window = t1 - t0
    steps = {a: last[a].get("env_steps", 0) - first[a].get("env_steps", 0) for a in actors}
    stalled = sum(last[a].get("stalled_ticks", 0) - first[a].get("stalled_ticks", 0) for a in actors)
    server = summary.get("policy_server") or {}
    # the share of each chunk's actions executed, from the start to the window's end: what the slack costs, since a
    # chunk asked for earlier leaves more of the last one unused
    used = [last[a]["chunk_utilisation"] for a in actors if "chunk_utilisation" in last[a]]
    result = {"runtime": runtime, "robots": n, "window_s": round(window, 2),
              "efficiency": round(sum(steps.values()) / (n * HZ * window), 4),
              "min_robot_efficiency": round(min(steps.values()) / (HZ * window), 4),
              "learner_ingest_steps_per_s": round((learner1 - learner0) / window, 1),
              "stalled_ticks": stalled, "stalled_ticks_whole_run": summary["stalled_ticks"],
              "policy_lag_p95": summary["policy_lag_p95"],
              "p99_period_error_ms": summary["p99_period_error_ms"],
              "server_mean_batch": round(server["requests"] / server["batches"], 2) if server.get("batches") else None,
              "chunk_utilisation": round(statistics.median(used), 4) if len(used) == n else None,
              "updates_per_s": round(summary["updates_per_s"], 1), "acting_after_s": round(acting_after_s, 1),
              "wall_minutes": round(summary["wall_minutes"], 2)}
    shutil.rmtree(run, ignore_errors=True)  # buffers of 8 robots add up; the figures are above
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--robots", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--settle-s", type=float, default=10.0)
    ap.add_argument("--window-s", type=float, default=40.0)
    args = ap.parse_args()
    command = run_command(ap, args, "bench-fleet", "fleet.py")
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.robots:
            for k in range(args.runs):
                for runtime in ("local", "ray")[:: 1 if k % 2 == 0 else -1]:
                    r = one_run(Path(tmp), runtime, n, args.settle_s, args.window_s, str(k))
                    runs.append(r)
                    print(f"N={n} {runtime} run {k + 1}: efficiency {r['efficiency']:.3f}, stalled "
                          f"{r['stalled_ticks']}, lag p95 {r['policy_lag_p95']}, ingest "
                          f"{r['learner_ingest_steps_per_s']}/s, server batch {r['server_mean_batch']}", flush=True)
    per_n: dict[str, dict] = {}
    for n in args.robots:
        for runtime in ("local", "ray"):
            rs = [r for r in runs if r["robots"] == n and r["runtime"] == runtime]
            per_n.setdefault(str(n), {})[runtime] = {
                key: spread([r[key] for r in rs])
                for key in ("efficiency", "min_robot_efficiency", "learner_ingest_steps_per_s", "stalled_ticks",
                            "stalled_ticks_whole_run", "policy_lag_p95", "server_mean_batch", "chunk_utilisation",
                            "p99_period_error_ms")
                if all(r[key] is not None for r in rs)}
    goals = []
    top = str(max(args.robots))
    if top == "8":
        at8 = per_n["8"]
        goals = [
            goal("fleet_throughput_efficiency_n8",
                 min(at8[rt]["efficiency"]["median"] for rt in ("local", "ray")), ">=", 0.95),
            goal("stalled_ticks_n8", max(at8[rt]["stalled_ticks"]["median"] for rt in ("local", "ray")), "<=", 0),
            goal("policy_lag_p95_n8", max(at8[rt]["policy_lag_p95"]["median"] for rt in ("local", "ray")), "<=", 2),
            goal("ray_over_local_throughput_n8",
                 round(at8["ray"]["efficiency"]["median"] / at8["local"]["efficiency"]["median"], 4), ">=", 0.95),
        ]
    path = write_result("fleet", command, goals, per_robots=per_n, runs=runs,
                        settings={"task": "reach from state, SAC, one policy server, actor.realtime=true (50 Hz)",
                                  "settle_s": args.settle_s, "window_s": args.window_s, "runs": args.runs,
                                  "ray": "a local instance started by each run (runtime.num_cpus=2)",
                                  "goals_take": "the worse runtime's median (efficiency: the lower; stalls and "
                                                "lag: the higher)"})
    for g in goals:
        print(f"{g['name']}: {g['value']} (target {g['target']}: {'met' if g['met'] else 'NOT met'})")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
