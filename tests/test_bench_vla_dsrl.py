"""bench-vla's saved policies: bench-vla-dsrl's ``--base`` and a policy bench-vla's ``--workdir`` already holds are
taken only with the settings the run would train them with (benchmarks/vla.py ``load_policy``), and those settings
reach the shipped CLI run's ``policy.base`` through its overrides (vla_dsrl.py ``base_overrides``), so the run's
frozen VLA is the network the checkpoint's weights fit."""

import argparse
import hashlib
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from robolearn.buffer.lerobot_io import check_recorded_rate
from robolearn.checkpoint import load_checkpoint
from robolearn.config import compose, validate
from robolearn.policies.dsrl import DSRLPolicy
from robolearn.policies.vla import VLAPolicy

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
import vla_dsrl  # noqa: E402
from common import COMMIT  # noqa: E402
from vla import (  # noqa: E402
    BC_STEPS,
    COLOURS,
    DEMOS,
    PERTURB,
    TEMPLATE_SETS,
    TRAIN_TEMPLATES,
    bc_settings,
    instructions,
    load_policy,
    make_env,
    policy_config,
    save_policy,
    task_config,
    unheard_words,
)
from vla_dsrl import base_overrides, confirm  # noqa: E402


def run_base(overrides: list[str]):
    return validate(compose(overrides=["task=pick_cube_color", "policy=dsrl", "algo=dsrl", *overrides])).policy.base


def test_the_benchmarks_vla_settings_compose_into_the_runs_frozen_base():
    config = policy_config()
    assert any(o.startswith("policy.base.camera_strides=") for o in base_overrides(config))  # differs from default
    assert run_base(base_overrides(config)) == config
    older = replace(config, camera_strides=[2, 1, 1, 1], text_encoder="minilm", colour_words=False)  # an older start
    assert run_base(base_overrides(older)) == older
    assert run_base([]) != config  # without the overrides the run would build another network


def test_critic_demos_are_recorded_by_the_shipped_recorder_once_and_reach_the_runs_buffer(tmp_path):
    """--critic-demos: ``robolearn record`` writes the scripted expert's episodes of the evaluation's task (from the
    BC demos' first seed, at the run's control rate) into the work folder once; a folder of that name recorded with
    other settings (another count, other sentences) is refused; the run's overrides compose into learner.demos = that
    folder and algo.demo_ratio."""
    task = task_config(instructions(), scene_state=False)
    folder = vla_dsrl.critic_demos(tmp_path, task, 1)
    info = json.loads((folder / "meta" / "info.json").read_text())
    assert (info["total_episodes"], info["total_tasks"]) == (1, 1) and info["total_frames"] > 10
    assert "observation.images.front" in info["features"] and "observation.images.wrist" in info["features"]
    mtime = (folder / "meta" / "info.json").stat().st_mtime
    assert vla_dsrl.critic_demos(tmp_path, task, 1) == folder
    assert (folder / "meta" / "info.json").stat().st_mtime == mtime  # kept, not recorded again
    shutil.copytree(folder, tmp_path / "critic-demos-2")
    shutil.copy(tmp_path / "critic-demos-1.json", tmp_path / "critic-demos-2.json")
    with pytest.raises(RuntimeError, match="recorded with other settings"):  # 1 episode, not 2
        vla_dsrl.critic_demos(tmp_path, task, 2)
    reworded = replace(task, instructions={**task.instructions, "red": ["lift the crimson cube"]})
    with pytest.raises(RuntimeError, match="crimson"):
        vla_dsrl.critic_demos(tmp_path, reworded, 1)

    args = argparse.Namespace(noise_bound=1.0, actor_warmup=400, actor_update_every=1, target_entropy_per_dim=-0.5,
                              init_temperature=0.1,
                              noise_critic=False, critic_horizon=5, utd=0.25, env_steps=100, minutes=1.0,
                              demo_ratio=0.5, shared_noise=False)
    ckpt = tmp_path / "bc" / "latest.pt"
    ran = validate(compose(overrides=vla_dsrl.run_overrides(ckpt, task, policy_config(), 0, args, folder)))
    assert (ran.learner.demos, ran.algo.demo_ratio, ran.task) == (str(folder), 0.5, task)
    check_recorded_rate(folder, ran.configured_control_hz())  # the recording's fps is the run's rate
    without = validate(compose(overrides=vla_dsrl.run_overrides(ckpt, task, policy_config(), 0, args)))
    assert (without.learner.demos, without.algo.demo_ratio) == ("", 0.0)
    assert not without.policy.shared_noise
    args.shared_noise = True
    shared = validate(compose(overrides=vla_dsrl.run_overrides(ckpt, task, policy_config(), 0, args)))
    assert shared.policy.shared_noise  # --shared-noise reaches the run's noise policy
    args.actor_update_every = 4
    fewer = validate(compose(overrides=vla_dsrl.run_overrides(ckpt, task, policy_config(), 0, args)))
    assert (without.algo.actor_update_every, fewer.algo.actor_update_every) == (1, 4)  # --actor-update-every reaches it


