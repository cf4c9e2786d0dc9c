"""The run's rerun recording (``runs/<name>/run.rrd``).

Entities (one scalar series per element, batched with ``send_columns``):
- ``robot/<robot_id>/observation/state`` on the ``tick`` timeline (control ticks),
- ``robot/<robot_id>/action`` (executed action, robot units), ``robot/<robot_id>/reward``,
- ``learner/<metric>`` (losses, temperature, ...) on the ``learner_step`` timeline,
- ``robot/<robot_id>/chunk`` (each received chunk's predicted actions at the ticks they were meant
  for) and ``robot/<robot_id>/stalled`` (1 at a stalled tick), from the actor, on the ``tick`` timeline:
  plotted with ``action`` they show predicted chunks against what was executed.

The learner owns ``run.rrd``: every transition passes through it anyway, so nothing is logged twice.
Each actor writes what only it knows to ``actor-<i>.rrd`` under the same recording id, so
``rerun runs/<name>/*.rrd`` shows one merged recording. A resumed run starts a new segment file ``run.<k>.rrd`` next to
the first one, so no earlier recording is overwritten.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rerun as rr

from robolearn.transition import OBS_PREFIX


def recording_path(run_dir: Path) -> Path:
    first = run_dir / "run.rrd"
    if not first.exists():
        return first
    k = 1
    while (run_dir / f"run.{k}.rrd").exists():
        k += 1
    return run_dir / f"run.{k}.rrd"


def warm_up() -> None:
    """Do what rerun's first column costs once per process: pyarrow imports pandas the first time it builds an
    array (1.6 s of CPU on an idle 2-core machine). A ``Recording`` does it when made, so that it is not inside
    the first control tick that logs a chunk; a spare actor does it while it waits."""
    rr.TimeColumn("tick", sequence=np.zeros(1, dtype=np.int64))


class Recording:
    def __init__(self, run_dir: Path, run_name: str, path: Path | None = None) -> None:
        self.path = path or recording_path(run_dir)
        self.stream = rr.RecordingStream("robolearn", recording_id=run_name)
        self.stream.save(str(self.path))
        warm_up()

    def log_transitions(self, robot_id: str, arrays: dict[str, np.ndarray]) -> None:
        ticks = rr.TimeColumn("tick", sequence=arrays["tick"])
        base = f"robot/{robot_id}"
        for path, values in ((f"{base}/observation/state", arrays[f"{OBS_PREFIX}state"]),
                             (f"{base}/action", arrays["action"])):
            n, d = values.shape
            col = rr.Scalars.columns(scalars=values.astype(np.float64).reshape(-1)).partition([d] * n)
            rr.send_columns(path, indexes=[ticks], columns=col, recording=self.stream)
        rr.send_columns(f"{base}/reward", indexes=[ticks],
                        columns=rr.Scalars.columns(scalars=arrays["reward"].astype(np.float64)),
                        recording=self.stream)

    def log_chunk(self, robot_id: str, start_tick: int, actions: np.ndarray) -> None:
        """A chunk's actions (H, A), robot units, at ticks start_tick .. start_tick + H - 1."""
        n, d = actions.shape
        ticks = rr.TimeColumn("tick", sequence=np.arange(start_tick, start_tick + n))
        col = rr.Scalars.columns(scalars=actions.astype(np.float64).reshape(-1)).partition([d] * n)
        rr.send_columns(f"robot/{robot_id}/chunk", indexes=[ticks], columns=col, recording=self.stream)

    def log_stall(self, robot_id: str, tick: int) -> None:
        self.stream.set_time("tick", sequence=tick)
        self.stream.log(f"robot/{robot_id}/stalled", rr.Scalars(1.0))

    def log_policy_lag(self, robot_id: str, ticks: np.ndarray, lags: np.ndarray) -> None:
        """Each step's policy lag (learner version at ingest - the producing version) on the tick timeline."""
        rr.send_columns(f"robot/{robot_id}/policy_lag", indexes=[rr.TimeColumn("tick", sequence=ticks)],
                        columns=rr.Scalars.columns(scalars=lags.astype(np.float64)), recording=self.stream)

    def log_learner(self, step: int, metrics: dict[str, float]) -> None:
        self.stream.set_time("learner_step", sequence=step)
        for key, value in metrics.items():
            self.stream.log(f"learner/{key}", rr.Scalars(float(value)))

    def close(self) -> None:
        self.stream.flush()
        self.stream.disconnect()
