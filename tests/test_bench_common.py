"""The benchmarks' shared way of reporting a figure over runs (benchmarks/common.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from common import spread  # noqa: E402


def test_spread_is_the_median_with_min_and_max():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert spread([0.12345, 0.5, 0.9], digits=2) == {"median": 0.5, "min": 0.12, "max": 0.9}


def test_a_run_that_never_got_there_counts_as_the_worst_in_the_median():
    # one of three seeds never reached the target: the median is the slower of the two that did, not their middle
    assert spread([4.0, None, 2.0]) == {"median": 4.0, "min": 2.0, "max": 4.0}
    # most seeds never got there: no median, whatever the one that did
    assert spread([None, 1.0, None]) == {"median": None, "min": 1.0, "max": 1.0}
    assert spread([None, None, None]) == {"median": None, "min": None, "max": None}


def test_no_runs_is_an_error():
    with pytest.raises(ValueError, match="at least one value"):
        spread([])