def test_pass_at_k_counts_episodes_with_a_success_in_their_first_k_draws():
    ok = torch.tensor([[1, 0, 0, 1], [0, 0, 1, 1], [0, 0, 0, 1]], dtype=torch.bool)  # (draws, episodes)
    got = vla_dsrl.pass_at(ok)
    assert got["success_per_draw"] == [0.5, 0.5, 0.25]
    assert got["pass_at"] == [0.5, 0.75, 0.75]
    assert (got["episodes_always"], got["episodes_sometimes"], got["episodes_never"]) == (1, 2, 1)


def test_each_noise_draw_of_an_episode_samples_other_noise_and_draw_0_is_the_evaluations():
    draw = vla_dsrl.NoiseDraw()
    noise = []
    for d in range(3):
        draw.draw = d
        draw.on_episode_start(0, 50_000, {})
        noise.append(torch.randn(4))
    torch.manual_seed(50_000)  # what SeedTorch alone gives the evaluation
    assert torch.equal(noise[0], torch.randn(4))
    assert not torch.equal(noise[0], noise[1]) and not torch.equal(noise[1], noise[2])
    with pytest.raises(ValueError, match="has no seed of its own"):  # would collide with another seed
        draw.on_episode_start(0, vla_dsrl.NoiseDraw.SPACING, {})


def test_a_confirmation_takes_only_the_figures_own_runs_settings_and_unused_seeds(tmp_path, monkeypatch):
    """--confirm re-evaluates the committed figure's policies, once: a second confirmation, seeds overlapping the
    figure's, another run's folder, a run whose summary is not the figure's, or VLA settings other than the figure's
    are refused before anything is evaluated."""
    config = policy_config()
    training = {"env_steps": 24000, "episodes": 266, "updates": 5831}
    figure = {"command": "make bench-vla-dsrl", "runs": [{"seed": 0, "training": training}],
              "settings": {"workdir": str(tmp_path / "figure"), "eval_seeds": "910000..910099",
                           "policy.base": json.loads(json.dumps(vars(config)))}}
    run = tmp_path / "figure" / "runs" / "dsrl-0"
    run.mkdir(parents=True)
    monkeypatch.setattr(vla_dsrl, "RESULTS", tmp_path)

    def refused(workdir: Path, policy, first_seed: int = 930000, summary: dict = training, **extra) -> str:
        (tmp_path / "vla_dsrl.json").write_text(json.dumps({**figure, **extra}))
        (run / "summary.json").write_text(json.dumps({**summary, "ok": True}))

        def never(_policy) -> dict:
            raise AssertionError("evaluated before the checks")
        with pytest.raises(SystemExit) as exc:
            confirm(workdir, None, policy, {}, "cmd", first_seed, 100, never)
        return str(exc.value)

    earlier = {"seeds": "930000..930099"}
    assert "already has a confirmation" in refused(tmp_path / "figure", config, confirmation=earlier)
    assert "overlap" in refused(tmp_path / "figure", config, first_seed=910050)
    assert "measured in" in refused(tmp_path / "another", config)
    assert "not the figure's" in refused(tmp_path / "figure", config, summary={**training, "episodes": 270})
    assert "VLA settings" in refused(tmp_path / "figure", replace(config, camera_strides=[2, 1, 1, 1]))
    assert "VLA settings" in refused(tmp_path / "figure", replace(config, noise_scale=0.5))
    # a figure recorded before a policy field existed was measured as with its default: its settings still match
    del figure["settings"]["policy.base"]["noise_scale"]
    missing = tmp_path / "bc" / "checkpoints" / "latest.pt"  # past the settings, the BC start is looked for
    assert "bc.json" in refused(tmp_path / "figure", config, bc_start={"checkpoint": str(missing)})
    assert "VLA settings" in refused(tmp_path / "figure", replace(config, noise_scale=0.5))



