"""The learner's status as actors see it: a typed message riding on every weights message.

The learner writes one ``LearnerStatus`` into the meta of each ``weights`` message it publishes (full
snapshots, deltas and heartbeats alike); an actor reads the newest one from its ``WeightSubscriber``. The
actor uses it for three things:

- sim pacing (``actor.realtime=false``): step only while ``env_steps`` + the steps taken since this
  message stay below ``learned_env_steps`` + ``actor.max_steps_ahead`` (the learner keeps up with its
  update-to-data ratio);
- ``actor.max_policy_lag``: hold the robot while ``version`` is too far ahead of the actor's weights;
- ``learner.learning=sync``: at an episode end, wait until ``env_steps`` covers every step sent and
  ``caught_up`` says the updates due for them are done.

``schema`` is checked on receipt, so a learner and an actor of different versions fail loudly instead of
misreading each other's fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from robolearn.transport.wire import WireError

SCHEMA = 1
STATUS_KEY = "learner_status"  # the key of the status inside a weights message's meta


@dataclass(frozen=True)
class LearnerStatus:
    version: int             # the newest weight version the learner has published
    updates: int             # gradient updates done
    env_steps: int           # online steps ingested into the buffer
    learned_env_steps: int   # the env steps the updates done so far account for (learning_starts + updates / utd)
    caught_up: bool          # every update due for the ingested steps is done
    schema: int = SCHEMA

    def to_meta(self) -> dict[str, Any]:
        return {STATUS_KEY: asdict(self)}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> LearnerStatus | None:
        """The status in a weights message's meta (None when the sender is no learner, e.g. a test publisher);
        ``WireError`` naming the field when it is malformed or of another schema."""
        raw = meta.get(STATUS_KEY)
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise WireError(f"{STATUS_KEY}: expected a map, got {type(raw).__name__}")
        if raw.get("schema") != SCHEMA:
            raise WireError(f"{STATUS_KEY}.schema: {raw.get('schema')!r}, this actor reads schema {SCHEMA}")
        values = {}
        for f in fields(cls):
            value = raw.get(f.name)
            kind = bool if f.type in ("bool", bool) else int
            if type(value) is not kind:
                raise WireError(f"{STATUS_KEY}.{f.name}: expected {kind.__name__}, got {value!r}")
            values[f.name] = value
        return cls(**values)
