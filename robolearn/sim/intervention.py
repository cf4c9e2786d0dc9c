"""A scripted human for sim: watches the robot, takes over with the task's scripted expert when the robot
drifts off course, hands back after a while. HIL learners (HABC, Hi-ORS) are tested with it, no person.

It is a HAL teleop (``hardware.teleop.Teleop``): ``read()`` says whether it is driving and with which
action; the control loop tells it what was executed with ``observe(action)``.

Off course (our rule): the mean distance, over the robot's own last ``drift_window`` executed steps (the
ticks the human drove never count), between the executed action and what the expert would have done, in
normalised action units per element (RMS), is above ``drift_threshold``; or the episode has run ``stuck_after``
of its ticks without success. The human then drives for ``takeover_ticks`` ticks (flagged as interventions), at
most ``max_takeovers`` times an episode. The expert is asked every tick, so its plan follows the scene while the
robot acts.

By default it is an oracle: it reacts the tick it notices and drives exactly as the expert would. A person is
not: ``reaction_ticks`` k lets the robot act k more ticks between noticing and taking over (the noticing is
not undone if the robot recovers meanwhile), and ``action_noise`` adds N(0, sigma) per element, in normalised
action units, to every action it drives with (its own generator, ``seed``: the same human for every arm).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from robolearn.hardware.teleop import TeleopEvent, TeleopReading
from robolearn.sim.arm_task import ArmTaskEnv


@dataclass
class ScriptedHumanConfig:
    drift_threshold: float = 0.35   # RMS normalised action error that counts as off course
    drift_window: int = 6           # executed steps averaged
    stuck_after: float = 0.6        # fraction of the episode's ticks after which no success is off course
    takeover_ticks: int = 25        # k: ticks the human drives once it takes over
    max_takeovers: int = 2          # per episode
    reaction_ticks: int = 0         # k: ticks between noticing and taking over
    action_noise: float = 0.0       # std of the noise on its actions, normalised units
    seed: int = 0                   # its noise generator

    def __post_init__(self) -> None:
        if self.drift_threshold <= 0 or self.drift_window < 1 or self.takeover_ticks < 1 or self.max_takeovers < 0:
            raise ValueError("scripted human: drift_threshold > 0, drift_window >= 1, takeover_ticks >= 1 and "
                             "max_takeovers >= 0 are required")
        if self.reaction_ticks < 0 or self.action_noise < 0:
            raise ValueError(f"scripted human: reaction_ticks and action_noise must be >= 0, got "
                             f"{self.reaction_ticks}, {self.action_noise}")


class ScriptedHuman:
    name = "scripted_human"

    def __init__(self, env: ArmTaskEnv, config: ScriptedHumanConfig | None = None) -> None:
        if not hasattr(env, "expert_action"):
            raise ValueError(f"{type(env).__name__} has no scripted expert; the scripted human needs one")
        self.env = env
        self.cfg = config or ScriptedHumanConfig()
        self._rng = np.random.default_rng(self.cfg.seed)
        self.reset()

    def connect(self) -> None:
        """Nothing to connect: the human lives in the simulator."""

    def disconnect(self) -> None:
        """Nothing to release."""

    def reset(self) -> None:
        """Call after every ``env.reset``."""
        self._errors: deque[float] = deque(maxlen=self.cfg.drift_window)
        self._suggestion: np.ndarray | None = None
        self._driving_left = 0
        self._noticed_at: int | None = None  # the tick it saw the robot off course, until it takes over
        self._drove = False  # it drove this tick
        self.takeovers = 0
        self.ticks = 0

    def _off_course(self) -> bool:
        if self.takeovers >= self.cfg.max_takeovers:
            return False
        drifting = len(self._errors) == self.cfg.drift_window and np.mean(self._errors) > self.cfg.drift_threshold
        stuck = self.ticks >= self.cfg.stuck_after * self.env.task.episode_ticks
        return bool(drifting or stuck)

    def read(self) -> TeleopReading:
        """Before the tick's action is chosen: the expert's suggestion, and whether the human drives."""
        self._suggestion = np.asarray(self.env.expert_action(), np.float32)
        self._drove = False
        events: set[TeleopEvent] = set()
        if self._driving_left == 0 and self._noticed_at is None and self._off_course():
            self._noticed_at = self.ticks
        if self._noticed_at is not None and self.ticks - self._noticed_at >= self.cfg.reaction_ticks:
            self._noticed_at = None
            self._driving_left = self.cfg.takeover_ticks
            self.takeovers += 1
            self._errors.clear()
            events.add(TeleopEvent.INTERVENTION_ON)
        if self._driving_left > 0:
            self._driving_left -= 1
            if self._driving_left == 0:
                events.add(TeleopEvent.INTERVENTION_OFF)
            self._drove = True
            return TeleopReading(self._driven(), events, intervening=True)
        return TeleopReading(None, events, intervening=False)

    def _driven(self) -> np.ndarray:
        """What it drives with: the expert's action, with its hand's noise (robot units)."""
        if not self.cfg.action_noise:
            return self._suggestion
        spec = self.env.action_spec
        noisy = spec.to_normalised(self._suggestion) + self._rng.normal(0.0, self.cfg.action_noise,
                                                                        self._suggestion.shape)
        return spec.to_robot(np.clip(noisy, -1.0, 1.0).astype(np.float32))

    def observe(self, executed: np.ndarray) -> None:
        """After the tick: the action the robot executed (robot units)."""
        self.ticks += 1
        if self._suggestion is None or self._drove:
            return  # the drift measures the robot's own actions, never the human's
        spec = self.env.action_spec
        err = spec.to_normalised(np.asarray(executed, np.float32)) - spec.to_normalised(self._suggestion)
        self._errors.append(float(np.sqrt(np.mean(err ** 2))))
