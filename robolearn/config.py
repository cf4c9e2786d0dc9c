"""The run configuration: hydra composes it, this module validates it into typed dataclasses.

The dataclasses are the single source of defaults and documentation: ``store_config_schemas`` puts each
registered option (``task/reach`` is ``sim.reach.ReachConfig``, ...) and the run's own schema
(``RunSchema``) in Hydra's ConfigStore, so ``robolearn/configs/`` holds only the defaults lists, and hydra
already refuses an override of a key that does not exist. The schedule defaults of each algorithm
(``learner/<algo>``) are ``LearnerConfig`` with that algorithm's ``LEARNER_DEFAULTS``.

Every choice group (task, robot, policy, algo, runtime) is checked against the config dataclass
registered under its ``name``, and the fixed sections (``learner``, ``actor``, ``gui``, ``budget``, ``buffer``)
against theirs; unknown keys, wrong types and out-of-range values fail at start with a message that
names the key (``ConfigError``). Who owns what: ``algo`` the losses, ``learner`` the schedule of updates,
``actor`` how a robot is driven, ``runtime`` only where the processes run.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from robolearn import registry
from robolearn.actor.config import ActorConfig, GuiConfig
from robolearn.buffer.lerobot_io import check_recorded_rate
from robolearn.builders import build_policy, task_specs
from robolearn.learner.config import LearnerConfig
from robolearn.policies.encoders import image_keys
from robolearn.specs import SpecError


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names it."""


@dataclass
class BudgetConfig:
    minutes: float = 3.0               # wall-clock minutes for this invocation
    env_steps: int | None = None       # stop after this many environment steps in total (None: no limit)

    def __post_init__(self) -> None:
        if self.minutes <= 0:
            raise ValueError(f"budget.minutes must be > 0, got {self.minutes}")
        if self.env_steps is not None and self.env_steps <= 0:
            raise ValueError(f"budget.env_steps must be > 0, got {self.env_steps}")


@dataclass
class BufferConfig:
    capacity: int = 1_000_000          # online steps kept (FIFO by age); demos are never evicted
    fsync: str = "batched"             # strict: fsync every write | batched: every fsync_interval_s | off
    fsync_interval_s: float = 1.0
    ram_budget_mb: float = 4096.0      # compressed images held in RAM; older ones are read from disk
    segment_mb: float = 256.0          # size at which a new segment file starts

    def __post_init__(self) -> None:
        if self.capacity < 1000:
            raise ValueError(f"buffer.capacity must be >= 1000, got {self.capacity}")
        if self.fsync not in ("strict", "batched", "off"):
            raise ValueError(f"buffer.fsync must be strict, batched or off, got {self.fsync!r}")
        if self.ram_budget_mb < 0 or self.segment_mb <= 0:
            raise ValueError("buffer.ram_budget_mb must be >= 0 and buffer.segment_mb > 0")


@dataclass
class TopLevel:
    run_name: str = "run"
    runs_dir: str = "runs"
    seed: int = 0
    resume: bool = False
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    gui: GuiConfig = field(default_factory=GuiConfig)


@dataclass
class RunSchema(TopLevel):
    """The primary config as hydra composes it: the top level plus one option of each config group."""

    run_name: str = "${task.name}-${algo.name}-${now:%Y%m%d-%H%M%S}"
    task: Any = MISSING
    robot: Any = MISSING
    teleop: Any = MISSING
    policy: Any = MISSING
    algo: Any = MISSING
    runtime: Any = MISSING


def store_config_schemas() -> None:
    """Every registered config group option, and the run's schema, into Hydra's ConfigStore (once per
    process, after the registry is filled: ``runtime.builtins.register_builtins`` calls it)."""
    store = ConfigStore.instance()
    store.store(name="run_schema", node=RunSchema)
    for group in registry.CONFIG_GROUPS:
        for name in registry.names(group):
            store.store(group=group, name=name, node=registry.lookup(group, name).config_cls)
    for name in registry.names("algo"):  # learner: ${algo} in the defaults list picks these
        defaults = getattr(registry.lookup("algo", name).config_cls, "LEARNER_DEFAULTS", {})
        store.store(group="learner", name=name, node=LearnerConfig(**defaults))


