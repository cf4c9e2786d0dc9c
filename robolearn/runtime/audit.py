"""``robolearn buffer audit RUN_DIR``: every step the robots took against what the buffer holds.

Three independent sources, each read as stored on disk: the actors' ledgers (``actor.step_ledger``: a line
as each step begins, and one once its record is journaled), the buffer's log (every stored transitions record, counted
record by record, not through the index that refuses duplicates) and the actors' spools (batches and
journaled steps not acknowledged yet). A step is named by (episode id, step): episode ids are unique
across a run's actors and their restarts.

    lost         recorded (ledger) but neither stored nor still spooled; and begun, never recorded, stored
                 nowhere while its process went on to begin another step (no kill explains that)
    duplicate    stored more than once
    pending      recorded, not stored, still spooled (sent on the next start of that actor)
    interrupted  the last step a process began, never recorded, stored nowhere: a kill between the robot
                 executing the step and its record reaching the journal (the outcome existed only in the dead
                 process)
    unledgered   stored but in no ledger (steps from elsewhere)

Read-only: safe on a run that is still going, though its figures then move.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from robolearn.actor.step_ledger import read_ledger
from robolearn.buffer.log import SegmentLog
from robolearn.buffer.storage import RECORD_TYPES
from robolearn.rundir import RunDir
from robolearn.transport.spool import spooled_messages
from robolearn.transport.transitions import TRANSITIONS
from robolearn.transport.wire import decode

Step = tuple[int, int]  # (episode id, step)


def _steps(arrays: dict) -> list[Step]:
    return list(zip(arrays["episode_id"].tolist(), arrays["step"].tolist()))


def audit_run(run_dir: str | Path, joined: tuple[str | Path, ...] = ()) -> dict:
    """``joined``: the local run directories of robot PCs that joined (``robolearn join``), copied here: their
    ledgers and spools count with this machine's."""
    run = RunDir(Path(run_dir))
    roots = [run.root, *map(Path, joined)]
    produced: Counter[Step] = Counter()
    begun: Counter[Step] = Counter()
    last_begun: set[Step] = set()
    by_actor = {}
    for path in sorted(p for root in roots for p in (root / "ledger").glob("*.log")):
        ledger = read_ledger(path)
        by_actor[path.stem] = len(ledger.recorded)
        produced.update(ledger.recorded)
        begun.update(ledger.begun)
        last_begun.update(ledger.last_begun)
    stored: Counter[Step] = Counter()
    log = SegmentLog(run.buffer, read_only=True)
    for _, msg in log.read_messages(RECORD_TYPES):
        if msg.type == TRANSITIONS and msg.meta.get("partition", "online") == "online":
            stored.update(_steps(msg.arrays))
    log.close()
    pending: Counter[Step] = Counter()
    for spool in sorted(p for root in roots for p in (root / "spool").glob("*")):
        for frames in spooled_messages(spool):
            pending.update(_steps(decode(frames, frozenset({TRANSITIONS})).arrays))
    unrecorded = [s for s in begun if s not in produced and s not in stored and s not in pending]
    interrupted = sorted(s for s in unrecorded if s in last_begun)
    lost = sorted([s for s in produced if s not in stored and s not in pending] +
                  [s for s in unrecorded if s not in last_begun])
    return {
        "run_dir": str(run.root),
        "produced_steps": sum(produced.values()), "produced_by_actor": by_actor,
        "stored_steps": len(stored),
        "lost_steps": len(lost), "lost_examples": lost[:10],
        "duplicate_steps": sum(n - 1 for n in stored.values()),
        "pending_steps": sum(1 for s in produced if s not in stored and s in pending),
        "interrupted_steps": len(interrupted), "interrupted_examples": interrupted[:10],
        "steps_taken_twice": sum(n - 1 for n in begun.values()),  # an episode id a restart reused
        "unledgered_steps": sum(1 for s in stored if s not in produced and s not in begun),
        "problems": log.problems,
    }
