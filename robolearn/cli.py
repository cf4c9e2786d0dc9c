"""``robolearn <command> [options]``: the command-line interface (hydra composes the configs of ``run``,
``eval`` and ``record``)."""

from __future__ import annotations

import os
import sys
import termios
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from robolearn.config import ConfigError, RunConfig, check_buildable, compose, to_yaml, validate
from robolearn.registry import lookup
from robolearn.rundir import RunDir
from robolearn.runtime.builtins import register_builtins

USAGE = """usage: robolearn <command> [key=value ...]

Robots and VLA policies that keep learning while they work.

commands:
  run        train: a learner and one actor per robot, until budget.minutes / budget.env_steps or Ctrl-C
               robolearn run task=reach algo=sac budget.minutes=5 run_name=my-reach
               robolearn run run_name=my-reach resume=true budget.minutes=2      (continue a run)
  eval       run a run's latest checkpoint:  robolearn eval run_dir=runs/my-reach episodes=50
  record     scripted-expert demos as a LeRobotDataset:
               robolearn record task=pick_cube episodes=20 out=demos/pick task.cameras=[front]
  reward     a success classifier for task.reward=classifier, from labelled episodes:
               robolearn reward train demos/reach-labelled --out classifiers/reach
  buffer     robolearn buffer info runs/my-reach [--json]
             robolearn buffer audit runs/my-reach [--json]
             robolearn buffer export runs/my-reach OUT [--only successes|interventions]
  resources  a live run's robots and simulators, their health and lease holders: robolearn resources runs/x
  keys       CurveZMQ keys for sockets off loopback: robolearn keys generate keys/ --clients robot-pc-1
  join       a robot PC's actors in a run whose learner is elsewhere: robolearn join tcp://ws:5555 --keys-dir keys/pc1
  cluster    a Ray cluster's nodes, robots, labels, leases and processes: robolearn cluster runs/x (runtime=ray)
  estop      hold every robot of a live run (or --robot ID) until re-armed, through restarts: robolearn estop runs/x
  rearm      release it (a person's explicit act; nothing else does): robolearn rearm runs/x

config groups (pick one with group=option, override any key with group.key=value):
  task     reach, push_cube, pick_cube, pick_cube_color, gym (task.env_id=...), real (a person: teleop=...)
  teleop   none, keyboard, gamepad, so101_leader, gui (the browser), scripted (the sim twin's stand-in)
  robot    sim_so101, so101
  policy   mlp, flow_chunk, lerobot, dsrl, vla
  algo     sac, habc, hiors, dsrl
  learner  the update schedule (learner.utd_ratio, learner.batch_size, ...)
  actor    how robots are driven (actor.chunking.mode, actor.inference_delay_ticks, actor.human, ...)
  runtime  local (runtime.num_actors, ...), ray (runtime.address=HOST:PORT; robot PCs are labelled Ray nodes)
A wrong key or value fails at start with a message naming it. See README.md and docs/ for every option.
"""
CONFIG_PATH = "pkg://robolearn.configs"
# on resume only these may change; the rest defines the learning problem and comes from the run dir
RESUME_MUTABLE = ("budget.", "runtime.", "actor.", "learner.", "teleop.", "resume=", "run_name=", "runs_dir=")


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
        _fail(f"'{ov}' cannot change on resume (only budget.*, runtime.*, actor.*, learner.*, teleop.* may); "
              "start a new run_name instead")
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
    elif run.config.exists() and run.holds_data():
        _fail(f"{run.root} already holds a run; pass resume=true to continue it, or another run_name")
    try:
        check_buildable(run_cfg)  # task / robot / policy / algo fit together: fail here, before any process
    except ConfigError as exc:
        _fail(str(exc))
    _name_the_terminal(run_cfg)
    run.root.mkdir(parents=True, exist_ok=True)
    run.config.write_text(to_yaml(run_cfg))
    run.run_id()
    return run_cfg, run


def _name_the_terminal(cfg: RunConfig) -> None:
    """``teleop.tty=auto``: the person's keys come from the terminal ``robolearn run`` runs in. The actor runs in a
    session of its own, so it is named for the workers in ``$ROBOLEARN_PERSON_TTY`` (each start names its own:
    the config keeps ``auto``, so a resume in another terminal reads that one)."""
    from robolearn.hardware.operator import name_person_terminal

    if getattr(cfg.teleop, "tty", None) == "auto" and not name_person_terminal("auto"):
        _fail(f"teleop={cfg.teleop.name} reads the person's keys from a terminal, and robolearn run is not in one; "
              "run it in a terminal (ssh -t over SSH) or name one with teleop.tty=/dev/pts/N")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def _run(cfg: DictConfig) -> None:
    run_cfg, run = _prepare_run(cfg)
    terminal = getattr(run_cfg.teleop, "tty", None)
    if terminal == "none":  # teleop=gui: the page is the person's only device
        terminal = None
    if terminal:
        from robolearn.hardware.operator import HELP, TIP_HELP, person_terminal

        terminal = person_terminal(terminal)

        print(f"[robolearn] the person's keys are read from {terminal}: {HELP}"
              + (f"; {TIP_HELP}" if run_cfg.teleop.name == "keyboard" else ""), flush=True)
    saved = _terminal_mode(terminal)
    try:
        summary = lookup("runtime", run_cfg.runtime.name).factory(run_cfg, run)
    except ConfigError as exc:  # what only the runtime can see (runtime=ray: the cluster's nodes and labels)
        _fail(str(exc))
    finally:
        if saved is not None:  # an actor killed in cbreak mode cannot give the terminal back its line editing
            _terminal_mode(terminal, restore=saved)
    raise SystemExit(0 if summary["ok"] else 1)


