import pytest

from robolearn.config import ConfigError, validate
from tests.helpers import robolearn


def _cfg(**changes):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robolearn.configs", version_base="1.3"):
        overrides = [f"{k}={v}" for k, v in changes.items()]
        return compose(config_name="config", overrides=overrides)


def test_default_config_validates_to_typed_groups():
    cfg = validate(_cfg())
    assert cfg.task.name == "reach" and cfg.algo.name == "sac" and cfg.runtime.host == "127.0.0.1"
    assert cfg.algo.num_critics == 2 and cfg.policy.chunk_horizon == 1


@pytest.mark.parametrize("key, value, match", [
    ("algo.gamma", "1.5", "algo.gamma must be in"),
    ("learner.utd_ratio", "abc", "learner.utd_ratio"),
    ("task.episode_ticks", "0", "task.episode_ticks"),
    ("runtime.num_actors", "0", "runtime.num_actors"),
    ("buffer.fsync", "sometimes", "buffer.fsync"),
    ("budget.minutes", "-1", "budget.minutes"),
    ("runtime.host", "0.0.0.0", "runtime.host='0.0.0.0' is not a loopback"),
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


def test_resume_of_a_missing_run_says_so(tmp_path):
    r = robolearn(["run", "run_name=ghost", "resume=true"], cwd=tmp_path, timeout=60)
    assert r.returncode == 2 and "holds no run" in r.stderr
