from pathlib import Path

import pytest

from robolearn.config import ConfigError, validate
from tests.helpers import robolearn


def _cfg(**changes):
    from robolearn.config import compose

    return compose("config", [f"{k}={v}" for k, v in changes.items()])


def test_default_config_validates_to_typed_groups():
    cfg = validate(_cfg())
    assert cfg.task.name == "reach" and cfg.algo.name == "sac" and cfg.runtime.host == "127.0.0.1"
    assert cfg.algo.num_critics == 2 and cfg.policy.chunk_horizon == 1
    assert cfg.robot.max_relative_target is None
    assert validate(_cfg(**{"robot.max_relative_target": "6"})).robot.max_relative_target == 6.0


@pytest.mark.parametrize("key, value, match", [
    ("algo.gamma", "1.5", "algo.gamma must be in"),
    ("learner.utd_ratio", "abc", "learner.utd_ratio"),
    ("task.episode_ticks", "0", "task.episode_ticks"),
    ("runtime.num_actors", "0", "runtime.num_actors"),
    ("buffer.fsync", "sometimes", "buffer.fsync"),
    ("budget.minutes", "-1", "budget.minutes"),
    ("runtime.host", "0.0.0.0", "runtime.host='0.0.0.0' is not a loopback"),
    ("runtime.mid_timeout_s", "0", "runtime.mid_timeout_s must be a number > 0"),
    ("robot.max_relative_target", "0", "robot.max_relative_target must be > 0"),
    ("runtime.mid_timeout_s", "nan", "runtime.mid_timeout_s must be a number > 0"),
])
def test_bad_values_name_the_key(key, value, match):
    with pytest.raises(ConfigError, match=match):
        validate(_cfg(**{key: value}))


