"""The actor side's own record of every step it took, for auditing the buffer against (``robolearn buffer
audit``): ``<run>/ledger/<actor>.log``, two lines per step, each appended with a single unbuffered write and
never rewritten:

    robot_id episode_id step >    begun: written just before the action goes to the robot (``on_apply``)
    robot_id episode_id step      recorded: written once the step's record is journaled (``on_step``, after
                                  the ``TransitionRecorder``)

It shares nothing with the path a step takes to the buffer (journal, spool, channel, learner), so a recorded
step that path loses shows up as missing. A step begun but never recorded is one a kill cut between the
robot moving and the record reaching the journal: its outcome (reward, next observation) existed only in
the dead process, and the audit counts it apart (``interrupted``). Episode ids are unique across the actors
of a run, so (episode id, step) names one step. A write torn by a kill leaves a partial last line, which
``read_ledger`` skips.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robolearn.actor.episode import StepRecord

Step = tuple[int, int]  # (episode id, step)


class StepLedger:
    """An ``EpisodeLoop`` subscriber appending a line as each step begins and one once it is recorded; it goes
    after the subscriber that journals the step."""

    def __init__(self, path: Path, robot_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.robot_id = robot_id
        self._file = open(path, "ab", buffering=0)
        self._file.write(b"\n")  # a line a killed predecessor tore stays apart from the first step of this one

    def on_apply(self, episode_id: int, step: int) -> None:
        self._file.write(f"{self.robot_id} {episode_id} {step} >\n".encode())

    def on_step(self, step: StepRecord) -> None:
        self._file.write(f"{self.robot_id} {step.episode_id} {step.step}\n".encode())

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class Ledger:
    """One actor's ledger as read back, each list in the order the steps were taken."""

    begun: list[Step]
    recorded: list[Step]


def read_ledger(path: Path) -> Ledger:
    """Every whole line of one actor's ledger."""
    begun, recorded = [], []
    for line in path.read_bytes().split(b"\n"):
        parts = line.split()
        if len(parts) not in (3, 4) or not (parts[1].lstrip(b"-").isdigit() and parts[2].isdigit()):
            continue
        step = (int(parts[1]), int(parts[2]))
        if len(parts) == 3:
            recorded.append(step)
        elif parts[3] == b">":
            begun.append(step)
    return Ledger(begun, recorded)
