"""``python -m robolearn.apps.gui RUN_DIR``: the run's GUI process (started and restarted by the runtime)."""

from __future__ import annotations

import sys
from pathlib import Path

from robolearn.apps.gui.server import GuiServer
from robolearn.config import load_run_config
from robolearn.rundir import RunDir
from robolearn.runtime.builtins import register_builtins


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m robolearn.apps.gui RUN_DIR", file=sys.stderr)
        return 2
    register_builtins()
    run = RunDir(Path(argv[0]))
    GuiServer(run, load_run_config(run.config)).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
