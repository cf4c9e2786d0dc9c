"""Entry point of a worker process: ``python -m robolearn.runtime.worker {learner|actor|policy-server|spare-actor}
RUN_DIR [INDEX]`` (a spare actor is told its index later, on stdin).

Workers read the resolved config from the run directory, so nothing but a path crosses the process
boundary at start-up (no pickled arguments).
"""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path

from robolearn.config import load_run_config
from robolearn.rundir import RunDir
from robolearn.runtime.builtins import register_builtins


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("learner", "actor", "policy-server", "spare-actor"):
        print("usage: python -m robolearn.runtime.worker {learner|actor|policy-server|spare-actor} RUN_DIR [INDEX]",
              file=sys.stderr)
        return 2
    register_builtins()
    run = RunDir(Path(argv[1]))
    if argv[0] == "spare-actor":
        return _spare_actor(run)
    cfg = load_run_config(run.config)
    if argv[0] == "learner":
        from robolearn.learner.loop import main as learner_main

        os.nice(getattr(cfg.runtime, "learner_nice", 0))  # the robots' control loops first on a busy machine

        return learner_main(run, cfg)
    if argv[0] == "policy-server":
        from robolearn.runtime.policy_server import serve_run

        return serve_run(run, cfg)
    from robolearn.actor.loop import main as actor_main

    return actor_main(run, cfg, int(argv[2]) if len(argv) > 2 else 0)


def _spare_actor(run: RunDir) -> int:
    """A spare actor (``supervisor.SpareActor``): import what an actor needs, then wait for the index of the actor
    to become on stdin; an empty read (stdin closed) means it is not needed."""
    try:
        from robolearn.actor.loop import main as actor_main
        from robolearn.logging import recording

        recording.warm_up()
    except Exception:
        # told its index while it was importing: the traceback belongs in the log of the actor it was to be
        if select.select([sys.stdin], [], [], 0)[0]:
            _write_log_of(run, sys.stdin.readline())
        raise
    print(f"spare actor (pid {os.getpid()}): imports done, waiting to be told which actor to be", flush=True)
    index = _write_log_of(run, sys.stdin.readline())
    if index is None:
        return 0
    print(f"spare actor (pid {os.getpid()}) takes the place of actor-{index}", flush=True)
    return actor_main(run, load_run_config(run.config), index)


def _write_log_of(run: RunDir, line: str) -> int | None:
    """The index on ``line`` (None: empty, not needed); from here on this process writes that actor's log."""
    if not line.strip():
        return None
    index = int(line)
    log = os.open(run.log(f"actor-{index}"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, sys.stdout.fileno())
    os.dup2(log, sys.stderr.fileno())
    os.close(log)
    return index


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
