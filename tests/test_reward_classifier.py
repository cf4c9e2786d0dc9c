"""The success classifier: recorded labelled frames -> ``robolearn reward train`` -> safetensors + JSON (never
pickled) -> ``task.reward=classifier`` on the sim twin, where it ends episodes and the person overrides it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robolearn.hardware.operator import Operator, PersonConfig
from robolearn.hardware.safety import EStop, GuardedRobot, SafetyConfig
from robolearn.hardware.teleop import TeleopEvent
from robolearn.record import record
from robolearn.rewards.classifier import load_classifier, read_report
from robolearn.rewards.training import TrainConfig, load_frames, split_episodes, train_and_save
from robolearn.sim.reach import ReachConfig, ReachEnv
from robolearn.tasks.real import RealTaskConfig, RealTaskEnv
from tests.helpers import robolearn
from tests.scripted_keys import ScriptedKeys


def tiny_classifier(folder) -> str:
    """An untrained classifier on 32-pixel wrist images, saved as robolearn reward train saves one."""
    from robolearn.rewards.classifier import ClassifierSpec, SuccessClassifier, save_classifier

    out = folder / "untrained"
    save_classifier(SuccessClassifier(ClassifierSpec(("wrist",), (32, 32, 3))), out, {"note": "untrained"})
    return str(out)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("reward") / "reach"
    env = ReachEnv(ReachConfig(cameras=["wrist"], camera_size=32, camera_shadows=False))  # ~12x cheaper frames
    result = record(env, 8, root, "test/reach", fps=25, seed=100, hold_ticks=6, near_misses=8)
    env.close()
    assert result.episodes == 16 and result.successes >= 7
    return root


@pytest.fixture(scope="module")
def classifier(dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("clf") / "reach"
    # a fixed threshold: 16 episodes leave too few to choose one on validation episodes (choose_threshold's own test)
    report = train_and_save(dataset, out, TrainConfig(epochs=12, holdout=0.25, threshold=0.5))
    return out, report


def test_recorded_frames_carry_exact_success_labels(dataset):
    frames = load_frames(dataset)
    assert set(frames.images) == {"wrist"} and frames.images["wrist"].shape[1:] == (32, 32, 3)
    eps = np.unique(frames.episode)
    good = [e for e in eps if frames.label[frames.episode == e].any()]
    # a success episode ends with the hold: its last 6 frames show success (the 6 held ticks: each frame's image is
    # the state its previous step reached), not the 7th from the end (the success step's image is from before it)
    held = [e for e in good if frames.label[frames.episode == e][-6:].all()
            and not frames.label[frames.episode == e][-7]]
    assert len(held) >= 6
    assert len(good) >= 7 and len(eps) - len(good) >= 7  # the near misses: no success frame at all
    train, test = split_episodes(frames, 0.25, seed=0)
    assert not set(frames.episode[train]) & set(frames.episode[test])  # whole episodes held out


def test_a_frame_shows_success_when_the_step_before_it_reached_it():
    from robolearn.rewards.training import shows_success

    nxt = np.array([0, 1, 1, 1, 0, 0, 1, 0, 0, 1], bool)   # next.success of each frame
    ep = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    # episode 0 (success then held): frames 2, 3; episode 1 (its last step succeeded: an export): its last
    # frame; episode 2 likewise; never across episodes (frame 4 does not inherit frame 3's)
    assert shows_success(nxt, ep).astype(int).tolist() == [0, 0, 1, 1, 0, 0, 1, 0, 0, 1]


def test_the_threshold_is_the_most_precise_one_that_keeps_the_recall():
    from robolearn.rewards.training import choose_threshold

    p = np.array([0.1, 0.2, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99])
    truth = np.array([0, 0, 0, 1, 0, 1, 1, 1], bool)
    # at 0.9: precision 3/3, recall 3/4; at 0.7: 4/5 and 4/4; at 0.6: 4/6 and 4/4
    assert choose_threshold(p, truth, min_recall=0.75) == pytest.approx(0.9)
    assert choose_threshold(p, truth, min_recall=1.0) == pytest.approx(0.7)  # the most precise at full recall
    # precision 1 at 0.9 and 0.95, both with recall >= 1/2: the higher wins; 0.99 (recall 1/4) is below the floor
    assert choose_threshold(p, truth, min_recall=0.5) == pytest.approx(0.95)
    with pytest.raises(ValueError, match="no success frame"):
        choose_threshold(p, np.zeros_like(truth), min_recall=0.9)
    lost = np.array([0.0, 0.2, 0.9, 0.95])  # a success frame the classifier gives P = 0: no threshold keeps recall 1
    with pytest.raises(ValueError, match="no threshold keeps the validation recall"):
        choose_threshold(lost, np.array([1, 0, 1, 1], bool), min_recall=1.0)


def test_training_reports_held_out_precision_and_recall_and_saves_no_pickle(classifier, monkeypatch):
    out, report = classifier
    assert sorted(p.name for p in out.iterdir()) == ["classifier.json", "model.safetensors"]
    assert report["test_episodes"] >= 4 and read_report(out)["held_out"] == json.loads(json.dumps(report["held_out"]))
    frames = report["held_out"]["frames"]
    assert frames["precision"] >= 0.8 and frames["recall"] >= 0.8, frames  # a tiny model on 16 episodes
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("a classifier is never torch.load-ed"))
    model = load_classifier(out)
    assert model.spec.cameras == ("wrist",) and model.spec.image_shape == (32, 32, 3)


def test_a_keypoint_classifier_finds_image_positions_and_round_trips(tmp_path):
    from robolearn.policies.encoders import KeypointEncoder
    from robolearn.rewards.classifier import ClassifierSpec, SuccessClassifier, save_classifier

    encoder = KeypointEncoder(keypoints=3)
    with torch.no_grad():  # a channel that answers to red alone: its keypoint is where the red pixel is
        for conv in encoder.convs:
            if isinstance(conv, torch.nn.Conv2d):
                conv.weight.zero_()
                conv.bias.zero_()
        first, second, last = (c for c in encoder.convs if isinstance(c, torch.nn.Conv2d))
        first.weight[0, 0, 2, 2] = 1.0
        second.weight[0, 0, 1, 1] = 1.0
        last.weight[0, 0, 1, 1] = 50.0
    image = torch.zeros(1, 17, 17, 3, dtype=torch.uint8)
    image[0, 4, 12, 0] = 255  # row 4, column 12
    x, y = encoder(image)[0, [0, 3]].tolist()
    assert x == pytest.approx((12 / 16) * 2 - 1, abs=0.05) and y == pytest.approx((4 / 16) * 2 - 1, abs=0.05)
    spec = ClassifierSpec(("wrist",), (32, 32, 3), encoder="keypoints", feature_dim=8)
    model = SuccessClassifier(spec)
    save_classifier(model, tmp_path / "kp", {"note": "untrained"})
    loaded = load_classifier(tmp_path / "kp")
    obs = {"wrist": np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)}
    assert loaded.spec.encoder == "keypoints"
    assert loaded.probability(obs) == pytest.approx(model.eval().probability(obs))


def test_bad_input_is_named(dataset, classifier, tmp_path):
    with pytest.raises(FileExistsError):
        train_and_save(dataset, classifier[0], TrainConfig(epochs=1))
    with pytest.raises(ValueError, match="no camera"):
        load_frames(dataset, cameras=("front",))
    with pytest.raises(FileNotFoundError, match="not a success classifier"):
        load_classifier(tmp_path)
    result = robolearn(["reward", "train", str(dataset), "--out", str(classifier[0])], cwd=tmp_path)
    assert result.returncode != 0 and "already holds a classifier" in result.stderr


def test_the_twin_takes_its_reward_from_the_classifier_and_the_person_overrides_it(classifier, tmp_path):
    out, _ = classifier
    cfg = RealTaskConfig(reward="classifier", classifier=str(out), cameras=["wrist"], camera_size=32, scene_state=True,
                         camera_shadows=False)  # as the classifier's training frames were rendered
    env = RealTaskEnv(cfg)
    assert env.observation_spec.arrays["state"].shape == (21,)  # + the scene's tip and target (a tracker's)
    env.robot.connect()
    env.robot = GuardedRobot(env.robot, SafetyConfig(), EStop(tmp_path / "e.json"), 25.0, watch_time=False)
    keys = ScriptedKeys(auto_ready=True)
    keys.env = env
    env.attach_operator(Operator(PersonConfig(name="test"), None, keys=keys))
    model = load_classifier(out)
    for seed in range(200, 204):
        keys.press("enter")
        env.reset(seed=seed)
        for _ in range(env.episode_ticks):
            obs, r, term, trunc, info = env.step(env.scene.expert_action())
            p = model.probability(obs)  # the classifier's own answer on what the step showed
            assert info["success_probability"] == pytest.approx(p, abs=1e-6)
            assert (term, r, info["success"]) == ((True, 1.0, True) if p >= 0.5 else (False, 0.0, False))
            if term or trunc:
                break
        assert term and info["label"] == "classifier"  # the expert reaches the target: the classifier says so
    # a person who says failure whenever the scene looks like a success to the classifier: their word wins
    env.reset(seed=300)
    operator = env.operator
    operator._keys_reader = lambda: ["n"] if model.probability(env._observe()) >= 0.5 else []
    for _ in range(env.episode_ticks):
        obs, r, term, trunc, info = env.step(env.scene.expert_action())
        if term or trunc:
            break
    assert model.probability(obs) >= 0.5  # the classifier did say success on the last step
    assert trunc and not term and r == 0.0 and info["label"] == TeleopEvent.FAILURE
    with pytest.raises(ValueError, match="camera 'wrist'"):
        RealTaskEnv(RealTaskConfig(reward="classifier", classifier=str(out)))
    with pytest.raises(ValueError, match="holds none"):
        RealTaskConfig(reward="classifier", classifier=str(tmp_path))


def test_a_classifier_reads_its_state_values_by_name_from_another_tasks_state(dataset, tmp_path):
    """Trained on reach's recordings with the joint positions and the tip (what a real arm measures), it finds those
    values by name in the twin's longer state, and never reads the scene's target that sits beside them."""
    from robolearn.rewards.training import select_state

    report = train_and_save(dataset, tmp_path / "s", TrainConfig(epochs=1, threshold=0.5, state=("*.pos", "tip.*")))
    model = load_classifier(tmp_path / "s")
    joints = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
    # the expert never moves the gripper: a value constant in every training frame is left out, and named
    assert report["state_left_out_constant"] == ["gripper.pos"]
    assert model.spec.state_names == (*(f"{j}.pos" for j in joints if j != "gripper"), "tip.x", "tip.y", "tip.z")
    assert model.spec.state_dim == 8 and report["config"]["state"] == ["*.pos", "tip.*"]
    env = RealTaskEnv(RealTaskConfig(reward="classifier", classifier=str(tmp_path / "s"), cameras=["wrist"],
                                     camera_size=32, scene_state=True, camera_shadows=False))
    names = env.observation_spec.arrays["state"].names
    assert env.classifier.state_index.tolist() == [names.index(n) for n in model.spec.state_names]
    frames = load_frames(dataset)  # a recorded frame, its values placed where the twin's state has them
    state = np.array([frames.state[0][frames.state_names.index(n)] for n in names], np.float32)
    obs = {"wrist": frames.images["wrist"][0], "state": state}
    base = env.classifier.probability(obs)
    assert 0.0 < base < 1.0
    for i, name in enumerate(names):  # only the classifier's own values move its answer
        moved = {**obs, "state": obs["state"].copy()}
        moved["state"][i] = 50.0
        if name.startswith("target."):
            assert env.classifier.probability(moved) == base, name
    moved = {**obs, "state": obs["state"].copy()}
    moved["state"][names.index("tip.x")] += 0.05
    assert env.classifier.probability(moved) != base
    moved["state"][names.index("gripper.pos")] -= 20.0  # a policy that moves the gripper: not the classifier's business
    assert env.classifier.probability(moved) == env.classifier.probability({**moved, "state": np.where(
        np.arange(len(names)) == names.index("gripper.pos"), obs["state"], moved["state"])})
    far = [{**obs, "state": obs["state"].copy()} for _ in range(2)]  # far outside the training frames: clipped
    far[0]["state"][names.index("tip.x")] += 1.0   # ~18 of its standard deviations
    far[1]["state"][names.index("tip.x")] += 100.0
    assert env.classifier.probability(far[0]) == env.classifier.probability(far[1])
    with pytest.raises(ValueError, match=r"\['nope\.\*'\] match no element"):
        select_state(names, ("tip.*", "nope.*"))
    from robolearn.specs import ArraySpec, ObservationSpec

    short = ObservationSpec({"wrist": ArraySpec((32, 32, 3), dtype="uint8"),
                             "state": ArraySpec((2,), names=("tip.x", "tip.y"))})
    with pytest.raises(ValueError, match="lacks"):
        model.check_observation(short)


def recorded_reach(root) -> dict:
    """A recorded reach dataset read back with lerobot: per frame its state (with ``names``), action, episode,
    ``next.success`` and the tip's distance to the target (m)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/reach", root=root)
    names = list(ds.features["observation.state"]["names"])
    tip, target = ([names.index(f"{what}.{a}") for a in "xyz"] for what in ("tip", "target"))
    state = np.stack(ds.hf_dataset["observation.state"])
    return {"names": names, "state": state, "action": np.stack(ds.hf_dataset["action"]),
            "episode": np.array(ds.hf_dataset["episode_index"]), "success": np.array(ds.hf_dataset["next.success"]),
            "distance": np.linalg.norm(state[:, tip] - state[:, target], axis=1)}


