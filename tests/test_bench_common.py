"""The benchmarks' shared way of reporting a figure over runs, and the command that repeats a run
(benchmarks/common.py)."""

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from common import run_command, spread  # noqa: E402


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


def _search(monkeypatch, first: list[float], second: list[float], **kw):
    """first_evaluated_at over copies whose success is ``first`` on the evaluation seeds, ``second`` on the
    confirming ones (one copy a minute); returns (the copy found or None, the copies evaluated)."""
    import common

    def fake_eval(run_dir, episodes, seed):
        rates = second if seed == 2 else first
        return {"success_rate": rates[int(run_dir)], "mean_return": 0.0, "policy_version": 0}

    monkeypatch.setattr(common, "eval_success", fake_eval)
    snapshots = [{"dir": str(i), "minutes": float(i)} for i in range(len(first))]
    found, evaluated = common.first_evaluated_at(snapshots, 0.8, 100, 1, **kw)
    return (None if found is None else found["copy"]), [e["copy"] for e in evaluated]


def test_the_first_copy_to_pass_is_found_with_the_copies_between_searched(monkeypatch):
    rates = [0.1, 0.5, 0.82, 0.7, 0.9, 0.95]
    assert _search(monkeypatch, rates, rates)[0] == 2
    # one copy in two minutes at first (0, 2, 4, 5): 2 passes, then 1, between it and 0 below the target
    assert _search(monkeypatch, rates, rates, coarse_minutes=2.0) == (2, [0, 1, 2])


def test_a_copy_that_fails_its_confirmation_is_passed_over(monkeypatch):
    first = [0.1, 0.5, 0.82, 0.7, 0.9, 0.95]
    second = [0.1, 0.5, 0.71, 0.7, 0.85, 0.9]  # copy 2's 82% was luck: 71% on other seeds
    assert _search(monkeypatch, first, second, confirm_seed=2)[0] == 4
    assert _search(monkeypatch, first, second, coarse_minutes=2.0, confirm_seed=2)[0] == 4
    assert _search(monkeypatch, first, [0.0] * 6, confirm_seed=2)[0] is None  # never confirmed: not reached


def test_the_command_that_repeats_a_run_names_each_option_off_its_default():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", type=int, default=3)
    ap.add_argument("--perturbed", action="store_true")
    ap.add_argument("--colour-words", action=argparse.BooleanOptionalAction, default=True)
    assert run_command(ap, ap.parse_args([]), "bench-vla", "vla.py") == "make bench-vla"
    assert (run_command(ap, ap.parse_args(["--no-colour-words", "--perturbed", "--policies", "5"]), "bench-vla",
                        "vla.py") == "python benchmarks/vla.py --policies 5 --perturbed --no-colour-words")
