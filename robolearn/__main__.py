"""``robolearn`` (the console script) and ``python -m robolearn``. ``estop`` and ``rearm`` start without importing
the rest of robolearn (torch, hydra, the simulators: seconds, a minute on a loaded machine), since a person presses
an e-stop when something is already going wrong; every other command goes to ``robolearn.cli``."""

from __future__ import annotations

import sys

from robolearn.runtime.estop_command import main as estop_main  # numpy and the run directory only


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("estop", "rearm"):
        raise SystemExit(estop_main(argv[1:], rearm=argv[0] == "rearm"))
    from robolearn.cli import main as cli_main

    cli_main(argv)


if __name__ == "__main__":
    main()