def _terminal_mode(path: str | None, restore: list | None = None) -> list | None:
    """The mode of the person's terminal (to restore after the run), or, with ``restore``, set it back. The
    terminal is opened only for that instant: while the run goes on only the actor holds it."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        _fail(f"teleop.tty={path}: cannot open it ({exc.strerror})")
    try:
        if not os.isatty(fd):
            _fail(f"teleop.tty={path} is not a terminal")
        if restore is not None:
            termios.tcsetattr(fd, termios.TCSANOW, restore)
            return None
        return termios.tcgetattr(fd)
    finally:
        os.close(fd)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="eval")
def _eval(cfg: DictConfig) -> None:
    from robolearn.evaluate import evaluate

    if OmegaConf.is_missing(cfg, "run_dir"):
        _fail("eval needs the run to evaluate: robolearn eval run_dir=runs/<name>")
    try:
        result = evaluate(Path(cfg.run_dir), episodes=cfg.episodes, seed=cfg.seed, deterministic=cfg.deterministic)
    except (FileNotFoundError, ValueError) as exc:  # ConfigError is a ValueError
        _fail(str(exc))
    print(f"success rate {result['success_rate']:.0%} over {result['episodes']} episodes "
          f"(mean return {result['mean_return']:.2f}, policy v{result['policy_version']})")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="record")
def _record(cfg: DictConfig) -> None:
    from robolearn.config import typed_group
    from robolearn.record import record

    if OmegaConf.is_missing(cfg, "out"):
        _fail("record needs a new folder for the dataset: robolearn record task=<task> out=demos/<name>")
    try:
        task, robot = typed_group(cfg, "task"), typed_group(cfg, "robot")
        if cfg.episodes < 1:
            raise ConfigError(f"config error at 'episodes': must be >= 1, got {cfg.episodes}")
        env = lookup("task", task.name).factory(task, robot)
        if hasattr(env, "attach_operator"):  # task=real: its twin's episodes end on the scripted person's word
            teleop = typed_group(cfg, "teleop")
            if teleop.name != "scripted":
                raise ConfigError("config error at 'teleop': robolearn record drives the sim twin's scripted expert; "
                                  "choose teleop=scripted (on hardware, record by teleop with lerobot-record)")
            env.attach_operator(lookup("teleop", teleop.name).factory(teleop, env))
        result = record(env, cfg.episodes, Path(cfg.out), cfg.repo_id, fps=round(env.robot.config.control_hz),
                        seed=cfg.seed, task=task.name, hold_ticks=cfg.hold_ticks, near_misses=cfg.near_misses,
                        miss_m=tuple(cfg.miss_m), hold_aim_m=cfg.hold_aim_m, wander=cfg.wander)
    except (ConfigError, FileExistsError, NotImplementedError, ValueError) as exc:
        _fail(str(exc))
    env.close()
    print(f"recorded {result.episodes} episodes ({result.frames} frames, success "
          f"{result.successes / result.episodes:.0%}) to {result.root}")


def _join() -> None:
    from robolearn.runtime.join import main as join_main

    raise SystemExit(join_main(sys.argv[1:]))


def _buffer() -> None:
    from robolearn.runtime.buffer_command import main as buffer_main

    raise SystemExit(buffer_main(sys.argv[1:]))


def _reward() -> None:
    from robolearn.runtime.reward_command import main as reward_main

    raise SystemExit(reward_main(sys.argv[1:]))


def _keys() -> None:
    from robolearn.runtime.keys_command import main as keys_main

    raise SystemExit(keys_main(sys.argv[1:]))


def _resources() -> None:
    from robolearn.runtime.resources_command import main as resources_main

    raise SystemExit(resources_main(sys.argv[1:]))


def _cluster() -> None:
    from robolearn.runtime.cluster_command import main as cluster_main

    raise SystemExit(cluster_main(sys.argv[1:]))


def _estop() -> None:
    from robolearn.runtime.estop_command import main as estop_main

    raise SystemExit(estop_main(sys.argv[1:], rearm=False))


def _rearm() -> None:
    from robolearn.runtime.estop_command import main as estop_main

    raise SystemExit(estop_main(sys.argv[1:], rearm=True))


COMMANDS = {"run": _run, "eval": _eval, "record": _record, "buffer": _buffer, "resources": _resources,
            "cluster": _cluster,
            "reward": _reward, "keys": _keys, "join": _join, "estop": _estop, "rearm": _rearm}
HYDRA_CONFIGS = {"run": "config", "eval": "eval", "record": "record"}  # commands whose options hydra composes


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        raise SystemExit(0)
    register_builtins()
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        _fail(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    if command in HYDRA_CONFIGS and not any(a.startswith("-") for a in rest):
        try:  # a wrong key, value type or option: one line naming it, before hydra's multi-line report
            compose(HYDRA_CONFIGS[command], rest)
        except ConfigError as exc:
            _fail(str(exc))
    sys.argv = [f"robolearn {command}", *rest]
    COMMANDS[command]()


if __name__ == "__main__":
    main()
