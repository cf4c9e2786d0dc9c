"""The actor side's own record of every step it took, for auditing the buffer against (``robolearn buffer
audit``): ``<run>/ledger/<actor>.log``, one line ``robot_id episode_id step`` per executed step, appended
with a single unbuffered write as the step happens and never rewritten.

It shares nothing with the path a step takes to the buffer (journal, spool, channel, learner), so a step
that path loses shows up as missing. Episode ids are unique across the actors of a run, so (episode id,
step) names one step. A write torn by a kill leaves a partial last line, which ``read_ledger`` skips.
"""

from __future__ import annotations

from pathlib import Path

from robolearn.actor.episode import StepRecord


class StepLedger:
    """An ``EpisodeLoop`` subscriber appending one line per step."""

    def __init__(self, path: Path, robot_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.robot_id = robot_id
        self._file = open(path, "ab", buffering=0)
        self._file.write(b"\n")  # a line a killed predecessor tore stays apart from the first step of this one

    def on_step(self, step: StepRecord) -> None:
        self._file.write(f"{self.robot_id} {step.episode_id} {step.step}\n".encode())

    def close(self) -> None:
        self._file.close()


def read_ledger(path: Path) -> list[tuple[int, int]]:
    """(episode id, step) of every whole line of one actor's ledger, in the order they were taken."""
    steps = []
    for line in path.read_bytes().split(b"\n"):
        parts = line.split()
        if len(parts) == 3 and parts[1].lstrip(b"-").isdigit() and parts[2].isdigit():
            steps.append((int(parts[1]), int(parts[2])))
    return steps
