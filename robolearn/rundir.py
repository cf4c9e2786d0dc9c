"""Where everything of a run lives: ``runs/<run_name>/``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def endpoints(self) -> Path:
        return self.root / "endpoints.json"

    @property
    def policy_server(self) -> Path:
        """Where the run's policy server (``runtime.policy_server``) says it listens, once it is serving."""
        return self.root / "policy_server.json"

    @property
    def resources(self) -> Path:
        return self.root / "resources.json"

    @property
    def buffer(self) -> Path:
        return self.root / "buffer"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoints" / "latest.pt"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def holds_data(self) -> bool:
        """Whether a run got as far as collecting or learning anything (a start that failed earlier left only
        its config behind, and the same run_name may start again)."""
        return self.checkpoint.exists() or any(p.stat().st_size > 0 for p in self.buffer.glob("seg-*.log"))

    def status(self, process: str) -> Path:
        return self.root / "status" / f"{process}.json"

    def log(self, process: str) -> Path:
        return self.root / "logs" / f"{process}.log"

    def run_id(self) -> str:
        """This run's identity, made once when the run directory is first created and kept by resumes (a
        robot PC's directory from another run of the same name is told apart by it)."""
        path = self.root / "run_id"
        if not path.exists():
            path.write_text(uuid.uuid4().hex + "\n")
        return path.read_text().strip()

    def estop(self, robot_id: str = "all") -> Path:
        """The e-stop latch of one robot, or of every robot of the run (``all``), while it is pressed."""
        return self.root / "estop" / f"{robot_id}.json"

    def ledger(self, actor: str) -> Path:
        return self.root / "ledger" / f"{actor}.log"

    def spool(self, actor: str) -> Path:
        return self.root / "spool" / actor
