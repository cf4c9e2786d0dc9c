"""learn_tasks' comparison with SB3: robolearn's env steps to SB3's final figure over SB3's, and the ratios the
marks cannot measure (benchmarks/learn_tasks.py, part sb3)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import learn_tasks  # noqa: E402
from learn_tasks import UNRESOLVED, resolved_ratio, task_measured_earlier, worst_ratio  # noqa: E402

MARKS = [1000, 2000, 3000, 4000]


def curves(*scores: list[float], late: int = 0) -> list[list[dict]]:
    """One curve per seed, scored at MARKS (robolearn's copies are taken ``late`` env steps after each mark)."""
    return [[{"env_steps": m + late, "score": s} for m, s in zip(MARKS, run, strict=True)] for run in scores]


def test_the_ratio_is_robolearns_env_steps_to_sb3s_final_figure_over_sb3s():
    sb3 = curves([0.1, 0.4, 0.8, 0.9], [0.0, 0.5, 0.9, 0.9], [0.2, 0.3, 0.7, 0.8])
    robolearn = curves([0.5, 0.9, 1.0, 1.0], [0.6, 0.8, 0.9, 1.0], [0.4, 0.9, 1.0, 1.0], late=100)
    r = resolved_ratio(sb3, robolearn, final=0.9, success_rate=True)
    # SB3's median reaches 0.9 at its last mark (4000), robolearn's at its second (the copy at 2100)
    assert r == {"sb3_env_steps_to_its_final": 4000, "robolearn_env_steps_to_that_figure": 2100, "ratio": 0.525}


def test_robolearn_that_never_reaches_the_figure_has_no_ratio_and_is_not_excused():
    sb3 = curves([0.9, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9])  # there from the first mark
    robolearn = curves([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4])
    r = resolved_ratio(sb3, robolearn, final=0.9, success_rate=True)
    assert r["ratio"] is None and "unresolved" not in r
    assert worst_ratio([0.3, r["ratio"]]) is None  # not reached on one: the goal is not reached


def test_sb3_at_its_final_figure_from_the_first_mark_cannot_be_beaten_by_the_marks():
    sb3 = curves([-5.0, -5.0, -5.0, -5.0], [-4.0, -5.0, -5.0, -5.0], [-5.0, -6.0, -5.0, -5.0])
    robolearn = curves([-4.0, -4.0, -4.0, -4.0], [-4.0, -4.0, -4.0, -4.0], [-4.0, -4.0, -4.0, -4.0], late=100)
    r = resolved_ratio(sb3, robolearn, final=-5.0, success_rate=False)
    assert r["ratio"] is None and r["unresolved"] == "SB3 reached its final figure at its first mark"


def test_an_sb3_that_did_not_learn_the_task_gives_no_ratio():
    sb3 = curves([0.0, 0.05, 0.0, 0.05], [0.0, 0.05, 0.05, 0.05], [0.05, 0.0, 0.1, 0.0])  # final median 0.05
    robolearn = curves([0.0, 0.2, 0.5, 1.0], [0.0, 0.1, 0.6, 1.0], [0.1, 0.3, 0.7, 1.0], late=100)
    r = resolved_ratio(sb3, robolearn, final=0.05, success_rate=True)
    assert r["ratio"] is None and "did not learn" in r["unresolved"]
    # the same curves as returns (Reacher's, say) are a measured ratio: the rule is for success rates only
    assert resolved_ratio(sb3, robolearn, final=0.05, success_rate=False)["ratio"] == round(2100 / 2000, 3)


def test_the_worst_ratio_leaves_out_the_unresolved_and_is_unresolved_only_when_all_are():
    assert worst_ratio([0.4, UNRESOLVED, 0.45]) == 0.45
    assert worst_ratio([UNRESOLVED, UNRESOLVED]) == UNRESOLVED
    assert worst_ratio([UNRESOLVED, None]) is None


def test_a_task_measured_as_not_reached_is_carried_over_as_a_figure_not_erased():
    previous = {"commit": "abc1234", "machine": {"date": "2026-12-04"},
                "goals": [{"name": "push_cube_minutes_to_80pct", "value": None, "target": "<= 20", "met": False},
                          {"name": "pick_cube_minutes_to_80pct", "value": None, "target": "<= 30", "met": False}],
                "rlpd": {"push_cube": {"runs": [{"seed": 0, "minutes": None}]},
                         "pick_cube": {"not_measured": "left out of --tasks in this invocation"}}}
    kept, details = task_measured_earlier(previous, "push_cube", 20.0)
    assert kept["value"] is None and kept["commit"] == "abc1234" and kept["date"] == "2026-12-04"
    assert details["runs"] == [{"seed": 0, "minutes": None}] and "carried_over" in details
    kept, details = task_measured_earlier(previous, "pick_cube", 30.0)  # never measured: no commit claimed
    assert kept["value"] is None and "commit" not in kept and "not_measured" in details


def test_demos_are_recorded_with_the_runs_robot_and_task_settings_not_their_learner_settings(monkeypatch, tmp_path):
    """A demo's state must be the runs' state: a task setting that changes it (e.g. ``task.scene_state``) goes to
    ``robolearn record`` with the robot's rate and servo-target bound; the policy's and the learner's do not."""
    asked: list[list[str]] = []
    monkeypatch.setattr("subprocess.run", lambda argv, **_: asked.append(argv))
    monkeypatch.setitem(learn_tasks.RLPD_TASK, "push_cube", ["task.scene_state=false", "policy.discrete_gripper=true"])
    learn_tasks.record_demos("push_cube", tmp_path / "demos", 3)
    (argv,) = asked
    assert argv[1:3] == ["record", "task=push_cube"] and "episodes=3" in argv
    assert {"robot.control_hz=50", "robot.max_relative_target=6", "task.scene_state=false"} <= set(argv)
    assert not [a for a in argv if a.startswith(("policy.", "learner.", "algo.", "actor."))]


def test_part_rlpd_run_on_no_task_keeps_every_task_and_the_settings_they_were_measured_with():
    previous = {"commit": "abc1234", "machine": {"date": "2026-12-04"},
                "goals": [{"name": "pick_cube_minutes_to_80pct", "value": 11.2, "target": "<= 30.0", "met": True}],
                "rlpd": {"demos_per_task": 20, "overrides": ["robot.control_hz=50"],
                         "pick_cube": {"minutes_to_80pct": {"median": 11.2}, "runs": []}}}
    goals, details = learn_tasks.part_rlpd(None, None, previous, tasks=[])
    assert [g["name"] for g in goals] == [f"{t}_minutes_to_80pct" for t in learn_tasks.RLPD_TASKS]
    pick = goals[list(learn_tasks.RLPD_TASKS).index("pick_cube")]
    assert pick["value"] == 11.2 and pick["commit"] == "abc1234"
    assert details["demos_per_task"] == 20 and details["overrides"] == ["robot.control_hz=50"]
    assert "carried_over" in details["pick_cube"] and "not_measured" in details["push_cube"]


def test_main_with_part_sb3_records_no_demos_and_carries_part_rlpd_over_unchanged(monkeypatch, tmp_path):
    previous = {"commit": "abc1234", "machine": {"date": "2026-12-04"},
                "goals": [{"name": "pick_cube_minutes_to_80pct", "value": 11.2, "target": "<= 30.0", "met": True}],
                "rlpd": {"demos_per_task": 20, "pick_cube": {"minutes_to_80pct": {"median": 11.2}, "runs": []}}}
    result = tmp_path / "learn_tasks.json"
    result.write_text(json.dumps(previous))
    written: dict = {}

    def no_demos(*_):
        raise AssertionError("part rlpd recorded demos in a --part sb3 invocation")

    monkeypatch.setattr(learn_tasks, "RESULT", result)
    monkeypatch.setattr(learn_tasks, "record_demos", no_demos)
    monkeypatch.setattr(learn_tasks, "part_sb3", lambda *_: ([learn_tasks.goal(
        "max_env_steps_ratio_vs_sb3", None, "<=", 0.5)], {"envs": {}}))
    monkeypatch.setattr(learn_tasks, "write_result", lambda name, command, goals, **details: written.update(
        goals=goals, **details) or result)
    monkeypatch.setattr(sys, "argv", ["learn_tasks.py", "--part", "sb3"])
    learn_tasks.main()
    assert written["rlpd"]["demos_per_task"] == 20 and "carried_over" in written["rlpd"]["pick_cube"]
    assert [g["name"] for g in written["goals"]] == ["push_cube_minutes_to_80pct", "pick_cube_minutes_to_80pct",
                                                     "max_env_steps_ratio_vs_sb3"]
    assert written["goals"][1]["value"] == 11.2 and written["goals"][1]["commit"] == "abc1234"