def test_cli_rejects_unknown_key_and_unknown_option_at_start(tmp_path):
    r = robolearn(["run", "algo.not_a_key=1"], cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "algo.not_a_key" in r.stderr
    r = robolearn(["run", "task=no_such_task"], cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "task/no_such_task" in r.stderr
    r = robolearn(["run", "algo.gamma=7"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "algo.gamma" in r.stderr
    r = robolearn(["frobnicate"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "unknown command" in r.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("config.yaml"))


def test_a_new_key_of_a_map_field_is_refused_with_the_plus_it_needs_and_a_typo_without_it():
    from robolearn.config import compose

    with pytest.raises(ConfigError, match=r"takes a new key with a leading \+: '\+task\.instructions\.red=\.\.\.'"):
        compose(overrides=["task=pick_cube_color", 'task.instructions={red:["grab it"]}'])
    with pytest.raises(ConfigError) as typo:
        compose(overrides=["task=pick_cube_color", "task.bogus=1"])
    assert "task.bogus" in str(typo.value) and "+" not in str(typo.value)  # a typo is not to be appended
    cfg = compose(overrides=["task=pick_cube_color", '+task.instructions.red=["grab it"]'])
    assert list(cfg.task.instructions.red) == ["grab it"]


def test_resume_of_a_missing_run_says_so(tmp_path):
    r = robolearn(["run", "run_name=ghost", "resume=true"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "holds no run" in r.stderr


@pytest.mark.parametrize("overrides, named", [
    ({"algo": "habc"}, "algo=habc"),                          # habc needs policy=flow_chunk
    ({"policy": "flow_chunk"}, "algo=sac"),                   # sac needs policy=mlp
    ({"robot": "so101"}, "task=reach robot=so101"),           # sim tasks refuse a real robot
    ({"actor.chunking.mid_observation_ticks": "1"}, "need a two-stage policy"),  # the mlp policy is one-stage
])
def test_parts_that_do_not_fit_together_are_named_before_any_process(overrides, named):
    from robolearn.config import check_buildable

    with pytest.raises(ConfigError, match=named):
        check_buildable(validate(_cfg(**overrides)))


@pytest.mark.parametrize("overrides, named", [
    ({}, "set actor.realtime=true"),                                   # a server answers in wall time
    ({"actor.realtime": "true", "actor.max_policy_lag": "2"}, "max_policy_lag"),
])
def test_what_a_runs_policy_server_cannot_be_combined_with_is_named(overrides, named):
    with pytest.raises(ConfigError, match=named):
        validate(_cfg(**{"runtime.policy_server": "true", **overrides}))
    assert validate(_cfg(**{"runtime.policy_server": "true", "actor.realtime": "true"})).runtime.policy_server


def test_a_loop_that_never_waits_for_the_policy_needs_chunks():
    from robolearn.config import check_buildable

    with pytest.raises(ConfigError, match="policy.chunk_horizon"):
        check_buildable(validate(_cfg(**{"actor.realtime": "true", "actor.async_inference": "true"})))
    check_buildable(validate(_cfg(**{"actor.realtime": "true", "actor.async_inference": "true",
                                     "policy.chunk_horizon": "4"})))


def test_incompatible_task_and_robot_fail_at_start_and_leave_no_run_dir(tmp_path):
    r = robolearn(["run", "task=reach", "robot=so101", "run_name=mismatch"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "robot=so101" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1  # one line naming what is wrong
    assert not (tmp_path / "runs" / "mismatch").exists()


def test_a_failed_start_leaves_a_run_name_that_starts_again(tmp_path):
    from robolearn.rundir import RunDir

    run = RunDir(tmp_path / "runs" / "retry")
    (run.root / "buffer").mkdir(parents=True)
    run.config.write_text("x: 1\n")  # what a start that died before collecting anything leaves
    assert not run.holds_data()
    (run.buffer / "seg-000000.log").write_bytes(b"\0" * 8)
    assert run.holds_data()


def test_help_is_written_for_users():
    r = robolearn(["--help"], cwd=Path("."), timeout=60)
    assert r.returncode == 0
    assert "usage: robolearn <command>" in r.stdout and "robolearn run task=reach" in r.stdout
    assert "hydra has no subcommands" not in r.stdout.lower()


def test_dict_options_take_new_keys_the_way_the_readme_says():
    from robolearn.config import compose

    gym = validate(compose(overrides=["task=gym", "+task.kwargs.max_episode_steps=50"]))
    assert gym.task.kwargs == {"max_episode_steps": 50}
    real = validate(compose(overrides=["task=real", "teleop=scripted", "+task.reset.poses.mine=[0,-30,40,50,0,20]",
                                       "task.reset.pose=mine"]))
    assert real.task.reset.poses["mine"] == [0, -30, 40, 50, 0, 20]


@pytest.mark.parametrize("changes, match", [
    ({"task": "real", "teleop": "gui"}, "teleop=gui is the person at the GUI page; set gui.enabled=true"),
    ({"task": "real", "teleop": "gui", "gui.enabled": "true", "runtime.remote_actors": "1"},
     "robots joined from robot PCs"),
    ({"gui.enabled": "maybe"}, "gui.enabled must be true, false or auto"),
    ({"gui.help_holds": "true"}, "gui.help_holds holds the robot"),
    ({"gui.help_threshold": "0.1", "gui.uncertainty_samples": "0"}, "gui.help_threshold needs the uncertainty"),
    ({"gui.camera_intrinsics": "[1,1,1,1]"}, "go together"),
    ({"gui.port": "70000"}, "gui.port"),
])
def test_bad_gui_settings_name_what_is_wrong(changes, match):
    with pytest.raises(ConfigError, match=match):
        validate(_cfg(**changes))


def test_the_gui_is_on_for_real_robots_by_default_and_teleop_gui_takes_any_number_of_robots():
    cfg = validate(_cfg(**{"task": "real", "teleop": "gui", "gui.enabled": "true", "actor.realtime": "true",
                           "runtime.num_actors": "2"}))
    assert cfg.gui.on_for("sim_so101") and cfg.teleop.tty == "none"
    assert validate(_cfg()).gui.on_for("so101") and not validate(_cfg()).gui.on_for("sim_so101")
    with pytest.raises(ConfigError, match="one person at one"):  # a terminal's person still drives one robot
        validate(_cfg(**{"task": "real", "teleop": "keyboard", "actor.realtime": "true", "runtime.num_actors": "2"}))


def test_demos_recorded_at_another_rate_than_the_robot_ticks_are_refused_by_name(tmp_path):
    """A per-tick delta recorded at 25 Hz is another action at 50 Hz: the run refuses the folder before any process
    starts; a gym task without its own rate (the env's, known only once built) is not checked."""
    import json

    from robolearn.config import check_buildable

    demos = tmp_path / "demos"
    (demos / "meta").mkdir(parents=True)
    (demos / "meta" / "info.json").write_text(json.dumps({"fps": 25}))
    with pytest.raises(ConfigError, match=r"learner.demos.*recorded at 25 fps.*ticks at 50 Hz"):
        check_buildable(validate(_cfg(**{"learner.demos": demos, "robot.control_hz": 50})))
    check_buildable(validate(_cfg(**{"learner.demos": demos, "robot.control_hz": 25})))
    gym = {"task": "gym", "task.env_id": "Pendulum-v1", "learner.demos": demos}
    check_buildable(validate(_cfg(**gym)))
    with pytest.raises(ConfigError, match="ticks at 30 Hz"):
        check_buildable(validate(_cfg(**gym, **{"task.control_hz": 30})))
