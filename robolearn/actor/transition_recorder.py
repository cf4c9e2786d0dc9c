"""An ``EpisodeLoop`` subscriber that turns executed steps into transition batches (``robolearn.transition``)
and hands each batch to ``deliver``: the actor sends it to the learner, a benchmark appends it to a
buffer. Nothing is lost: a batch of ``send_every`` steps goes out once the step after it is taken, at the
episode end (with the final observation), and when the episode is stopped early (marked truncated, up to
the last executed step).
With ``stage``, each step also goes out on its own as it happens (the actor journals it on disk, so a
crash before its batch is complete loses nothing).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from robolearn.actor.episode import EpisodeResult, StepRecord
from robolearn.specs import ObservationSpec
from robolearn.transition import TransitionWriter

Deliver = Callable[[dict[str, np.ndarray]], None]


class TransitionRecorder:
    def __init__(self, obs_spec: ObservationSpec, deliver: Deliver, send_every: int | None = None,
                 stage: Deliver | None = None) -> None:
        """``send_every``: steps per batch within an episode (None: one batch per episode). ``stage``: gets
        each step as a one-step batch (with the final observation when it ends the episode) before it is
        added to the batch being filled."""
        self.obs_spec, self.deliver, self.send_every, self.stage = obs_spec, deliver, send_every, stage
        self.writer = TransitionWriter(obs_spec)

    def on_episode_start(self, episode_id: int, seed: int, obs: dict[str, np.ndarray]) -> None:  # noqa: ARG002
        self.writer = TransitionWriter(self.obs_spec)

    def on_step(self, step: StepRecord) -> None:
        fields = dict(reward=step.reward, terminated=step.terminated, truncated=step.truncated, success=step.success,
                      episode_id=step.episode_id, step=step.step, tick=step.tick, t_obs=step.t_obs,
                      t_act=step.t_act, **step.fields)
        if self.send_every is not None and len(self.writer) >= self.send_every:
            # a full batch goes out only now that another step exists: an episode stopped right after a full
            # batch still has a step left to close it with (truncated), and this step is journaled after the
            # batch before it is out, so a crash between the two loses neither
            self.deliver(self.writer.flush())
        if self.stage is not None:
            one = TransitionWriter(self.obs_spec)
            one.add(step.obs, step.action, **fields)
            self.stage(one.flush(final_obs=step.next_obs if step.done else None))
        self.writer.add(step.obs, step.action, **fields)
        if step.done:
            self.deliver(self.writer.flush(final_obs=step.next_obs))

    def on_episode_end(self, result: EpisodeResult) -> None:
        if result.stopped and len(self.writer):  # stopped mid-episode: deliver what was done, marked truncated
            self.deliver(self.writer.flush(final_obs=result.final_obs, truncate=True))