def compose(config_name: str = "config", overrides: list[str] | None = None) -> DictConfig:
    """Compose a config as the CLI does (for tests and scripts); ``ConfigError`` when hydra refuses an override."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException

    with initialize_config_module(config_module="robolearn.configs", version_base="1.3"):
        try:
            return hydra_compose(config_name=config_name, overrides=overrides or [])
        except HydraException as exc:
            raise ConfigError(f"config error: {_hydra_message(exc)}") from None


def _hydra_message(exc: Exception) -> str:
    """Hydra's multi-line report as one line: what it refused, why (its cause), and the key."""
    # hydra's "To append to your config use +<the override>" line: wrong for a field the dataclass lacks (a typo), and
    # the override in it may hold spaces; a key new to a map field gets its own hint below
    parts = [re.sub(r"To append to your config use [^\n]*", "", str(exc).split("Config search path")[0])]
    cause = exc.__cause__
    if cause is not None:
        reason = (getattr(cause, "msg", None) or str(cause)).splitlines()[0]
        parts.append(reason)
        key = getattr(cause, "full_key", None)
        if key:
            parts.append(f"(key {key})")
            if "is not in struct" in reason and "." in key:  # a map field (e.g. task.instructions): new keys need +
                parts.append(f"{key.rsplit('.', 1)[0]} takes a new key with a leading +: '+{key}=...'")
    return " ".join(" ".join(p.split()) for p in parts)


class ChoiceConfig(Protocol):
    """What every config group option has: the registered ``name`` (its other fields are its own dataclass's)."""

    name: str


class RobotConfig(ChoiceConfig, Protocol):
    control_hz: float


class RuntimeConfig(ChoiceConfig, Protocol):
    """Where the processes run: every runtime has these (``runtime.local.LocalRuntimeConfig``)."""

    host: str
    num_actors: int
    keys_dir: str | None
    policy_server: bool
    mid_timeout_s: float
    lease_ttl_s: float
    status_every_s: float
    startup_timeout_s: float
    shutdown_timeout_s: float
    live_console: bool

    @property
    def total_actors(self) -> int:
        """Every actor of the run, on this machine and joined from others: episode ids stride by it."""


@dataclass
class RunConfig:
    run_name: str
    runs_dir: str
    seed: int
    resume: bool
    budget: BudgetConfig
    buffer: BufferConfig
    learner: LearnerConfig
    actor: ActorConfig
    gui: GuiConfig
    task: ChoiceConfig
    robot: RobotConfig
    teleop: ChoiceConfig
    policy: ChoiceConfig
    algo: ChoiceConfig
    runtime: RuntimeConfig

    def configured_control_hz(self) -> float | None:
        """The robot's tick rate as the config says it: the task's own ``control_hz`` where it has one (task=gym;
        None there means the env's own rate, known only once the env is built), else ``robot.control_hz``."""
        if hasattr(self.task, "control_hz"):
            return self.task.control_hz
        return self.robot.control_hz


def _typed(schema: type, values: Any, where: str) -> Any:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), values)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None)
        name = f"{where}.{key}" if key and where else (key or where or "config")
        msg = (getattr(exc, "msg", None) or str(exc)).splitlines()[0]
        raise ConfigError(f"config error at '{name}': {msg}") from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"config error: {exc}") from None


def typed_group(cfg: DictConfig | dict, group: str) -> Any:
    """One config group (task, robot, ...) as its registered dataclass; ``ConfigError`` names what is wrong."""
    container = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=True)
    section = container.get(group)
    if not isinstance(section, dict) or "name" not in section:
        raise ConfigError(f"config group '{group}' is missing or has no 'name'")
    try:
        entry = registry.lookup(group, section["name"])
    except KeyError as exc:
        raise ConfigError(f"config error at '{group}.name': {exc.args[0]}") from None
    return _typed(entry.config_cls, section, group)