@pytest.mark.parametrize("hold_aim_m", [0.0, 0.015])
def test_success_holds_cover_the_success_region_when_aimed_off_the_centre(tmp_path, hold_aim_m):
    """hold_aim_m: the successful episodes' held frames sit up to that far from the target (success frames near the
    region's edge for the classifier), still inside the success radius; 0 keeps them at its centre."""
    env = ReachEnv(ReachConfig())
    result = record(env, 6, tmp_path / "reach", "test/reach", fps=25, seed=300, hold_ticks=8, hold_aim_m=hold_aim_m)
    env.close()
    assert result.successes == 6
    rec = recorded_reach(tmp_path / "reach")
    episode, success = rec["episode"], rec["success"]
    last = [np.flatnonzero(episode == e)[-1] for e in np.unique(episode)]
    held = rec["distance"][last]
    assert held.max() < ReachConfig().success_radius and success[last].all()
    if hold_aim_m:
        assert np.median(held) > 0.004, held  # spread over the region, not all at its centre
    else:
        assert held.max() < 0.004, held


def test_wander_episodes_move_the_arm_about_where_the_expert_never_goes(tmp_path):
    """wander=W: W more episodes driven by a smooth random walk, not the expert: poses far from the expert's way to
    the target (negatives a classifier otherwise never sees), each frame still labelled by the sim's success."""
    env = ReachEnv(ReachConfig())
    result = record(env, 2, tmp_path / "reach", "test/reach", fps=25, seed=400, hold_ticks=4, wander=3)
    env.close()
    assert result.episodes == 5 and result.successes >= 2
    rec = recorded_reach(tmp_path / "reach")
    names, state, action = rec["names"], rec["state"], rec["action"]
    episode, success, distance = rec["episode"], rec["success"], rec["distance"]
    walked = episode >= 2
    # the expert heads for the target and ends on it; the walk ends where it happens to be
    last = [np.flatnonzero(episode == e)[-1] for e in range(5)]
    assert distance[last[:2]].max() < 0.02 and np.median(distance[last[2:]]) > 0.05, distance[last]
    # every frame's label is the sim's success at the state its step reached (the next frame of its episode), the
    # expert's held successes and the walk's frames alike
    following = np.flatnonzero(episode[1:] == episode[:-1])
    assert success[following].any() and not success[following[walked[following]]].all()
    assert (success[following] == (distance[following + 1] <= ReachConfig().success_radius)).all()
    # a smooth walk within the action limits, not white noise: consecutive actions are strongly correlated
    moves = action[walked][:, :-1]
    spec = env.action_spec.array
    assert (action[walked] >= spec.low_array() - 1e-6).all() and (action[walked] <= spec.high_array() + 1e-6).all()
    lag1 = np.mean([np.corrcoef(moves[:-1, j], moves[1:, j])[0, 1] for j in range(moves.shape[1])])
    assert lag1 > 0.5, lag1
    # the joints sweep more of their range than the expert's reach does
    joints = [names.index(n) for n in names if n.endswith(".pos") and not n.startswith("gripper")]
    assert (np.ptp(state[walked][:, joints], 0) > np.ptp(state[~walked][:, joints], 0)).sum() >= len(joints) - 1


def test_wander_is_refused_on_hardware(tmp_path):
    """A real arm is never driven at random: task=real without a simulated scene under it (``scene`` None, as
    RealTaskEnv on hardware has it) refuses wander before it moves anything."""

    class OnHardware:  # the attributes record() reads of RealTaskEnv on a real arm
        scene = None

        def expert_action(self):
            raise AssertionError("never reached")

    with pytest.raises(NotImplementedError, match="never on hardware"):
        record(OnHardware(), 1, tmp_path / "x", "test/x", fps=25, wander=1)
    assert not (tmp_path / "x").exists()
