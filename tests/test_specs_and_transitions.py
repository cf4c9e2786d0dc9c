import numpy as np
import pytest

from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec, SpecError
from robolearn.transition import TransitionWriter, validate_batch

OBS = ObservationSpec({"state": ArraySpec((3,), low=(-1,) * 3, high=(1,) * 3)})
ACT = ActionSpec(ArraySpec((2,), names=("a.pos", "b.pos"), low=(-2, -2), high=(2, 2)))


def _batch(n=4, end=True):
    w = TransitionWriter(OBS)
    for i in range(n):
        last = end and i == n - 1
        w.add({"state": np.full(3, i, np.float32)}, np.array([0.5, -0.5], np.float32), action_source=0,
              intervention=False, reward=1.0, terminated=last, truncated=False, success=last, episode_id=3, step=i,
              tick=10 + i, t_obs=0.0, t_act=0.0, policy_version=2, chunk_id=i, chunk_index=0, delay_ticks=0)
    return w.flush(final_obs={"state": np.full(3, 9, np.float32)} if end else None)


def test_observation_spec_names_the_offending_key():
    with pytest.raises(SpecError, match="observation.state.*shape"):
        OBS.validate({"state": np.zeros(4, np.float32)})
    with pytest.raises(SpecError, match="missing key.*state"):
        OBS.validate({})
    with pytest.raises(SpecError, match="dtype"):
        OBS.validate({"state": np.zeros(3, np.float64)})


def test_action_normalisation_round_trip_and_clip():
    a = np.array([1.0, -2.0], np.float32)
    np.testing.assert_allclose(ACT.to_robot(ACT.to_normalised(a)), a, atol=1e-6)
    np.testing.assert_allclose(ACT.clip(np.array([5.0, -5.0])), [2.0, -2.0])


def test_valid_batch_passes_and_counts():
    assert validate_batch(_batch(), OBS, ACT) == 4
    assert validate_batch(_batch(end=False), OBS, ACT) == 4


@pytest.mark.parametrize("mutate, match", [
    (lambda b: b.pop("reward"), "missing field.*reward"),
    (lambda b: b.__setitem__("extra", np.zeros(4)), "unknown field"),
    (lambda b: b.__setitem__("action", np.zeros((4, 3), np.float32)), "field 'action'"),
    (lambda b: b.__setitem__("action", np.full((4, 2), np.nan, np.float32)), "NaN"),
    (lambda b: b.__setitem__("step", np.zeros(4, np.float64)), "field 'step'"),
    (lambda b: b.pop("final_obs.state"), "final_obs must be sent"),
    (lambda b: b["terminated"].__setitem__(0, True), "only end at the last step"),
])
def test_invalid_batches_name_the_field(mutate, match):
    b = {k: v.copy() for k, v in _batch().items()}
    mutate(b)
    with pytest.raises(SpecError, match=match):
        validate_batch(b, OBS, ACT)


def test_stop_mid_episode_marks_last_step_truncated():
    w = TransitionWriter(OBS)
    for i in range(2):
        w.add({"state": np.zeros(3, np.float32)}, np.zeros(2, np.float32), action_source=0, intervention=False,
              reward=0.0, terminated=False, truncated=False, success=False, episode_id=0, step=i, tick=i, t_obs=0.0,
              t_act=0.0, policy_version=1, chunk_id=0, chunk_index=i, delay_ticks=0)
    b = w.flush(final_obs={"state": np.zeros(3, np.float32)}, truncate=True)
    assert b["truncated"].tolist() == [False, True]
    assert validate_batch(b, OBS, ACT) == 2