def validate(cfg: DictConfig | dict) -> RunConfig:
    """Turn a composed config into a ``RunConfig``; raise ``ConfigError`` naming what is wrong."""
    container = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    groups = {group: typed_group(container, group) for group in registry.CONFIG_GROUPS}
    top = {k: v for k, v in container.items() if k not in registry.CONFIG_GROUPS and k != "hydra"}
    top_typed = _typed(TopLevel, top, "")
    cfg = RunConfig(**{k: getattr(top_typed, k) for k in TopLevel.__dataclass_fields__}, **groups)
    if cfg.learner.learning == "sync" and cfg.runtime.total_actors != 1:
        raise ConfigError("config error at 'learner.learning': sync is a one-robot baseline; "
                          "set runtime.num_actors=1")
    if cfg.runtime.policy_server:
        _check_policy_server(cfg)
    _check_teleop(cfg)
    return cfg


def _check_teleop(cfg: RunConfig) -> None:
    """A person (``teleop=...``) belongs to a task on a robot (``task=real``), and that task needs one."""
    real = cfg.task.name == "real"
    if real and cfg.teleop.name == "none":
        raise ConfigError("config error at 'teleop': task=real takes its rewards and resets from a person; choose "
                          "teleop=keyboard, gamepad, so101_leader or gui (teleop=scripted on the sim twin)")
    if not real and cfg.teleop.name != "none":
        raise ConfigError(f"config error at 'teleop': teleop={cfg.teleop.name} is the person of task=real; the sim "
                          f"task {cfg.task.name} takes its rewards from the simulator (its scripted human: "
                          "actor.human=scripted)")
    if real and cfg.task.reward == "classifier" and cfg.teleop.name == "scripted" and cfg.teleop.labels:
        raise ConfigError("config error at 'teleop.labels': the scripted person labels from the sim's hidden success, "
                          "which would override the classifier; set teleop.labels=false with task.reward=classifier")
    if real and cfg.actor.human != "none":
        raise ConfigError("config error at 'actor.human': task=real has its person in teleop=...; set actor.human=none")
    if cfg.teleop.name == "gui" and not cfg.gui.on_for(cfg.robot.name):
        raise ConfigError("config error at 'teleop': teleop=gui is the person at the GUI page; set gui.enabled=true")
    if cfg.teleop.name == "gui" and cfg.runtime.remote_actors:
        raise ConfigError("config error at 'teleop': the page reaches this machine's robots only; robots joined from "
                          "robot PCs (runtime.remote_actors) need a person there (teleop=keyboard, ...)")
    person = real and cfg.teleop.name != "scripted"  # a person at a terminal and a device
    # at a terminal one person drives one robot; the page has a tile per robot, each taken over on its own
    if person and cfg.teleop.name != "gui" and cfg.runtime.total_actors != 1:
        raise ConfigError(f"config error at 'runtime.num_actors': teleop={cfg.teleop.name} is one person at one "
                          "terminal, so it drives one robot; set runtime.num_actors=1 (and no remote_actors)")
    if person and not cfg.actor.realtime:
        raise ConfigError(f"config error at 'actor.realtime': teleop={cfg.teleop.name} is a person, who acts in wall "
                          "time; set actor.realtime=true")
    if real and cfg.robot.name != "sim_so101" and not cfg.actor.realtime:
        raise ConfigError(f"config error at 'actor.realtime': robot={cfg.robot.name} is hardware and runs in wall "
                          "time; set actor.realtime=true")


