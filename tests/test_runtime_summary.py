"""A process that raised is in the run's summary with the end of its log (its traceback); clean exits are not."""

from robolearn.rundir import RunDir
from robolearn.runtime.local import _summary


def test_summary_carries_the_traceback_of_a_process_that_raised(tmp_path):
    run = RunDir(tmp_path)
    run.log("learner").parent.mkdir(parents=True)
    run.log("learner").write_text("[learner] listening\nTraceback (most recent call last):\n"
                                  "RuntimeError: mat1 and mat2 shapes cannot be multiplied\n")
    run.log("actor-0").write_text("[actor-0] got weights v1\n")
    summary = _summary(run, {"learner": None, "actor-0": None}, 60.0, "", "learner exited unexpectedly (code 1)",
                       {"actor-0": 0, "learner": 1})
    assert not summary["ok"]
    assert "RuntimeError: mat1 and mat2" in summary["process_errors"]["learner"]
    assert "actor-0" not in summary["process_errors"]
