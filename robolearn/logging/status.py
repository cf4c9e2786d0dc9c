"""Small JSON files a process rewrites atomically (status, endpoints) and a JSONL metrics log."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class MetricsLog:
    """Appends one JSON object per line to ``metrics.jsonl`` (wall time added as ``time``)."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps({"time": time.time(), **record}) + "\n")

    def close(self) -> None:
        self._file.close()
