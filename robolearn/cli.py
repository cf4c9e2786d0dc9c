"""``robolearn <command> [hydra overrides]``.

Hydra has no subcommands, so the command is taken from argv and the rest is handed to a
``@hydra.main`` function: ``robolearn run task=reach algo=sac budget.minutes=3 run_name=x``.

Commands:
    run      train: a learner and actor processes, until the budget is spent or Ctrl-C
    eval     run a trained policy: ``robolearn eval run_dir=runs/x episodes=20``
    record   scripted-expert demos as a LeRobotDataset: ``robolearn record task=reach episodes=20 out=demos/x``
    buffer   ``robolearn buffer info runs/x`` | ``robolearn buffer export runs/x OUT [--only successes]``
    resources  ``robolearn resources runs/x``: a live run's robots and sims, their health and holders
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from robolearn.config import ConfigError, RunConfig, to_yaml, validate
from robolearn.runtime.rundir import RunDir

USAGE = __doc__
CONFIG_PATH = "pkg://robolearn.configs"
# on resume only these may change; the rest defines the learning problem and comes from the run dir
RESUME_MUTABLE = ("budget.", "runtime.", "resume=", "run_name=", "runs_dir=")


def _fail(msg: str) -> None:
    print(f"robolearn: error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def _resume_config(run: RunDir, overrides: list[str]) -> RunConfig:
    if not run.config.exists():
        _fail(f"resume=true but {run.root} holds no run (no config.yaml); pass the run_name of an existing run")
    stored = OmegaConf.load(run.config)
    for ov in overrides:
        key, _, value = ov.partition("=")
        if ov.startswith(RESUME_MUTABLE):
            continue
        if "." not in key and OmegaConf.select(stored, f"{key}.name") == value:
            continue  # a config group pick that matches the stored run
        _fail(f"'{ov}' cannot change on resume (only budget.*, runtime.* may); start a new run_name instead")
    mutable = [o.lstrip("+") for o in overrides if o.startswith(RESUME_MUTABLE)]
    return validate(OmegaConf.to_container(OmegaConf.merge(stored, OmegaConf.from_dotlist(mutable))))


def _prepare_run(cfg: DictConfig) -> tuple[RunConfig, RunDir]:
    try:
        run_cfg = validate(cfg)
    except ConfigError as exc:
        _fail(str(exc))
    run = RunDir(Path(run_cfg.runs_dir) / run_cfg.run_name)
    if run_cfg.resume:
        try:
            run_cfg = _resume_config(run, list(HydraConfig.get().overrides.task))
        except ConfigError as exc:
            _fail(str(exc))
        run_cfg.resume = True
    elif run.config.exists():
        _fail(f"{run.root} already holds a run; pass resume=true to continue it, or another run_name")
    run.root.mkdir(parents=True, exist_ok=True)
    run.config.write_text(to_yaml(run_cfg))
    return run_cfg, run


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def _run(cfg: DictConfig) -> None:
    from robolearn.registry import lookup

    run_cfg, run = _prepare_run(cfg)
    summary = lookup("runtime", run_cfg.runtime.name).factory(run_cfg, run)
    raise SystemExit(0 if summary["ok"] else 1)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="eval")
def _eval(cfg: DictConfig) -> None:
    from robolearn.evaluate import evaluate

    try:
        result = evaluate(Path(cfg.run_dir), episodes=cfg.episodes, seed=cfg.seed, deterministic=cfg.deterministic)
    except (FileNotFoundError, ConfigError) as exc:
        _fail(str(exc))
    print(f"success rate {result['success_rate']:.0%} over {result['episodes']} episodes "
          f"(mean return {result['mean_return']:.2f}, policy v{result['policy_version']})")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="record")
def _record(cfg: DictConfig) -> None:
    from robolearn.config import typed_group
    from robolearn.record import record
    from robolearn.registry import lookup

    try:
        task, robot = typed_group(cfg, "task"), typed_group(cfg, "robot")
        if cfg.episodes < 1:
            raise ConfigError(f"config error at 'episodes': must be >= 1, got {cfg.episodes}")
        env = lookup("task", task.name).factory(task, robot)
        result = record(env, cfg.episodes, Path(cfg.out), cfg.repo_id, fps=round(env.robot.config.control_hz),
                        seed=cfg.seed, task=task.name)
    except (ConfigError, FileExistsError, NotImplementedError) as exc:
        _fail(str(exc))
    env.close()
    print(f"recorded {result.episodes} episodes ({result.frames} frames, expert success "
          f"{result.successes / result.episodes:.0%}) to {result.root}")


def _buffer() -> None:
    from robolearn.buffer.commands import main as buffer_main

    raise SystemExit(buffer_main(sys.argv[1:]))


def _resources() -> None:
    from robolearn.runtime.resources_command import main as resources_main

    raise SystemExit(resources_main(sys.argv[1:]))


COMMANDS = {"run": _run, "eval": _eval, "record": _record, "buffer": _buffer, "resources": _resources}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        raise SystemExit(0)
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        _fail(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    sys.argv = [f"robolearn {command}", *rest]
    COMMANDS[command]()


if __name__ == "__main__":
    main()
