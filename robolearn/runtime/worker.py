"""Entry point of a worker process: ``python -m robolearn.runtime.worker {learner|actor|policy-server} RUN_DIR
[INDEX]``.

Workers read the resolved config from the run directory, so nothing but a path crosses the process
boundary at start-up (no pickled arguments).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from robolearn.config import load_run_config
from robolearn.rundir import RunDir
from robolearn.runtime.builtins import register_builtins


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("learner", "actor", "policy-server"):
        print("usage: python -m robolearn.runtime.worker {learner|actor|policy-server} RUN_DIR [INDEX]",
              file=sys.stderr)
        return 2
    register_builtins()
    run = RunDir(Path(argv[1]))
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