def check_base(ckpt: Path, settings: dict) -> dict:
    env = make_env(instructions(), scene_state=False)
    try:
        policy, record = load_policy(env, policy_config(), ckpt, settings, "--base")
    finally:
        env.close()
    return {"weights": policy.state_dict(), "bc": record}


def test_a_base_is_taken_only_with_the_bc_settings_this_run_would_train(tmp_path):
    env = make_env(instructions(), scene_state=False)
    config = policy_config()
    policy = VLAPolicy(env.observation_spec, env.action_spec, config)
    env.close()
    settings = bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128)
    ckpt = tmp_path / "policy-0" / "checkpoints" / "latest.pt"
    with pytest.raises(SystemExit, match="no .*bc.json"):
        check_base(ckpt, settings)
    assert save_policy(tmp_path / "policy-0", policy, settings, {"final_loss": 0.5}) == (
        ckpt, {"final_loss": 0.5, "commit": COMMIT, "checkpoint": str(ckpt), "loaded": False})
    weights = load_checkpoint(ckpt).policy_weights
    assert all(torch.equal(weights[k], v) for k, v in policy.state_dict().items())
    loaded = check_base(ckpt, settings)
    assert loaded["bc"] == {"checkpoint": str(ckpt), "final_loss": 0.5, "commit": COMMIT, "loaded": True}
    assert all(torch.equal(loaded["weights"][k], v) for k, v in policy.state_dict().items())
    with pytest.raises(SystemExit, match=r"seed 0 \(this run's: 1\)"):  # bench-vla's policy 0, not 1
        check_base(ckpt, bc_settings(config, 1, DEMOS, PERTURB, BC_STEPS, 128))
    with pytest.raises(SystemExit, match=r"bc_steps 12000 \(this run's: 6000\)"):
        check_base(ckpt, bc_settings(config, 0, DEMOS, PERTURB, 6000, 128))
    with pytest.raises(SystemExit, match=r"in policy\.camera_strides \[2, 2, 1, 1\] \(this run's: \[2, 1, 1, 1\]\)$"):
        check_base(ckpt, bc_settings(policy_config(camera_strides=[2, 1, 1, 1]), 0, DEMOS, PERTURB, BC_STEPS, 128))
    # how the policy samples is not how it was trained: a saved policy serves at any noise scale
    assert check_base(ckpt, bc_settings(policy_config(noise_scale=0.5), 0, DEMOS, PERTURB, BC_STEPS, 128))
    with pytest.raises(SystemExit, match=r"scene 'cameras' \(this run's: 'state'\)"):
        check_base(ckpt, bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128, scene="state"))
    wrist_2 = bc_settings(policy_config(wrist_shift_pad=2), 0, DEMOS, PERTURB, BC_STEPS, 128)
    with pytest.raises(SystemExit, match=r"camera_shift_pads \{\} \(this run's: \{'wrist': 2\}\)$"):
        check_base(ckpt, wrist_2)
    # both cameras' shifts at 6 px (96 px frames): the front camera's is the policy's own pad, the wrist needs none
    both_6 = policy_config(front_shift_pad=6, wrist_shift_pad=6)
    assert (both_6.image_shift_pad, both_6.camera_shift_pads) == (6, {})
    assert policy_config(front_shift_pad=6).camera_shift_pads == {"wrist": 4}
    with pytest.raises(SystemExit, match=r"image_shift_pad 4 \(this run's: 6\)$"):
        check_base(ckpt, bc_settings(both_6, 0, DEMOS, PERTURB, BC_STEPS, 128))
    # a bc.json written before a policy field existed: the field's default, as the policy then computed
    before = json.loads((ckpt.parent.parent / "bc.json").read_text())
    del before["settings"]["policy"]["camera_shift_pads"]
    (ckpt.parent.parent / "bc.json").write_text(json.dumps(before))
    assert check_base(ckpt, settings)
    with pytest.raises(SystemExit, match=r"camera_shift_pads \{\} \(this run's: \{'wrist': 2\}\)$"):
        check_base(ckpt, wrist_2)
    # and one written before bc.json named the cameras' size: every policy was trained at 64 px then
    del before["settings"]["camera_size"]
    (ckpt.parent.parent / "bc.json").write_text(json.dumps(before))
    assert check_base(ckpt, settings)
    with pytest.raises(SystemExit, match=r"camera_size 64 \(this run's: 96\)"):
        check_base(ckpt, bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128, camera_size=96))
    # and before it named the demos' templates: every policy was trained on the four then
    del before["settings"]["train_templates"]
    (ckpt.parent.parent / "bc.json").write_text(json.dumps(before))
    assert check_base(ckpt, settings)
    with pytest.raises(SystemExit, match=r"train_templates \['pick up the \{\} cube'.*\(this run's: \[.*'grasp the"):
        check_base(ckpt, bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128, templates=TEMPLATE_SETS["twenty"]))