def _check_policy_server(cfg: RunConfig) -> None:
    """What ``runtime.policy_server=true`` cannot be combined with."""
    where = "config error at 'runtime.policy_server'"
    if not cfg.actor.realtime:
        raise ConfigError(f"{where}: a policy server answers in wall time, so the actors must pace their robots in "
                          "wall time too; set actor.realtime=true")
    if cfg.actor.max_policy_lag or cfg.learner.learning == "sync":
        raise ConfigError(f"{where}: actor.max_policy_lag and learner.learning=sync hold the robot for the weights "
                          "the actor loads, and with a server the actor does not act with its own; "
                          "use runtime.policy_server=false")


def check_buildable(cfg: RunConfig) -> None:
    """Build the task (its robot unconnected), the policy for its specs and the algorithm once, so a task /
    robot / policy / algo mismatch fails before any process starts; ``ConfigError`` says which."""
    try:
        obs_spec, action_spec = task_specs(cfg)
    except (ValueError, NotImplementedError) as exc:
        raise ConfigError(f"config error at 'task={cfg.task.name} robot={cfg.robot.name}': {exc}") from None
    try:
        policy = build_policy(cfg, obs_spec, action_spec)
    except (ValueError, NotImplementedError) as exc:
        raise ConfigError(f"config error at 'policy={cfg.policy.name}' for task={cfg.task.name}: {exc}") from None
    reads = getattr(policy, "observation_keys", None)
    if reads is None:  # the state policies: the state, and the cameras when they have an image encoder
        reads = ["state", *(image_keys(obs_spec) if getattr(policy, "encoder", None) is not None else [])]
    unused = [k for k in obs_spec.arrays if k not in reads]
    if unused:  # said, not silent: the policy acts without them
        print(f"warning: policy={cfg.policy.name} does not use the observation keys {unused} of "
              f"task={cfg.task.name} (it reads {list(reads)})", file=sys.stderr)
    if cfg.actor.chunking.mid_observation_ticks and not getattr(policy, "takes_mid_observation", False):
        raise ConfigError("config error at 'actor.chunking.mid_observation_ticks': two-stage requests need a two-stage "
                          f"policy (a trunk and a head: policy.mid_observation=true); policy={cfg.policy.name} is not "
                          "one, and every request would be refused")
    if cfg.actor.realtime and cfg.actor.async_inference and getattr(policy, "horizon", 1) < 2:
        raise ConfigError("config error at 'actor.async_inference': the loop never waits for the policy, so a chunk "
                          "is used one tick after it is asked for at the earliest, and a policy of one action per "
                          "chunk would stall every tick; set policy.chunk_horizon above the inference delay in ticks")
    if cfg.learner.demos:
        try:
            check_recorded_rate(cfg.learner.demos, cfg.configured_control_hz())
        except SpecError as exc:
            raise ConfigError(f"config error at 'learner.demos': {exc}") from None
    try:
        registry.lookup("algo", cfg.algo.name).factory(policy, cfg.algo, cfg.seed)
    except (ValueError, NotImplementedError) as exc:
        raise ConfigError(f"config error at 'algo={cfg.algo.name}' with policy={cfg.policy.name}: {exc}") from None
    if cfg.algo.name == "dsrl" and cfg.actor.chunking.mode != "naive_async":
        critic_horizon = cfg.algo.critic_horizon
        chunk = policy.horizon
        executed = cfg.actor.chunking.execute_horizon or chunk
        if (critic_horizon or chunk) != executed:  # said, not silent: the critic then scores actions never executed
            print(f"warning: algo.critic_horizon={critic_horizon} scores {critic_horizon or chunk} actions of each "
                  f"chunk, and the robot executes {executed} before it asks again (actor.chunking.execute_horizon); "
                  f"set algo.critic_horizon={executed}", file=sys.stderr)


def load_run_config(path: Path) -> RunConfig:
    """The validated config a run directory stores in ``config.yaml`` (``path``)."""
    if not path.exists():
        raise FileNotFoundError(f"{path.parent} is not a run directory (no config.yaml)")
    return validate(OmegaConf.to_container(OmegaConf.load(path)))


def to_yaml(cfg: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.create(asdict(cfg)))
