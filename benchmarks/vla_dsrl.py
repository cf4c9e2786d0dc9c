"""DSRL on the VLA of ``make bench-vla``: ``dsrl_success_gain``, success gained by steering the frozen VLA's noise.

    make bench-vla-dsrl   (python benchmarks/vla_dsrl.py [--runs 3] [--env-steps 24000] [--utd 0.25] [--episodes 100])

1. The BC start: bench-vla's policy ``--base-seed`` (default 0), trained here as there (vla.py's ``record_demos`` and
   ``behaviour_clone``: the same demos, settings, BC steps and seed) and saved as a robolearn checkpoint in
   ``--workdir`` (vla.py's ``save_policy``, with ``bc.json``); ``--base CKPT`` starts from one saved by bench-vla
   (``<its workdir>/policy-0/checkpoints/latest.pt``) or by an earlier run of this script instead, and refuses it
   unless the ``bc.json`` beside it names the settings this run would train with (``--base-seed``, ``--demos``,
   ``--bc-steps``, ``--batch-size``, ``--camera-strides``, ``--wrist-shift-pad``, the demos' perturbation, the
   scene, the VLA config). The VLA is bench-vla's default one (``vla.policy_config``, colour words on): bench-vla's
   ``--camera-encoder``, ``--text-encoder``, ``--no-colour-words``, ``--front-shift-pad``, ``--word-swap``,
   ``--colour-jitter``, ``--templates`` and ``--camera-size`` have no counterpart here, so a policy trained with other
   values is refused as a base.
2. Its success on the held-out seeds: vla.py's ``evaluate``, 100 episodes from 910000 (never used while developing),
   sync, the first 5 actions of each 10-action chunk executed.
3. ``--runs`` runs of the shipped ``robolearn run`` (actor and learner processes, the transitions spooled and
   the weights published as in any run), seeds 0.. runs-1::

       robolearn run task=pick_cube_color task.language=true task.scene_state=false task.cameras=[front,wrist]
           task.camera_size=64 task.camera_shadows=false +task.instructions.<colour>=[vla.py's training sentences]
           policy=dsrl policy.base.name=vla policy.base.<the VLA's settings> policy.base_checkpoint=<the BC start>
           policy.noise_bound=<--noise-bound> algo=dsrl algo.actor_warmup=<--actor-warmup>
           algo.actor_update_every=<--actor-update-every>
           algo.target_entropy_per_dim=<--target-entropy-per-dim> algo.init_temperature=<--init-temperature>
           algo.noise_critic=<--noise-critic> policy.shared_noise=<--shared-noise>
           algo.critic_horizon=<--critic-horizon, default 5: the critic scores the actions each chunk executes>
           learner.utd_ratio=<--utd> learner.threads=2 budget.env_steps=<--env-steps>
           actor.chunking.mode=sync actor.chunking.splice=replace actor.chunking.max_prefix=0
           actor.chunking.execute_horizon=5

   each for ``--env-steps`` env steps, every one of them counted in the budget (the episodes the noise policy explores
   in, there are no others): the actor executes chunks as the evaluation does.
4. Each run's last checkpoint on the same held-out seeds, the noise policy's mean (no exploration), the VLA unchanged
   (its weights are compared with the BC start's, tensor by tensor). The figures so far go to
   ``<workdir>/progress.json`` as each run ends; the results file is written once all runs have.

``--critic-demos N`` puts the scripted expert's N episodes of the task, recorded once into the work folder by the
shipped ``robolearn record`` (seeds from vla.py's DEMO_SEED), into every run's buffer as demos (``learner.demos``),
``--demo-ratio`` of each batch (``algo.demo_ratio``, RLPD): the critic and pi_W learn from them as from the run's own
steps. They are offline data, like the BC start's demos, and not counted in the env-step budget. Off by default
(development, BENCHMARKS.md vla_dsrl: it did not help).

By default (``--shared-noise``, since 2026-12-07) the noise policy chooses one 6-element noise, started at each of
the chunk's 10 positions (``policy.shared_noise``: 6 dimensions to search instead of 60); the BC start is then also
evaluated sampling such noise at each scale (``shared noise scale <s>``, in the gain's baseline with either setting),
and ``--pass-at`` draws such noise. ``--no-shared-noise``: a noise per action, 60 elements, as every figure before it
(``--noise-sensitivity`` always perturbs a noise per action).

``--success-reward-only`` runs DSRL on ``task.shaped_reward=false``: the success bonus alone, no distance terms, as
a real robot's person or success classifier rewards it (the evaluation counts success either way).

``--pass-at K`` (with ``--base``) measures only the BC start's headroom for noise steering: each of ``--episodes``
episodes from ``--eval-seed`` played K times sampling other noise (draw 0 seeded as the evaluation is), pass@k and
how many episodes succeed in every draw, some or none, into ``<workdir>/pass_at.json``; no DSRL run.

``--noise-sensitivity R`` (with ``--base``) measures only whether the BC start's outcomes follow its noise smoothly:
each of ``--episodes`` episodes from ``--eval-seed`` played once recording every chunk's noise (draw 0), then
replayed R times from that noise perturbed by s (sqrt(1 - s^2) x recorded + s x a fresh draw, the same prior) for
each s of SENSITIVITY_SCALES; the replays' success around the recorded successes and around the failures, per s,
into ``<workdir>/noise_sensitivity.json``; no DSRL run. An outcome a noise policy could steer by choosing the noise
stays with the recorded one under small s; one that is chaotic in the noise falls to its scene's own odds (s = 1).

``--confirm WORKDIR`` (``make bench-vla-dsrl ARGS="--confirm <the figure's workdir>"``) evaluates the committed figure's
policies again, on 100 episodes from ``--confirm-seed`` (930000: no run, no development and no other benchmark has
used them): the BC start both ways and each run's last checkpoint, found in the work folder that figure's run left
(its ``settings.workdir``; each checkpoint must be at the env steps the figure recorded and the VLA in it unchanged).
They go into the results file as ``confirmation`` beside the figure, with their own gain; the goal stays the
held-out seeds' figure; one confirmation per figure, on seeds that do not overlap its own, and only of the runs and
BC start the figure recorded (their summaries, BC loss and commit are compared first). The held-out seeds have
served every figure of this benchmark since ``c0557d8``, and its budget was raised after the 12,000-step figure on
them; the confirmation's seeds are the check that the gain is not theirs.

The BC start is evaluated as the VLA serves itself (its flow from sampled noise) at each noise scale of
BASELINE_NOISE_SCALES (1, what training saw, and 0.5) and at ``--noise-scale``, at the same scales from one sampled
noise shared by the chunk's positions (since 2026-12-07), and from zero noise (through DSRL's
serving with the noise policy's mean held at 0: where a run's deterministic evaluation starts before it learns).
``dsrl_success_gain`` (issue 18, >= 0.15): the median over runs of success after minus the best of these, with min
and max, and each run's success beside it. Each run's config is checked against the evaluation's task,
VLA settings and chunk execution, and a run that stopped short of its env steps stops the benchmark.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import COMMIT, RESULTS, ROBOLEARN, goal, machine, run_command, spread, write_result  # noqa: E402
from vla import (  # noqa: E402
    BC_STEPS,
    CAMERA_FEATURES,
    CAMERA_STRIDES,
    DEMO_SEED,
    DEMOS,
    EVAL_CHUNKING,
    EVAL_SEED,
    EXECUTE,
    FUSE_DIMS,
    NOISE_SCALE,
    PERTURB,
    WRIST_SHIFT_PAD,
    H,
    bc_settings,
    behaviour_clone,
    episode_loop,
    evaluate,
    instructions,
    load_policy,
    policy_config,
    record_demos,
    recorded_policy,
    results_folder,
    sampling_at,
    save_policy,
    task_config,
)

from robolearn.builders import build_policy  # noqa: E402
from robolearn.checkpoint import load_checkpoint  # noqa: E402
from robolearn.config import load_run_config  # noqa: E402
from robolearn.inference.runner import ChunkPolicyRunner  # noqa: E402
from robolearn.policies.dsrl import DSRLPolicy, DSRLPolicyConfig  # noqa: E402
from robolearn.policies.vla import VLAPolicy, VLAPolicyConfig  # noqa: E402
from robolearn.runtime.builtins import register_builtins  # noqa: E402
from robolearn.sim.cube_tasks import PickCubeColorConfig, PickCubeEnv  # noqa: E402


def task_overrides(task: PickCubeColorConfig) -> list[str]:
    """The run's task as ``robolearn run`` overrides: vla.py's evaluation task (``task_config``), its sentences too
    (``dsrl_run`` checks the run's config equals it)."""
    sentences = [f"+task.instructions.{c}=[" + ",".join(json.dumps(t) for t in ts) + "]"
                 for c, ts in task.instructions.items()]
    return ["task=pick_cube_color", f"task.language={task.language}", f"task.scene_state={task.scene_state}",
            f"task.cameras=[{','.join(task.cameras)}]", f"task.camera_size={task.camera_size}",
            f"task.camera_shadows={task.camera_shadows}", f"task.shaped_reward={task.shaped_reward}", *sentences]


def base_overrides(config: VLAPolicyConfig) -> list[str]:
    """``policy.base.*``: the BC start's settings where they differ from ``policy=dsrl``'s default base (the
    checkpoint holds the weights, these say which network they fit; ``dsrl_run`` checks the run's base equals it)."""
    default = DSRLPolicyConfig().base
    out = []
    for key, value in vars(config).items():
        if value == getattr(default, key):
            continue
        if isinstance(value, dict):  # a key the default's dict lacks is added (+), one override per key
            out += [f"+policy.base.{key}.{k}={v}" for k, v in value.items()]
        else:
            out.append(f"policy.base.{key}={json.dumps(value) if isinstance(value, list | str) else value}")
    return out


def run_folder(workdir: Path, seed: int) -> Path:
    """Where DSRL run ``seed`` of a benchmark run in ``workdir`` lives (its ``run_name`` is the folder's name)."""
    return workdir / "runs" / f"dsrl-{seed}"


def run_overrides(base: Path, task: PickCubeColorConfig, config: VLAPolicyConfig, seed: int,
                  args: argparse.Namespace, demos: Path | None = None) -> list[str]:
    """DSRL run ``seed``'s ``robolearn run`` overrides: the evaluation's task, VLA and chunk execution, the DSRL
    settings of ``args``, and with ``demos`` (a LeRobotDataset folder) those episodes as the buffer's demos, a
    ``args.demo_ratio`` share of every batch (RLPD; the critic and pi_W learn from them alike)."""
    chunking = [f"actor.chunking.{k}={getattr(EVAL_CHUNKING, k)}"
                for k in ("mode", "splice", "max_prefix", "execute_horizon")]
    overrides = [*task_overrides(task), "policy=dsrl", *base_overrides(config), f"policy.base_checkpoint='{base}'",
                 f"policy.noise_bound={args.noise_bound}", "algo=dsrl", f"algo.actor_warmup={args.actor_warmup}",
                 f"algo.actor_update_every={args.actor_update_every}",
                 f"algo.target_entropy_per_dim={args.target_entropy_per_dim}",
                 f"algo.init_temperature={args.init_temperature}", f"algo.noise_critic={args.noise_critic}",
                 f"policy.shared_noise={args.shared_noise}",
                 f"algo.critic_horizon={args.critic_horizon}",
                 f"learner.utd_ratio={args.utd}", "learner.threads=2", f"budget.env_steps={args.env_steps}",
                 f"budget.minutes={args.minutes}", f"seed={seed}", *chunking,
                 f"run_name={run_folder(Path(), seed).name}", "runtime.live_console=false"]
    if demos is not None:
        overrides += [f"learner.demos='{demos}'", f"algo.demo_ratio={args.demo_ratio}"]
    return overrides


def dsrl_run(workdir: Path, base: Path, task: PickCubeColorConfig, config: VLAPolicyConfig, seed: int,
             args: argparse.Namespace, demos: Path | None = None) -> tuple[Path, dict]:
    """One ``robolearn run`` of DSRL from ``base`` for ``args.env_steps`` env steps (``run_overrides``); its run
    folder and its summary.json. RuntimeError with the log's tail if it failed, stopped short of its env steps, or ran
    another task, base, chunk execution or demos than the evaluation's and ``demos``."""
    run = run_folder(workdir, seed)
    name = run.name
    overrides = run_overrides(base, task, config, seed, args, demos)
    log = workdir / f"{name}.log"
    print(f"robolearn run {' '.join(overrides)}  (log {log})", flush=True)
    with open(log, "w") as out:
        code = subprocess.run([str(ROBOLEARN), "run", *overrides], cwd=workdir, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"robolearn run {name} exited with {code}:\n{log.read_text()[-3000:]}")
    summary = json.loads((run / "summary.json").read_text())
    if not summary["ok"] or summary["env_steps"] < args.env_steps:
        raise RuntimeError(f"robolearn run {name} stopped short: {summary['stopped_because']}, {summary['env_steps']} "
                           f"of {args.env_steps} env steps (ok: {summary['ok']})")
    ran = load_run_config(run / "config.yaml")
    asked = (("task", ran.task == task), ("policy.base", ran.policy.base == config),
             ("actor.chunking", ran.actor.chunking == EVAL_CHUNKING),
             ("learner.demos", ran.learner.demos == (str(demos) if demos else "")))
    differs = [what for what, same in asked if not same]
    if differs:
        raise RuntimeError(f"robolearn run {name} ran another {', '.join(differs)} than the evaluation's")
    return run, summary


def critic_demos(workdir: Path, task: PickCubeColorConfig, episodes: int) -> Path:
    """``--critic-demos``: the scripted expert's ``episodes`` episodes of the run's task, recorded by the shipped
    ``robolearn record`` (seeds from vla.py's DEMO_SEED: the scenes BC's demos start from, without their bursts and
    decoys) into ``workdir``, or the folder an earlier run of this script recorded there (its episode count and the
    task settings it was recorded with, kept beside it, checked). RuntimeError with the log's tail if the recording
    failed."""
    folder = workdir / f"critic-demos-{episodes}{'' if task.shaped_reward else '-success-only'}"  # their rewards
    overrides = [*task_overrides(task), f"episodes={episodes}", f"seed={DEMO_SEED}"]
    recorded_with = folder.with_name(f"{folder.name}.json")  # beside it: the folder is a lerobot dataset
    if folder.exists():
        if not recorded_with.exists():
            raise RuntimeError(f"{folder}: the settings it was recorded with were not kept ({recorded_with} is "
                               "missing: recorded before they were, or interrupted): remove it or pass another "
                               "--workdir")
        recorded = json.loads(recorded_with.read_text())["overrides"]
        if recorded != overrides:
            raise RuntimeError(f"{folder} was recorded with other settings ({recorded_with}: {recorded}, now "
                               f"{overrides}): remove it or pass another --workdir")
        return folder
    log = workdir / "critic-demos.log"
    print(f"recording {episodes} expert episodes for the critic into {folder} (log {log})", flush=True)
    with open(log, "w") as out:
        code = subprocess.run([str(ROBOLEARN), "record", *overrides, f"out={folder}"], cwd=workdir, stdout=out,
                              stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"robolearn record exited with {code}:\n{log.read_text()[-3000:]}")
    recorded_with.write_text(json.dumps({"overrides": overrides}, indent=1))
    return folder


CONFIRM_SEED = 930_000  # --confirm's episodes: seeds nothing else has used


def trained_policy(run: Path, env: PickCubeEnv, start: dict[str, torch.Tensor]) -> tuple[DSRLPolicy, int, bool]:
    """A DSRL run's last checkpoint as its config builds it, the env steps it was saved at, and whether the VLA in it
    is bit-identical to ``start`` (the BC start's weights)."""
    dsrl = build_policy(load_run_config(run / "config.yaml"), env.observation_spec, env.action_spec)
    ckpt = load_checkpoint(run / "checkpoints" / "latest.pt")
    dsrl.load_state_dict(ckpt.policy_weights)
    frozen = dsrl.base.state_dict()
    return dsrl, ckpt.env_steps, all(torch.equal(frozen[k], v) for k, v in start.items())


def confirm(workdir: Path, env: PickCubeEnv, config: VLAPolicyConfig, settings: dict, command: str, first_seed: int,
            episodes: int, evaluate_on: Callable[[torch.nn.Module], dict]) -> Path:
    """``--confirm``: the committed figure's BC start and runs (in ``workdir``, where that figure's run left them)
    evaluated by ``evaluate_on`` (on ``episodes`` seeds from ``first_seed``), added to its results file as
    ``confirmation``. SystemExit, before anything is evaluated, when the figure already has a confirmation (one per
    figure: a second on other seeds would let one pick), when the seeds overlap the figure's, when ``workdir`` is not
    the figure's or its runs' summaries or BC start are not the ones the figure recorded, or when this command's VLA
    settings are not the figure's; and when a run's checkpoint is not at the figure's env steps or its VLA changed."""
    path = RESULTS / "vla_dsrl.json"
    result = json.loads(path.read_text())
    if "confirmation" in result:
        raise SystemExit(f"--confirm: {path} already has a confirmation (seeds {result['confirmation']['seeds']}); "
                         "there is one per figure")
    low, high = map(int, result["settings"]["eval_seeds"].split(".."))
    if first_seed <= high and low < first_seed + episodes:
        raise SystemExit(f"--confirm-seed {first_seed}: its {episodes} seeds overlap the figure's ({low}..{high})")
    if Path(result["settings"]["workdir"]).resolve() != workdir.resolve():
        raise SystemExit(f"--confirm {workdir}: {path}'s figure was measured in {result['settings']['workdir']}")
    for recorded in result["runs"]:
        summary = json.loads((run_folder(workdir, recorded["seed"]) / "summary.json").read_text())
        trained = {k: summary[k] for k in recorded["training"]}
        if trained != recorded["training"]:
            raise SystemExit(f"--confirm: run {recorded['seed']} in {workdir} is not the figure's (its summary says "
                             f"{trained}, the figure {recorded['training']})")
    if recorded_policy(result["settings"]["policy.base"]) != json.loads(json.dumps(vars(config))):
        raise SystemExit(f"--confirm: {path}'s VLA settings are not this command's; pass the options it ran with "
                         f"({result['command']})")
    policy, bc = load_policy(env, config, Path(result["bc_start"]["checkpoint"]), settings, "--confirm")
    if (bc["final_loss"], bc["commit"]) != (result["bc_start"]["final_loss"], result["bc_start"]["commit"]):
        raise SystemExit(f"--confirm: the BC start in {workdir} (loss {bc['final_loss']}, commit {bc['commit']}) is "
                         f"not the figure's ({result['bc_start']['final_loss']}, {result['bc_start']['commit']})")
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    starts, baseline = start_success(env, config, policy, start, evaluate_on)
    before = starts[f"noise scale {config.noise_scale}"]
    print("BC start: " + "; ".join(f"{k} {v['success']:.2f}" for k, v in starts.items()), flush=True)
    runs = []
    for recorded in result["runs"]:
        dsrl, env_steps, unchanged = trained_policy(run_folder(workdir, recorded["seed"]), env, start)
        if env_steps != recorded["checkpoint_env_steps"] or not unchanged:
            raise SystemExit(f"--confirm: run {recorded['seed']}'s checkpoint in {workdir} is not the one the figure "
                             f"evaluated (env steps {env_steps}, recorded {recorded['checkpoint_env_steps']}; VLA "
                             f"unchanged: {unchanged})")
        after = evaluate_on(dsrl)
        runs.append({"seed": recorded["seed"], "success": after["success"], "per_colour": after["per_colour"],
                     "gain": round(after["success"] - baseline, 4)})
        print(f"DSRL run {recorded['seed']}: success {after['success']:.2f} (gain {runs[-1]['gain']:+.2f})", flush=True)
    result["confirmation"] = {
        "command": command, "commit": COMMIT, "machine": machine(),
        "seeds": f"{first_seed}..{first_seed + episodes - 1}", "dsrl_success_gain":
        spread([r["gain"] for r in runs], 4), "gain_over": baseline,
        "bc_start": {k: before[k] for k in ("success", "per_colour", "episodes_per_colour")},
        **served(starts), "runs": runs}
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


class NoiseDraw:
    """An episode subscriber after the loop's ``SeedTorch``: seeds torch with the episode's seed plus ``draw`` *
    SPACING, so each draw of an episode samples other noise in the same scene (draw 0 is the evaluation's own seeding)
    and no draw reuses another episode's seed (the benchmarks' episode seeds are below SPACING). Torch's CPU generator
    keeps a seed's low 32 bits only, so the sum must stay below 2^32."""

    SPACING = 10_000_000

    def __init__(self) -> None:
        self.draw = 0

    def on_episode_start(self, episode_id: int, seed: int, obs: dict) -> None:  # noqa: ARG002
        if seed >= self.SPACING or seed + self.draw * self.SPACING >= 2**32:
            raise ValueError(f"NoiseDraw: episode seed {seed}, draw {self.draw} has no seed of its own (episode seeds "
                             f"below {self.SPACING}, draws below {2**32 // self.SPACING})")
        torch.manual_seed(seed + self.draw * self.SPACING)


def draw_outcomes(env: PickCubeEnv, policy: VLAPolicy | SharedNoise, draws: int, episodes: int,
                  first_seed: int) -> torch.Tensor:
    """``--pass-at``: success (draws, episodes) bool of ``policy`` sampling its noise, each of ``episodes`` episodes
    from ``first_seed`` played ``draws`` times, served as the evaluation serves it."""
    noise = NoiseDraw()
    loop = episode_loop(env, ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim), EXECUTE, (noise,))
    ok = torch.zeros(draws, episodes, dtype=torch.bool)
    t0 = time.perf_counter()
    for draw in range(draws):
        noise.draw = draw
        for ep in range(episodes):
            ok[draw, ep] = bool(loop.run(seed=first_seed + ep, episode_id=ep).success)
        print(f"  draw {draw}: success {ok[draw].float().mean():.2f}, pass@{draw + 1} "
              f"{ok[:draw + 1].any(0).float().mean():.2f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return ok


def pass_at(ok: torch.Tensor) -> dict:
    """The headroom noise steering has (``ok``: success (draws, episodes)): success per draw, pass@k for k = 1..draws
    (the share of episodes with a success in their first k draws), and how many episodes succeeded in every draw, in
    some, in none. An episode that succeeds in some draw is a scene from which the noise holds a way to succeed; a
    noise policy would have to find it from the state."""
    rate = ok.float().mean(0)
    return {"draws": ok.shape[0], "episodes": ok.shape[1],
            "success_per_draw": [round(float(r), 4) for r in ok.float().mean(1)],
            "pass_at": [round(float(ok[:k].any(0).float().mean()), 4) for k in range(1, ok.shape[0] + 1)],
            "episodes_always": int((rate == 1).sum()), "episodes_sometimes": int(((rate > 0) & (rate < 1)).sum()),
            "episodes_never": int((rate == 0).sum())}


class ServedFromNoise(torch.nn.Module):
    """``policy`` served (``predict_chunk``, as the runner calls it) from the noise ``draw`` gives each chunk instead
    of the noise it would draw itself."""

    def __init__(self, policy: VLAPolicy) -> None:
        super().__init__()
        self.policy = policy

    @property
    def horizon(self) -> int:
        """The policy's chunk length (the runner checks a request's prefix against it)."""
        return self.policy.horizon

    def draw(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The next chunk's noise of ``shape`` (B, H, A)."""
        raise NotImplementedError

    @torch.no_grad()
    def predict_chunk(self, observations: dict[str, np.ndarray], prefix: np.ndarray, prefix_len: np.ndarray,
                      explore: bool = False) -> np.ndarray:  # noqa: ARG002 (the noise is draw's)
        noise = self.draw((len(prefix_len), self.horizon, self.policy.action_dim))
        obs = self.policy.observation_tensors(observations)
        return self.policy.chunk_from_noise(obs, noise, torch.as_tensor(prefix, dtype=torch.float32),
                                            torch.as_tensor(prefix_len, dtype=torch.long)).numpy().astype(np.float32)


class SharedNoise(ServedFromNoise):
    """``policy`` served from one A-element noise ``scale`` x N(0, I) (torch's generator, which the loop seeds per
    episode) started at every one of the chunk's H positions: the kind of noise ``--shared-noise``'s noise policy
    chooses, sampled as the VLA samples its own."""

    def __init__(self, policy: VLAPolicy, scale: float) -> None:
        super().__init__(policy)
        self.scale = scale

    def draw(self, shape: tuple[int, ...]) -> torch.Tensor:
        batch, horizon, action_dim = shape
        device = next(self.policy.parameters()).device
        return (self.scale * torch.randn(batch, 1, action_dim, device=device)).repeat(1, horizon, 1)


class ReplayedNoise(ServedFromNoise):
    """``--noise-sensitivity``: ``policy`` served from noise it is handed. Recording, each chunk's noise is drawn as
    the policy draws it itself (``noise_scale`` x N(0, I) from torch's generator, which the loop seeds per episode,
    so an episode recorded from the evaluation's seeding is its draw 0) and kept in ``noises``; replaying, chunk j
    starts from sqrt(1 - s^2) ``noises[j]`` + s eps, eps ~ N(0, noise_scale^2 I) from this module's own generator:
    another draw of the same prior, correlated sqrt(1 - s^2) with the recorded one (s = 0: the recorded noise; s = 1:
    an independent draw)."""

    def __init__(self, policy: VLAPolicy, seed: int = 0) -> None:
        super().__init__(policy)
        self.noises: list[torch.Tensor] = []
        self.scale: float | None = None  # None: record
        self.generator = torch.Generator().manual_seed(seed)
        self._next = 0

    def record(self) -> None:
        self.noises, self.scale, self._next = [], None, 0

    def replay(self, scale: float) -> None:
        if not 0 <= scale <= 1:
            raise ValueError(f"ReplayedNoise: a replay's perturbation s must be in [0, 1], got {scale}")
        self.scale, self._next = scale, 0

    def draw(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The next chunk's noise of ``shape`` (B, H, A): drawn and kept (recording) or the kept one perturbed."""
        sigma = self.policy.config.noise_scale
        if self.scale is None:
            self.noises.append(sigma * torch.randn(shape))
            return self.noises[-1]
        if self._next >= len(self.noises):  # the replay outlasted the recording: fresh noise for the rest
            kept = sigma * torch.randn(shape, generator=self.generator)
        else:
            kept = self.noises[self._next]
        self._next += 1
        eps = sigma * torch.randn(shape, generator=self.generator)
        return math.sqrt(1 - self.scale ** 2) * kept + self.scale * eps


SENSITIVITY_SCALES = (0.0, 0.05, 0.15, 0.4, 1.0)  # s of --noise-sensitivity's replays


def noise_sensitivity(env: PickCubeEnv, policy: VLAPolicy, replays: int, episodes: int, first_seed: int) -> dict:
    """``--noise-sensitivity R``: each of ``episodes`` episodes from ``first_seed`` played once recording every
    chunk's noise (the evaluation's draw 0), then R times at each s of SENSITIVITY_SCALES (once at s = 0) from the
    recorded noise perturbed by s (``ReplayedNoise``). Per s, the replays' success around the recorded episodes that
    succeeded and around those that failed. Where an outcome changes smoothly with the noise it stays with the
    recorded one at small s; where it is chaotic in the noise, small s already gives each scene's own odds (those of
    s = 1). RuntimeError when an s = 0 replay does not repeat its recording (the replay would not be the same
    episode)."""
    served = ReplayedNoise(policy)
    loop = episode_loop(env, ChunkPolicyRunner(served, env.observation_spec, env.action_spec.dim), EXECUTE)
    rows, t0 = [], time.perf_counter()
    for ep in range(episodes):
        seed = first_seed + ep
        served.record()
        recorded = bool(loop.run(seed=seed, episode_id=ep).success)
        row = {"seed": seed, "success": recorded, "chunks": len(served.noises), "replays": {}}
        for scale in SENSITIVITY_SCALES:
            outcomes = []
            for _ in range(replays if scale else 1):
                served.replay(scale)
                outcomes.append(bool(loop.run(seed=seed, episode_id=ep).success))
            row["replays"][str(scale)] = outcomes
        if row["replays"]["0.0"] != [recorded]:
            raise RuntimeError(f"episode {seed}: replaying its recorded noise (s = 0) did not repeat its outcome "
                               f"({recorded}): the episode is not deterministic given its noise")
        rows.append(row)
        print(f"  episode {seed}: {'success' if recorded else 'failure'}, replays {row['replays']} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"replays_per_scale": replays, "episodes": episodes,
            "recorded_success": round(sum(r["success"] for r in rows) / episodes, 4),
            "by_scale": sensitivity_by_scale(rows), "per_episode": rows}


def sensitivity_by_scale(rows: list[dict]) -> dict[str, dict]:
    """``noise_sensitivity``'s replays pooled per s: their success around recorded successes and around recorded
    failures, with how many replays each."""
    out = {}
    for scale in rows[0]["replays"]:
        pooled = {}
        for name, kept in (("around_success", True), ("around_failure", False)):
            outcomes = [o for r in rows if r["success"] == kept for o in r["replays"][scale]]
            pooled[name] = round(sum(outcomes) / len(outcomes), 4) if outcomes else None
            pooled[f"{name}_replays"] = len(outcomes)
        out[f"s={scale}"] = pooled
    return out


BASELINE_NOISE_SCALES = (1.0, 0.5)  # the BC start is sampled at each (and its own) for the gain's baseline: 0.5 gave
                                    # the e7ae670 figure's start 0.52 against 0.45 at 1 (BENCHMARKS.md, vla_dsrl)


def start_success(env: PickCubeEnv, config: VLAPolicyConfig, policy: VLAPolicy, start: dict[str, torch.Tensor],
                  evaluate_on: Callable[[torch.nn.Module], dict]) -> tuple[dict[str, dict], float]:
    """The BC start's success by ``evaluate_on``, at each noise scale s of BASELINE_NOISE_SCALES and its own sampling
    a noise per action as the VLA does ("noise scale <s>") and one noise for the whole chunk ("shared noise scale
    <s>", ``SharedNoise``: what ``--shared-noise`` steers), and from zero noise ("zero noise"), and the best of them:
    the baseline the gain is measured over, so that no way of serving the start without DSRL does better than what
    the gain starts from (either kind of noise, whichever the runs steer)."""
    out = {}
    for scale in sorted({*BASELINE_NOISE_SCALES, config.noise_scale}, reverse=True):
        with sampling_at(policy, scale):
            out[f"noise scale {scale}"] = evaluate_on(policy)
        out[f"shared noise scale {scale}"] = evaluate_on(SharedNoise(policy, scale))
    out["zero noise"] = evaluate_on(zero_noise(env, config, start))
    return out, max(r["success"] for r in out.values())


def served(starts: dict[str, dict]) -> dict[str, dict]:
    """``start_success``'s evaluations as the results keep them (the success and the success per colour): all of
    them as ``bc_start_served``, and the zero-noise one again as ``bc_start_zero_noise`` (where older results had
    it)."""
    kept = {k: {"success": v["success"], "per_colour": v["per_colour"]} for k, v in starts.items()}
    return {"bc_start_zero_noise": kept["zero noise"], "bc_start_served": kept}


def zero_noise(env: PickCubeEnv, config: VLAPolicyConfig, weights: dict[str, torch.Tensor]) -> DSRLPolicy:
    """The BC start served through DSRL with the noise policy's mean held at 0: the flow from zero noise, the start
    a DSRL run's deterministic evaluation sits near before it learns (the VLA itself samples its noise)."""
    policy = DSRLPolicy(env.observation_spec, env.action_spec, DSRLPolicyConfig(base=config))
    policy.load_base(weights)
    with torch.no_grad():
        policy.noise_actor.gaussian.weight.zero_()
        policy.noise_actor.gaussian.bias.zero_()
    return policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="DSRL runs (seeds 0..runs-1) from the one BC start")
    ap.add_argument("--env-steps", type=int, default=24000, help="each DSRL run's budget of env steps")
    ap.add_argument("--utd", type=float, default=0.25, help="learner updates per env step")
    ap.add_argument("--noise-bound", type=float, default=1.0, help="policy.noise_bound: the noise's range")
    ap.add_argument("--actor-warmup", type=int, default=400, help="algo.actor_warmup: critic-only updates first")
    ap.add_argument("--actor-update-every", type=int, default=1, help="algo.actor_update_every: pi_W (and the "
                    "temperature) step once every this many critic updates (with --utd, more critic updates per env "
                    "step for the same noise-policy steps)")
    ap.add_argument("--target-entropy-per-dim", type=float, default=-0.5,
                    help="algo.target_entropy_per_dim: the noise policy's target entropy per noise element")
    ap.add_argument("--init-temperature", type=float, default=0.1,
                    help="algo.init_temperature: SAC's entropy weight alpha at the start")
    ap.add_argument("--noise-critic", action="store_true",
                    help="algo.noise_critic: the noise policy learns from a distilled noise critic (DSRL-NA)")
    ap.add_argument("--shared-noise", action=argparse.BooleanOptionalAction, default=True,
                    help="policy.shared_noise: one noise of the action's size for the whole chunk (the start is also "
                    "served sampling such noise; --pass-at draws it)")
    ap.add_argument("--critic-horizon", type=int, default=EXECUTE,
                    help="algo.critic_horizon: the actions of each chunk the critic scores (default: the executed "
                    f"ones, {EXECUTE}; 0: the whole chunk of {H}, as before 2026-12-06)")
    ap.add_argument("--critic-demos", type=int, default=0, help="scripted-expert episodes (robolearn record, "
                    "seeds from DEMO_SEED) in every run's buffer as demos, a --demo-ratio share of each batch (RLPD)")
    ap.add_argument("--demo-ratio", type=float, default=0.5, help="algo.demo_ratio with --critic-demos")
    ap.add_argument("--success-reward-only", action="store_true", help="task.shaped_reward=false in the runs: "
                    "the success bonus alone, as a real robot's labels give it (the evaluation counts success either "
                    "way)")
    ap.add_argument("--minutes", type=float, default=60.0, help="each run's time cap (it should end on env steps)")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--base-seed", type=int, default=0, help="which of bench-vla's policies is the BC start")
    ap.add_argument("--base", type=Path, default=None, help="the BC start's checkpoint, saved by bench-vla "
                    "(its workdir's policy-0/checkpoints/latest.pt) or an earlier run, with its bc.json")
    ap.add_argument("--demos", type=int, default=DEMOS)
    ap.add_argument("--bc-steps", type=int, default=BC_STEPS)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--camera-strides", type=int, nargs="+", default=CAMERA_STRIDES,
                    help="policy.camera_strides of the BC start (bench-vla's by default)")
    ap.add_argument("--wrist-shift-pad", type=int, default=WRIST_SHIFT_PAD,
                    help="policy.camera_shift_pads.wrist of the BC start (bench-vla's by default)")
    ap.add_argument("--camera-features", type=int, default=CAMERA_FEATURES,
                    help="policy.camera_features of the BC start (bench-vla's by default; 64 before 2026-12-06)")
    ap.add_argument("--fuse-dims", type=int, nargs="+", default=FUSE_DIMS,
                    help="policy.fuse_dims of the BC start (bench-vla's by default; 256 before 2026-12-06)")
    ap.add_argument("--noise-scale", type=float, default=NOISE_SCALE,
                    help="policy.noise_scale: the BC start's sampling noise, where the gain is measured from "
                    "(bench-vla's by default); DSRL's runs choose their own noise")
    ap.add_argument("--eval-seed", type=int, default=EVAL_SEED, help="first evaluation seed (development: 50000; "
                    "the results file then goes to a work folder, not benchmarks/results)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the runs go (default: a new temporary folder)")
    ap.add_argument("--confirm", type=Path, default=None, help="the committed figure's work folder: evaluate its "
                    "policies on --confirm-seed's episodes and add them to its results file (no runs)")
    ap.add_argument("--pass-at", type=int, default=0, metavar="K", help="only the BC start's headroom (with --base): "
                    "each of --episodes episodes from --eval-seed played K times sampling other noise; pass@k into "
                    "<workdir>/pass_at.json, no DSRL runs")
    ap.add_argument("--noise-sensitivity", type=int, default=0, metavar="R", help="only whether the BC start's "
                    "outcomes follow its noise smoothly (with --base): each of --episodes episodes from --eval-seed "
                    "recorded, then replayed R times from its noise perturbed by each s of SENSITIVITY_SCALES; "
                    "into <workdir>/noise_sensitivity.json, no DSRL runs")
    ap.add_argument("--confirm-seed", type=int, default=CONFIRM_SEED, help="--confirm's first episode seed")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if args.actor_update_every < 1:  # algo.actor_update_every's own check, before the start's servings, not after
        ap.error(f"--actor-update-every must be >= 1, got {args.actor_update_every}")
    if args.critic_demos < 0 or not 0 < args.demo_ratio < 1:
        ap.error(f"--critic-demos must be >= 0 and --demo-ratio in (0, 1), got {args.critic_demos}, "
                 f"{args.demo_ratio}")
    if args.runs < 3 and args.eval_seed == EVAL_SEED:
        ap.error("--runs must be >= 3 for the figure (a median over runs)")
    if args.pass_at < 0 or (args.pass_at and (args.base is None or args.confirm)):
        ap.error("--pass-at K (K >= 1) evaluates a saved BC start: it needs --base and takes no --confirm")
    if args.noise_sensitivity < 0 or (args.noise_sensitivity and (args.base is None or args.confirm or args.pass_at)):
        ap.error("--noise-sensitivity R (R >= 1) evaluates a saved BC start: it needs --base and takes no --confirm "
                 "or --pass-at")
    if args.confirm and (args.workdir or args.base):
        ap.error("--confirm evaluates the figure's own BC start and runs: no --workdir or --base with it")
    command = run_command(ap, args, "bench-vla-dsrl", "vla_dsrl.py")
    register_builtins()
    torch.set_num_threads(2)
    config = policy_config(camera_strides=args.camera_strides, wrist_shift_pad=args.wrist_shift_pad,
                           camera_features=args.camera_features, fuse_dims=args.fuse_dims,
                           noise_scale=args.noise_scale)
    task = replace(task_config(instructions(), scene_state=False), shaped_reward=not args.success_reward_only)
    env = PickCubeEnv(task)
    t0 = time.perf_counter()
    def held_out(policy: torch.nn.Module, first_seed: int = args.eval_seed) -> dict:
        """``policy``'s success on ``args.episodes`` seeds from ``first_seed``, the held-out ones by default (vla.py's
        evaluation)."""
        return evaluate(env, ChunkPolicyRunner(policy, env.observation_spec, env.action_spec.dim), args.episodes,
                        first_seed)

    base = args.base
    settings = bc_settings(config, args.base_seed, args.demos, PERTURB, args.bc_steps, args.batch_size)
    if args.confirm:
        path = confirm(args.confirm, env, config, settings, command, args.confirm_seed, args.episodes,
                       lambda p: held_out(p, args.confirm_seed))
        env.close()
        print(f"confirmation on {args.episodes} seeds from {args.confirm_seed} -> {path}")
        return
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-vla-dsrl-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {workdir} (the BC start, each run, progress.json)", flush=True)
    if args.pass_at or args.noise_sensitivity:
        policy, _ = load_policy(env, config, base, settings, "--base")
        if args.pass_at:
            drawn = SharedNoise(policy, config.noise_scale) if args.shared_noise else policy
            name, measured = "pass_at", {"shared_noise": args.shared_noise,
                                         **pass_at(draw_outcomes(env, drawn, args.pass_at, args.episodes,
                                                                 args.eval_seed))}
        else:
            name, measured = "noise_sensitivity", {
                "scales": list(SENSITIVITY_SCALES),
                **noise_sensitivity(env, policy, args.noise_sensitivity, args.episodes, args.eval_seed)}
        env.close()
        path = workdir / f"{name}.json"
        path.write_text(json.dumps({"command": command, "commit": COMMIT, "checkpoint": str(base),
                                    "noise_scale": config.noise_scale,
                                    "seeds": f"{args.eval_seed}..{args.eval_seed + args.episodes - 1}", **measured},
                                   indent=1) + "\n")
        shown = (f"pass@k {measured['pass_at']}" if args.pass_at
                 else f"noise sensitivity {json.dumps(measured['by_scale'])}")
        print(f"BC start's {shown} -> {path}")
        return
    demos = critic_demos(workdir, task, args.critic_demos).resolve() if args.critic_demos else None
    if base is None:
        data = record_demos(env, args.demos, PERTURB)
        policy, bc_record = behaviour_clone(env, data, config, args.base_seed, args.bc_steps, args.batch_size)
        del data
        base, bc_record = save_policy(workdir / "bc", policy, settings, bc_record)
        print(f"BC start saved to {base} (loss {bc_record['final_loss']}, {bc_record['seconds']:.0f} s)", flush=True)
    else:
        policy, bc_record = load_policy(env, config, base, settings, "--base")
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    starts, baseline = start_success(env, config, policy, start, held_out)  # the gain is over the best of them
    before, zero = starts[f"noise scale {config.noise_scale}"], starts["zero noise"]
    print("BC start: " + "; ".join(f"{k} {v['success']:.2f} {v['per_colour']}" for k, v in starts.items()), flush=True)

    runs = []
    for seed in range(args.runs):
        t1 = time.perf_counter()
        run, summary = dsrl_run(workdir, base.resolve(), task, config, seed, args, demos)
        trained = {k: summary[k] for k in ("env_steps", "episodes", "success_rate_last_50", "updates",
                                           "wall_minutes")}
        dsrl, env_steps, unchanged = trained_policy(run, env, start)
        after = held_out(dsrl)
        runs.append({"seed": seed, "success": after["success"], "per_colour": after["per_colour"],
                     "gain": round(after["success"] - baseline, 4), "checkpoint_env_steps": env_steps,
                     "training": trained, "vla_unchanged": unchanged,
                     "minutes": round((time.perf_counter() - t1) / 60, 1)})
        print(f"DSRL run {seed}: success {after['success']:.2f} {after['per_colour']} (gain {runs[-1]['gain']:+.2f}; "
              f"{trained}; VLA unchanged: {unchanged}; {runs[-1]['minutes']} min)", flush=True)
        # kept as each run ends: a later run that fails leaves the earlier ones' figures (not a result: fewer runs)
        (workdir / "progress.json").write_text(json.dumps({"command": command, "bc_start": before,
                                                           "bc_start_zero_noise": zero, "runs": runs}, indent=1))
        if not unchanged:
            raise RuntimeError(f"DSRL run {seed} changed the VLA's weights")
    env.close()

    gain = spread([r["gain"] for r in runs], 4)
    path = write_result("vla_dsrl", command, folder=results_folder(args.eval_seed, workdir),
                        goals=[goal("dsrl_success_gain", gain["median"], ">=", 0.15)],
                        task="pick_cube_color (language, scene from cameras)", dsrl_success_gain=gain,
                        bc_start={"success": before["success"], "per_colour": before["per_colour"],
                                  "episodes_per_colour": before["episodes_per_colour"], **bc_record},
                        **served(starts),
                        gain_over=f"the best of the BC start served as in bc_start_served: {baseline}",
                        runs=runs, minutes=round((time.perf_counter() - t0) / 60, 1),
                        settings={"policy.base": vars(config), "env_steps_per_run": args.env_steps,
                                  "utd_ratio": args.utd, "noise_bound": args.noise_bound,
                                  "critic_horizon": args.critic_horizon,
                                  "target_entropy_per_dim": args.target_entropy_per_dim,
                                  "init_temperature": args.init_temperature, "noise_critic": args.noise_critic,
                                  "shared_noise": args.shared_noise,
                                  "actor_warmup": args.actor_warmup, "actor_update_every": args.actor_update_every,
                                  "learner_threads": 2,
                                  "critic_demos": args.critic_demos, "shaped_reward": task.shaped_reward,
                                  "demo_ratio": args.demo_ratio if args.critic_demos else 0.0,
                                  "execute_horizon": EXECUTE,
                                  "demos": args.demos, "bc_steps": args.bc_steps, "base_seed": args.base_seed,
                                  "eval_seeds": f"{args.eval_seed}..{args.eval_seed + args.episodes - 1}",
                                  "workdir": str(workdir)})
    print(f"\ndsrl_success_gain {gain} -> {path}")


if __name__ == "__main__":
    main()
