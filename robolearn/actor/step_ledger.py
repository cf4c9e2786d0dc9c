"""The actor side's own record of every step it took, for auditing the buffer against (``robolearn buffer
audit``): ``<run>/ledger/<actor>.log``, two lines per step, each appended with a single unbuffered write and
never rewritten:

    robot_id episode_id step >    begun: just before the action goes to the robot (``on_apply``)
    robot_id episode_id step .    recorded: the instant the step's record is in the journal (``recorded``,
                                  called by the actor right after ``TransitionSender.stage`` returns)

and an empty line where each actor process opens it. A line is whole only with its last token, so one a kill
tore is skipped.

It shares nothing with the path a step takes to the buffer (journal, spool, channel, learner), so a recorded
step that path loses shows up as missing. A step begun but never recorded is one a kill cut between the robot
moving and the record reaching the journal: its outcome (reward, next observation) existed only in the dead
process. That can only be the last step a process began; any other step begun and never recorded is a fault
of the actor, not a kill, and the audit counts it lost. Episode ids are unique across the actors of a run, so
(episode id, step) names one step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

Step = tuple[int, int]  # (episode id, step)
BEGUN, RECORDED = b">", b"."


class StepLedger:
    """An ``EpisodeLoop`` subscriber for the begun lines; the actor calls ``recorded`` after each journal write."""

    def __init__(self, path: Path, robot_id: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.robot_id = robot_id
        self._file = open(path, "ab", buffering=0)
        self._file.write(b"\n")  # where this process starts (and a line a killed predecessor tore ends)

    def on_apply(self, episode_id: int, step: int) -> None:
        self._file.write(f"{self.robot_id} {episode_id} {step} >\n".encode())

    def recorded(self, episode_id: int, step: int) -> None:
        self._file.write(f"{self.robot_id} {episode_id} {step} .\n".encode())

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class Ledger:
    """One actor's ledger as read back, each list in the order the steps were taken. ``last_begun``: the step
    each process (each stretch between the lines where one opened the ledger) began last."""

    begun: list[Step]
    recorded: list[Step]
    last_begun: list[Step]


def read_ledger(path: Path) -> Ledger:
    """Every whole line of one actor's ledger."""
    begun, recorded, last_begun = [], [], []
    process_last: Step | None = None
    for line in path.read_bytes().split(b"\n"):
        if not line:  # a process opened the ledger here
            if process_last is not None:
                last_begun.append(process_last)
            process_last = None
            continue
        parts = line.split()
        if len(parts) != 4 or parts[3] not in (BEGUN, RECORDED) or not (
                parts[1].lstrip(b"-").isdigit() and parts[2].isdigit()):
            continue  # torn by a kill
        step = (int(parts[1]), int(parts[2]))
        if parts[3] == BEGUN:
            begun.append(step)
            process_last = step
        else:
            recorded.append(step)
    if process_last is not None:
        last_begun.append(process_last)
    return Ledger(begun, recorded, last_begun)
