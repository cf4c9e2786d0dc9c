"""Where everything of a run lives: ``runs/<run_name>/``."""

from __future__ import annotations

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

    def status(self, process: str) -> Path:
        return self.root / "status" / f"{process}.json"

    def log(self, process: str) -> Path:
        return self.root / "logs" / f"{process}.log"
