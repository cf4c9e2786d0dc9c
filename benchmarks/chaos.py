"""Chaos: SIGKILL random processes of a live ``robolearn run`` and count what is lost.

Runs the real CLI (``robolearn run task=reach runtime.num_actors=2 actor.realtime=true runtime.spare_actors=2``,
learner and actor processes, zmq, the on-disk buffer; the actors pace their robots at 25 Hz and, as robots do, go on
acting while the learner is down, so data keeps coming while nobody stores it) and, once every actor is acting,
kills a random process (the learner or an actor) at random times, ``--kills`` times, with no manual resume.
Each seed runs twice, interleaved: with inference in each actor process (the default), and with the run's
policy server (``runtime.policy_server=true``): the same kills, and ``kills // 4`` of the server on top.
After the last kill the run goes on to its time budget and stops by itself. Then:

- ``lost_transitions``: steps the actors' own ledgers say were recorded (``actor.step_ledger``: a line once
  the step's record is journaled) that are neither in the buffer's log nor still spooled, from
  ``robolearn buffer audit`` (the buffer's log is read record by record, not through its index);
- ``interrupted_steps``: steps the ledgers say were begun (a line just before the action goes to the robot)
  and never recorded: a kill between the robot executing the step and its record reaching the journal. No
  log written after a step can hold its outcome then; counted, not hidden. Only the last step an actor
  process began can be one (the audit counts any other as lost), so the goal is at most one per actor kill;
- ``duplicate_transitions``: steps stored more than once in that log;
- ``max_actor_rejoin_s``: kill -> the replacement actor's first step (its status file with the new pid);
- ``max_learner_recovery_s``: kill -> the new learner listening again (``endpoints.json`` with its pid);
  ``max_server_recovery_s``: kill -> the new policy server serving (``policy_server.json`` with its pid; the
  robots hold from the kill until their next chunk comes from it);
  all measured here from the run directory, not taken from the runtime's own account;
- the success rate at the end: a deterministic evaluation of the final checkpoint on held-out seeds
  (``robolearn eval``), and the learner's success over the last 50 training episodes.

    make bench-chaos                     # 20 kills, seeds 0 1 2 (median with min/max)
    python benchmarks/chaos.py --kills 5 --seeds 0 --minutes 3
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import ROBOLEARN, goal, run_command, spread, write_result  # noqa: E402

from robolearn.logging.status import read_json  # noqa: E402

EVAL_SEED = 900_000  # never used by a training episode of these runs (their seeds are episode ids)
MAX_REJOIN_S = 5.0


def _read(path: Path) -> dict:
    return read_json(path) or {}  # {}: not written yet, or being replaced


class Recovery:
    """One kill and when its process was back."""

    def __init__(self, run: Path, target: str, pid: int, at_s: float) -> None:
        self.target, self.pid, self.at_s, self.t_kill = target, pid, at_s, time.monotonic()
        self.back_after_s: float | None = None
        # the pid the file showed at the kill: a predecessor's, when the killed process was still starting and
        # had not written the file yet; its status is not the replacement acting
        self.stale_pid = self._serving(run)[0]

    def _serving(self, run: Path) -> tuple[int | None, bool]:
        """(the pid of the process the run directory says serves ``target``, whether it serves yet)."""
        if self.target == "learner":
            return _read(run / "endpoints.json").get("learner_pid"), True
        if self.target == "policy-server":
            return _read(run / "policy_server.json").get("pid"), True
        status = _read(run / "status" / f"{self.target}.json")
        return status.get("pid"), status.get("env_steps", 0) > 0

    def check(self, run: Path) -> None:
        if self.back_after_s is not None:
            return
        pid, serving = self._serving(run)
        if serving and pid not in (None, self.pid, self.stale_pid):
            self.back_after_s = round(time.monotonic() - self.t_kill, 2)

    def as_dict(self) -> dict:
        return {"target": self.target, "at_s": round(self.at_s, 1), "back_after_s": self.back_after_s}


def kill(run: Path, target: str, t0: float, sig: int = signal.SIGKILL) -> Recovery | None:
    """Send ``sig`` to ``target``'s current process (from the runtime's pids.json)."""
    pid = _read(run / "pids.json").get(target)
    if pid is None:
        return None
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # died on its own an instant ago: the runtime is restarting it already
        return None
    return Recovery(run, target, pid, time.monotonic() - t0)


def kill_while_learner_stalled(run: Path, target: str, t0: float, stall_s: float = 1.5) -> Recovery | None:
    """Freeze the learner (SIGSTOP: a long pause), SIGKILL ``target`` meanwhile, thaw the learner. The batches
    the actor sent during the pause are stored once the learner thaws, but their acks go to a dead process,
    so its replacement re-sends them: every one a duplicate the learner must drop."""
    if kill(run, "learner", t0, signal.SIGSTOP) is None:
        return None
    try:
        time.sleep(stall_s)
        return kill(run, target, t0)
    finally:
        kill(run, "learner", t0, signal.SIGCONT)


def start(workdir: Path, name: str, seed: int, minutes: float, num_actors: int, extra: list[str]) -> subprocess.Popen:
    # restarts: every kill must be survivable, so the limit is above the number of kills (the default, 5 within
    # 10 min, is a policy for a fleet, where that many crashes mean something is broken). Two spare actors (the
    # default is one): kills here come 4-10 s apart, often on one actor, faster than one spare's imports finish on
    # these 2 cores, so each kill would find a spare still importing
    overrides = ["task=reach", f"seed={seed}", f"run_name={name}", f"budget.minutes={minutes}",
                 f"runtime.num_actors={num_actors}", "runtime.actor_restarts=100", "runtime.learner_restarts=100",
                 "runtime.server_restarts=100", "runtime.spare_actors=2", "runtime.live_console=false", *extra]
    with open(workdir / f"{name}.out", "w") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen([str(ROBOLEARN), "run", *overrides], cwd=workdir, stdout=log, stderr=subprocess.STDOUT)


def wait_acting(run: Path, proc: subprocess.Popen, num_actors: int, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the run exited (code {proc.returncode}) before its actors were acting")
        if all(_read(run / "status" / f"actor-{i}.json").get("env_steps", 0) > 0 for i in range(num_actors)):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the actors were not acting within {timeout_s:.0f} s")


def kill_schedule(seed: int, kills: int, num_actors: int, server: bool) -> list[str]:
    """``kills`` targets drawn from the learner and the actors, the same for a seed whether or not the run has a
    policy server; with one, ``kills // 4`` kills of it on top, at random places."""
    rng = random.Random(seed)
    targets = [rng.choice(["learner", *(f"actor-{i}" for i in range(num_actors))]) for _ in range(kills)]
    if server:
        places = random.Random(seed + 2)
        for _ in range(kills // 4):
            targets.insert(places.randint(0, len(targets)), "policy-server")
    return targets


def chaos_run(workdir: Path, name: str, seed: int, kills: int, minutes: float, num_actors: int = 2,
              gap_s: tuple[float, float] = (4.0, 10.0), schedule: list[str] | None = None,
              extra: list[str] = (), eval_episodes: int = 50) -> dict:
    """One run with ``kills`` SIGKILLs, ``gap_s`` apart (uniform), of random processes, or of ``schedule``'s:
    ``learner``, ``policy-server`` (with ``runtime.policy_server=true`` in ``extra``), ``actor-<i>``, or
    ``actor-<i>+stalled-learner`` (``kill_while_learner_stalled``)."""
    from robolearn.runtime.audit import audit_run

    run = workdir / "runs" / name
    t0 = time.monotonic()
    proc = start(workdir, name, seed, minutes, num_actors, list(extra))
    recoveries: list[Recovery] = []
    try:
        wait_acting(run, proc, num_actors)
        targets = schedule or kill_schedule(seed, kills, num_actors, "runtime.policy_server=true" in extra)
        gaps = random.Random(seed + 1)
        for target in targets:
            due = time.monotonic() + gaps.uniform(*gap_s)
            while time.monotonic() < due:
                for r in recoveries:
                    r.check(run)
                time.sleep(0.05)
            r = kill_while_learner_stalled(run, target.split("+")[0], t0) if target.endswith("+stalled-learner") \
                else kill(run, target, t0)
            if r is not None:
                recoveries.append(r)
                print(f"  {name}: {r.at_s:6.1f} s  killed {target} (pid {r.pid})", flush=True)
        while proc.poll() is None:
            for r in recoveries:
                r.check(run)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(120)
    summary = _read(run / "summary.json")
    audit = audit_run(run)
    evaluation = {}
    if (run / "checkpoints" / "latest.pt").exists():
        from robolearn.evaluate import evaluate
        from robolearn.runtime.builtins import register_builtins

        register_builtins()
        evaluation = evaluate(run, episodes=eval_episodes, seed=EVAL_SEED)
    def recovered(kind: str) -> list[float | None]:
        return [r.back_after_s for r in recoveries if r.target.startswith(kind)]

    actors, learners, servers = recovered("actor-"), recovered("learner"), recovered("policy-server")

    def slowest(times: list[float | None]) -> float | None:  # one that never came back is infinitely slow
        return max((t if t is not None else float("inf") for t in times), default=None)

    return {
        "seed": seed, "exit_code": proc.returncode, "ok": summary.get("ok"),
        "stopped_because": summary.get("stopped_because"), "kills": [r.as_dict() for r in recoveries],
        "lost_transitions": audit["lost_steps"], "duplicate_transitions": audit["duplicate_steps"],
        "pending_transitions": audit["pending_steps"], "produced_transitions": audit["produced_steps"],
        "stored_transitions": audit["stored_steps"], "steps_taken_twice": audit["steps_taken_twice"],
        "interrupted_steps": audit["interrupted_steps"], "interrupted_examples": audit["interrupted_examples"],
        "audit_problems": audit["problems"], "lost_examples": audit["lost_examples"],
        "max_actor_rejoin_s": slowest(actors), "max_learner_recovery_s": slowest(learners),
        "max_server_recovery_s": slowest(servers),
        "actor_kills": len(actors), "learner_kills": len(learners), "server_kills": len(servers),
        "rejected_messages": summary.get("rejected_messages"), "duplicate_batches": summary.get("duplicate_batches"),
        "duplicate_acks_to_actors": sum(a.get("batches_duplicate") or 0 for a in summary.get("actors", [])),
        "out_of_order_batches": summary.get("out_of_order_batches"), "cut_episodes": summary.get("cut_episodes"),
        "restarts_by_runtime": summary.get("restarts"),
        "success_rate_last_50": summary.get("success_rate_last_50"), "env_steps": summary.get("env_steps"),
        "eval_success_rate": evaluation.get("success_rate"), "eval_episodes": evaluation.get("episodes"),
        "wall_minutes": round((time.monotonic() - t0) / 60, 2),
    }


MODES = {"in_actor": [], "policy_server": ["runtime.policy_server=true"]}  # where the actors' policy runs
WORST = ("lost_transitions", "duplicate_transitions", "max_actor_rejoin_s", "max_learner_recovery_s",
         "max_server_recovery_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=6.0, help="each run's time budget (kills come first)")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="more config overrides for every run (e.g. runtime.spare_actors=1, the default)")
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for mode in args.modes:  # interleaved: both modes of a seed run back to back
                print(f"chaos seed {seed}, {mode}: {args.kills} kills", flush=True)
                r = chaos_run(Path(tmp), f"chaos-s{seed}-{mode}", seed, args.kills, args.minutes, args.actors,
                              extra=["actor.realtime=true", *MODES[mode], *args.set])
                r["mode"] = mode
                print(f"  lost {r['lost_transitions']}, duplicates {r['duplicate_transitions']}, interrupted "
                      f"{r['interrupted_steps']}, actor rejoin max {r['max_actor_rejoin_s']} s, learner recovery max "
                      f"{r['max_learner_recovery_s']} s, server recovery max {r['max_server_recovery_s']} s, eval "
                      f"success {r['eval_success_rate']}", flush=True)
                runs.append(r)
    killed = {"max_actor_rejoin_s": "actor_kills", "max_learner_recovery_s": "learner_kills",
              "max_server_recovery_s": "server_kills"}  # a run that killed none of a kind says nothing of it
    worst = {key: max((r[key] if r[key] is not None else float("inf") for r in runs
                       if key not in killed or r[killed[key]] > 0), default=None)
             for key in WORST}
    evals = {mode: [r["eval_success_rate"] or 0.0 for r in runs if r["mode"] == mode] for mode in args.modes}
    goals = [goal("lost_transitions", worst["lost_transitions"], "<=", 0),
             goal("duplicate_transitions", worst["duplicate_transitions"], "<=", 0),
             {**goal("interrupted_steps_minus_actor_kills",
                     max(r["interrupted_steps"] - r["actor_kills"] for r in runs), "<=", 0),
              "note": "a kill cuts at most the one step its actor was taking; ours, the issue names none"},
             goal("max_actor_rejoin_s", worst["max_actor_rejoin_s"], "<=", MAX_REJOIN_S),
             {**goal("max_learner_recovery_s", worst["max_learner_recovery_s"], "<=", 60.0),
              "note": "the issue names no target; 60 s is ours"}]
    if worst["max_server_recovery_s"] is not None:
        goals.append({**goal("max_server_recovery_s", worst["max_server_recovery_s"], "<=", 60.0),
                      "note": "the issue names no target; 60 s is ours"})
    goals += [{**goal(f"eval_success_rate_median_{mode}", statistics.median(e), ">=", 0.9),
               "note": "the issue names no target; 0.9 is what an undisturbed run reaches in this budget"}
              for mode, e in evals.items()]
    by_mode = {mode: {key: spread([r[key] for r in runs if r["mode"] == mode and r[key] is not None])
                      for key in ("max_actor_rejoin_s", "max_learner_recovery_s", "max_server_recovery_s",
                                  "interrupted_steps", "eval_success_rate")
                      if any(r[key] is not None for r in runs if r["mode"] == mode)}
               for mode in args.modes}
    path = write_result("chaos", run_command(ap, args, "bench-chaos", "chaos.py"), goals,
                        worst_over_runs=worst, interrupted_steps_total=sum(r["interrupted_steps"] for r in runs),
                        by_mode=by_mode, kills=args.kills, actors=args.actors, minutes=args.minutes, runs=runs)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