def test_no_template_set_says_a_word_of_the_paraphrases_the_four_templates_do_not():
    """The paraphrases stay unheard with every --templates set: their verbs, nouns and colour words are not in it
    (what the four templates and the paraphrases share, "the", "cube", "pick", "up", "lift" and the colours, aside)."""
    assert all(not unheard_words(templates) for templates in TEMPLATE_SETS.values())
    assert len(TEMPLATE_SETS["twenty"]) == len(set(TEMPLATE_SETS["twenty"])) == 20
    assert unheard_words(["grab the {} cube", "lift the crimson cube", "pick up the red box"]) == {"grab", "crimson",
                                                                                                   "box"}


def test_bench_vla_evaluates_the_policies_its_workdir_holds_without_recording_demos(tmp_path, monkeypatch, capsys):
    """A bench-vla run that stopped after saving its policies goes on from them: with every policy saved under this
    run's settings no demo is recorded and no policy trained; a saved policy trained otherwise stops the run before
    any work."""
    import vla
    env = make_env(instructions(), scene_state=False)
    config = policy_config()
    torch.manual_seed(0)
    policy = VLAPolicy(env.observation_spec, env.action_spec, config)
    env.close()
    ckpt, _ = save_policy(tmp_path / "policy-0", policy, bc_settings(config, 0, DEMOS, PERTURB, BC_STEPS, 128),
                       {"seed": 0, "final_loss": 0.5, "seconds": 1.0})

    def never(*args, **kwargs):
        raise AssertionError("recorded demos or trained a policy that --workdir holds")

    monkeypatch.setattr(vla, "record_demos", never)
    monkeypatch.setattr(vla, "behaviour_clone", never)
    argv = ["vla.py", "--policies", "1", "--episodes", "1", "--rtt-requests", "2", "--eval-seed", "50000",
            "--refine-steps", "0", "--workdir", str(tmp_path)]  # plain BC: no refinement, so no DAgger either
    monkeypatch.setattr(sys, "argv", argv)
    vla.main()
    result = json.loads((tmp_path / "vla.json").read_text())
    assert result["bc"] == [{"checkpoint": str(ckpt), "seed": 0, "final_loss": 0.5, "seconds": 1.0, "commit": COMMIT,
                             "loaded": True}]
    assert [r["seed"] for r in result["runs"]] == [0]
    # each evaluation counts its episodes by the sentence said: a trained one, then a paraphrase
    for key, said in (("trained_instructions", {t.format(c) for t in TRAIN_TEMPLATES for c in COLOURS}),
                      ("paraphrases", {p for ps in vla.PARAPHRASES.values() for p in ps})):
        evaluated = result["runs"][0][key]
        assert set(evaluated["per_instruction"]) <= said
        assert [sum(n) for n in zip(*evaluated["per_instruction"].values(), strict=True)] == [
            round(evaluated["success"]), 1]  # --episodes 1
        assert sum(evaluated["failures"].values()) == 1 - round(evaluated["success"])  # each failure counted once
    assert "baseline" not in result  # plain BC served plainly: nothing to compare
    served, evaluate = [], vla.evaluate

    def evaluate_noting_the_serving(env, runner, episodes, first_seed, execute=vla.EXECUTE):
        served.append((runner.policy.config.noise_scale, execute))
        counts, run, step = {"requests": 0, "steps": 0}, runner.run, env.step

        def counted_run(requests):
            counts["requests"] += len(requests)
            return run(requests)

        def counted_step(action):
            counts["steps"] += 1
            return step(action)
        runner.run, env.step = counted_run, counted_step
        try:
            result = evaluate(env, runner, episodes, first_seed, execute)
        finally:
            del runner.run, env.step
        assert counts["requests"] == -(-counts["steps"] // execute)  # a chunk every `execute` ticks of the episode
        return result
    monkeypatch.setattr(vla, "evaluate", evaluate_noting_the_serving)
    for other, figure in ((["--noise-scale", "0.5"], (0.5, 5)), (["--execute", "1"], (1.0, 1))):
        served.clear()
        monkeypatch.setattr(sys, "argv", [*argv, *other])  # the saved policy, served otherwise
        vla.main()
        assert served == [figure, figure, (1.0, 5), (1.0, 5)]  # the figure's two evaluations, then the defaults'
        result = json.loads((tmp_path / "vla.json").read_text())
        assert result["bc"][0]["loaded"]
        assert (result["settings"]["policy"]["noise_scale"], result["settings"]["execute_horizon"]) == figure
        # the same episodes served as by default, beside the figure
        assert set(result["runs"][0]["baseline"]) == {"trained_instructions", "paraphrases"}
        assert (result["baseline"]["noise_scale"], result["baseline"]["execute_horizon"]) == (1.0, 5)
        assert result["baseline"]["trained_instructions"]["per_policy"] == [
            result["runs"][0]["baseline"]["trained_instructions"]["success"]]
    monkeypatch.setattr(sys, "argv", [*argv, "--bc-steps", "6000", "--policies", "2"])  # policy 1 must be trained
    with pytest.raises(SystemExit, match=r"--workdir's .*policy-0.* differs in bc_steps 12000 \(this run's: 6000\)"):
        vla.main()
    for option, value, setting, default in (("--front-shift-pad", "6", "image_shift_pad", "4"),
                                            ("--word-swap", "0.5", "word_swap", "0.0"),
                                            ("--colour-jitter", "20", "colour_jitter", "10.0")):
        monkeypatch.setattr(sys, "argv", [*argv, option, value])  # each option reaches the policy's settings
        with pytest.raises(SystemExit, match=rf"differs in policy\.{setting} {default} \(this run's: {value}"):
            vla.main()
    monkeypatch.setattr(sys, "argv", [*argv, "--policy-seeds", "1"])  # policy 1 alone: trained, policy 0 not read
    with pytest.raises(AssertionError, match="recorded demos or trained a policy"):
        vla.main()
    monkeypatch.setattr(sys, "argv", [*argv, "--front-shift-pad", "-1"])
    with pytest.raises(SystemExit):
        vla.main()
    assert "--front-shift-pad and --wrist-shift-pad must be >= 0 pixels, got -1 and 4" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", [*argv, "--word-swap", "0.5", "--no-colour-words"])  # the policy's own check
    with pytest.raises(SystemExit):
        vla.main()
    assert "policy.word_swap leaves the colour words as said" in capsys.readouterr().err


def test_the_gain_is_measured_over_the_best_way_of_serving_the_bc_start():
    """The baseline is the best of the BC start sampled at each baseline noise scale (a noise per action, and one
    shared by the chunk) and from zero noise; the policy serves at its own scale again afterwards."""
    env = make_env(instructions(), scene_state=False)
    config = policy_config()
    torch.manual_seed(0)
    policy = VLAPolicy(env.observation_spec, env.action_spec, config)
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    by_scale = {1.0: 0.45, 0.5: 0.52}
    shared = {1.0: 0.47, 0.5: 0.55}

    def evaluate_on(served) -> dict:
        if isinstance(served, DSRLPolicy):
            success = 0.44
        elif isinstance(served, vla_dsrl.SharedNoise):
            assert served.policy is policy
            success = shared[served.scale]
        else:
            success = by_scale[served.config.noise_scale]
        return {"success": success, "per_colour": {}}
    try:
        starts, baseline = vla_dsrl.start_success(env, config, policy, start, evaluate_on)
    finally:
        env.close()
    assert {k: v["success"] for k, v in starts.items()} == {
        "noise scale 1.0": 0.45, "noise scale 0.5": 0.52, "shared noise scale 1.0": 0.47,
        "shared noise scale 0.5": 0.55, "zero noise": 0.44}
    assert baseline == 0.55 and policy.config is config



def same(policy: torch.nn.Module, weights: dict) -> bool:
    return all(torch.equal(policy.state_dict()[k], w) for k, w in weights.items())


def test_bench_vla_refines_each_policy_and_evaluates_the_one_before_it_beside_it(tmp_path, monkeypatch):
    """--refine-steps: each BC policy is refined on the run's demos (its own weights left as saved), the refined one
    saved under refined/ with its settings and its start's hash, and evaluated for the figures; the BC policy, served
    as plain BC serves it, on the same episodes is the baseline. A second run loads both and records no demo; a
    refinement saved with other settings, or from another start, stops the run; bench-vla-dsrl's --base refuses a
    refined policy as its BC start."""
    import vla
    evaluated, evaluate = [], vla.evaluate

    def evaluate_noting_the_serving(env, runner, episodes, first_seed, execute=vla.EXECUTE):
        evaluated.append((runner.policy, runner.policy.config.noise_scale, execute, first_seed))
        return evaluate(env, runner, episodes, first_seed, execute)
    monkeypatch.setattr(vla, "evaluate", evaluate_noting_the_serving)
    argv = ["vla.py", "--policies", "1", "--episodes", "1", "--rtt-requests", "2", "--eval-seed", "50000",
            "--demos", "2", "--validation-demos", "1", "--bc-steps", "2", "--refine-steps", "2",
            "--noise-scale", "0.5", "--execute", "3", "--dagger", "0", "--workdir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    vla.main()  # trains policy 0, then refines it
    bc_ckpt = tmp_path / "policy-0" / "checkpoints" / "latest.pt"
    refined_ckpt = tmp_path / "policy-0" / "refined" / "checkpoints" / "latest.pt"
    figure, before = evaluated[0][0], evaluated[-1][0]
    assert evaluated == [(figure, 0.5, 3, 50000)] * 2 + [(before, 1.0, 5, 50000)] * 2 and figure is not before
    bc_weights = load_checkpoint(bc_ckpt).policy_weights
    refined_weights = load_checkpoint(refined_ckpt).policy_weights
    assert same(before, bc_weights) and same(figure, refined_weights)  # the BC policy as saved before refining
    assert not same(figure, bc_weights)  # which the refinement's steps changed
    result = json.loads((tmp_path / "vla.json").read_text())
    refined = result["bc"][0]["refined"]
    assert (refined["steps"], refined["loaded"]) == (2, False) and [s for s, _ in refined["held_out_loss"]] == [1, 2]
    assert result["settings"]["refine"] == {"steps": 2, "lr": vla.REFINE_LR,
                                            "start_sha256": hashlib.sha256(bc_ckpt.read_bytes()).hexdigest()}
    assert json.loads((refined_ckpt.parents[1] / "bc.json").read_text())["settings"]["refine"] == \
        result["settings"]["refine"]
    assert result["baseline"]["refine_steps"] == 0

    def never(*args, **kwargs):
        raise AssertionError("recorded demos, trained or refined a policy that --workdir holds")
    for name in ("record_demos", "behaviour_clone", "refine"):
        monkeypatch.setattr(vla, name, never)
    evaluated.clear()
    vla.main()
    result = json.loads((tmp_path / "vla.json").read_text())
    assert result["bc"][0]["loaded"] and result["bc"][0]["refined"]["loaded"]
    assert same(evaluated[0][0], refined_weights) and same(evaluated[-1][0], bc_weights)
    monkeypatch.setattr(sys, "argv", [*argv, "--refine-lr", "1e-4"])
    with pytest.raises(SystemExit, match=r"refined.* differs in refine.lr 0.0003 \(this run's: 0.0001\)"):
        vla.main()
    settings = bc_settings(policy_config(), 0, 2, PERTURB, 2, 128)
    with pytest.raises(SystemExit, match=r"differs in refine.steps 2 \(this run's: none\)"):
        check_base(refined_ckpt, settings)  # a refined policy is not the BC start bench-vla-dsrl asks for
    env = make_env(instructions(), scene_state=False)
    torch.manual_seed(1)
    save_policy(tmp_path / "policy-0", VLAPolicy(env.observation_spec, env.action_spec, policy_config()), settings,
                {"seed": 0, "final_loss": 0.5, "seconds": 1.0})  # the start trained again: another start
    env.close()
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit, match=r"refined.* differs in refine.start_sha256"):
        vla.main()


def test_bench_vla_dagger_refines_on_the_demos_and_the_oracles_labels_of_the_bc_policys_own_episodes(
        tmp_path, monkeypatch, capsys):
    """--dagger M: before its refinement the BC policy drives M episodes, every tick labelled by the scripted
    expert's oracle, and the refinement trains on the demos and those labels: as many rows as the demos' frames plus
    the ticks the rollouts executed (counted at the env). The refined policy's settings name the rollouts, so a run
    with others does not take it for its own; --dagger without a refinement to train on them is refused."""
    import vla
    demo_frames, executed, trained_on = [], [], []
    record_demos, oracle_rollouts, refine = vla.record_demos, vla.oracle_rollouts, vla.refine

    def recorded(*args, **kwargs):
        demo_frames.append(len((data := record_demos(*args, **kwargs)).states))
        return data

    def rolled_out(env, *args, **kwargs):
        step, steps = env.step, []

        def counted(action):
            steps.append(action)
            return step(action)
        env.step = counted
        try:
            made = oracle_rollouts(env, *args, **kwargs)
        finally:
            del env.step
        executed.append(len(steps))
        return made

    def refined(env, policy, data, *args, **kwargs):
        trained_on.append(len(data.states))
        return refine(env, policy, data, *args, **kwargs)
    monkeypatch.setattr(vla, "record_demos", recorded)
    monkeypatch.setattr(vla, "oracle_rollouts", rolled_out)
    monkeypatch.setattr(vla, "refine", refined)
    argv = ["vla.py", "--policies", "1", "--episodes", "1", "--rtt-requests", "2", "--eval-seed", "50000",
            "--demos", "2", "--validation-demos", "1", "--bc-steps", "2", "--refine-steps", "2", "--dagger", "1",
            "--workdir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    vla.main()
    assert len(demo_frames) == 2 and len(executed) == 1  # the training demos, then the held-out ones; one rollout
    assert trained_on == [demo_frames[0] + executed[0]]
    result = json.loads((tmp_path / "vla.json").read_text())
    assert result["settings"]["refine"]["dagger"] == {"episodes": 1, "first_seed": vla.DAGGER_SEED, "execute": 5}
    rollouts = result["bc"][0]["refined"]["dagger"]
    assert (rollouts["episodes"], rollouts["frames"]) == (1, executed[0])
    assert rollouts["seeds"] == f"{vla.DAGGER_SEED}..{vla.DAGGER_SEED}"
    monkeypatch.setattr(sys, "argv", [*argv[:-3], "2", *argv[-2:]])  # --dagger 2
    with pytest.raises(SystemExit, match=r"refined.* differs in refine.dagger"):
        vla.main()
    monkeypatch.setattr(sys, "argv", ["vla.py", "--dagger", "3", "--refine-steps", "0", "--eval-seed", "50000"])
    with pytest.raises(SystemExit):
        vla.main()
    assert "--dagger must be >= 0, and its rollouts are trained on in the refinement" in capsys.readouterr().err


def _vla_and_a_first_request() -> tuple[VLAPolicy, dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """An untrained VLA (seed 0) in eval mode and the first request of development episode 50000: its observations
    (a batch of 1), an empty prefix and its length."""
    env = make_env(instructions(), scene_state=False)
    try:
        torch.manual_seed(0)
        policy = VLAPolicy(env.observation_spec, env.action_spec, policy_config()).eval()
        obs, _ = env.reset(seed=50_000)
    finally:
        env.close()
    prefix, lens = np.zeros((1, 0, env.action_spec.dim), np.float32), np.zeros(1, np.int64)
    return policy, {k: v[None] for k, v in obs.items()}, prefix, lens


def test_replayed_noise_records_the_policys_own_draw_and_replays_it_perturbed_by_s():
    """Recording serves the chunk the VLA would sample itself from the same seeding (the evaluation's draw 0); a
    replay at s = 0 repeats every recorded chunk, at s > 0 it starts from other noise of the same prior."""
    policy, observations, prefix, lens = _vla_and_a_first_request()
    served = vla_dsrl.ReplayedNoise(policy)

    def chunks() -> list[np.ndarray]:
        return [served.predict_chunk(observations, prefix, lens) for _ in range(2)]

    torch.manual_seed(7)
    own = [policy.predict_chunk(observations, prefix, lens) for _ in range(2)]
    served.record()
    torch.manual_seed(7)
    recorded = chunks()
    assert len(served.noises) == 2 and all(np.array_equal(a, b) for a, b in zip(own, recorded))
    served.replay(0.0)
    assert all(np.array_equal(a, b) for a, b in zip(recorded, chunks()))
    served.replay(0.05)
    nearby = chunks()
    assert not any(np.array_equal(a, b) for a, b in zip(recorded, nearby))
    served.replay(1.0)
    far = chunks()
    assert np.abs(far[0] - recorded[0]).mean() > np.abs(nearby[0] - recorded[0]).mean()
    with pytest.raises(ValueError, match="must be in"):
        served.replay(1.5)


def test_noise_sensitivity_pools_the_replays_around_recorded_successes_and_failures():
    rows = [{"success": True, "replays": {"0.0": [True], "0.05": [True, False]}},
            {"success": True, "replays": {"0.0": [True], "0.05": [True, True]}},
            {"success": False, "replays": {"0.0": [False], "0.05": [False, True]}}]
    got = vla_dsrl.sensitivity_by_scale(rows)
    assert got["s=0.0"] == {"around_success": 1.0, "around_success_replays": 2, "around_failure": 0.0,
                            "around_failure_replays": 1}
    assert got["s=0.05"] == {"around_success": 0.75, "around_success_replays": 4, "around_failure": 0.5,
                             "around_failure_replays": 2}


def test_a_replays_noise_is_the_recorded_noises_prior_correlated_sqrt_1_minus_s_squared_with_it():
    env = make_env(instructions(), scene_state=False)
    try:
        policy = VLAPolicy(env.observation_spec, env.action_spec, policy_config())
    finally:
        env.close()
    served = vla_dsrl.ReplayedNoise(policy)
    served.record()
    torch.manual_seed(3)
    recorded = served.draw((200, 100, 1))
    sigma = policy.config.noise_scale
    for s in (0.05, 0.4, 1.0):
        served.replay(s)
        noise = served.draw((200, 100, 1))
        assert abs(noise.std().item() / sigma - 1) < 0.03, s
        correlation = torch.corrcoef(torch.stack([noise.flatten(), recorded.flatten()]))[0, 1].item()
        assert abs(correlation - (1 - s ** 2) ** 0.5) < 0.03, s


def test_shared_noise_serves_the_vla_from_one_seeded_draw_of_the_actions_size_at_every_position():
    policy, observations, prefix, lens = _vla_and_a_first_request()
    torch.manual_seed(7)
    served = vla_dsrl.SharedNoise(policy, 0.5).predict_chunk(observations, prefix, lens)
    after = torch.randn(1)  # what the generator gives next: A values were drawn, not H * A
    torch.manual_seed(7)  # the draw is torch's, so the loop's per-episode seeding (NoiseDraw's draws) sets it
    v = 0.5 * torch.randn(1, 1, policy.action_dim)
    assert torch.equal(after, torch.randn(1))
    with torch.no_grad():
        expected = policy.chunk_from_noise(policy.observation_tensors(observations), v.repeat(1, policy.horizon, 1),
                                           torch.as_tensor(prefix), torch.as_tensor(lens)).numpy()
    np.testing.assert_array_equal(served, expected)
    torch.manual_seed(7)
    assert not np.array_equal(policy.predict_chunk(observations, prefix, lens), served)  # not the VLA's own noise


def test_an_actor_update_every_below_one_is_refused_before_anything_runs(monkeypatch, capsys):
    """algo.actor_update_every's own check would only fail the first DSRL run, after the start's servings."""
    monkeypatch.setattr(sys, "argv", ["vla_dsrl.py", "--actor-update-every", "0", "--eval-seed", "50000",
                                      "--runs", "1"])

    def past_the_checks() -> None:
        raise AssertionError("main went past its argument checks")
    monkeypatch.setattr(vla_dsrl, "register_builtins", past_the_checks)  # what main does first after them
    with pytest.raises(SystemExit):
        vla_dsrl.main()
    assert "--actor-update-every must be >= 1, got 0" in capsys.readouterr().err
