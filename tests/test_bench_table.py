"""BENCHMARKS.md's summary table is what benchmarks/results/*.json say (``make bench-table`` writes it)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_summary_table_matches_the_results_files():
    r = subprocess.run([sys.executable, "benchmarks/table.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
