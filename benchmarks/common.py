"""Shared by the benchmarks: the machine they ran on and the results file in the agreed shape."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def machine() -> dict:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip()}


def goal(name: str, value: float | None, op: str, target: float) -> dict:
    checks = {"<=": value is not None and value <= target, ">=": value is not None and value >= target,
              "<": value is not None and value < target, ">": value is not None and value > target}
    if op not in checks:
        raise ValueError(f"goal operator must be one of {sorted(checks)}, got {op!r}")
    met = checks[op]
    return {"name": name, "value": value, "target": f"{op} {target}", "met": bool(met)}


def write_result(name: str, command: str, goals: list[dict], **details) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"benchmark": name, "command": command, "goals": goals, "machine": machine(),
                                **details}, indent=2) + "\n")
    return path
