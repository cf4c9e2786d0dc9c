"""robolearn's persistent replay buffer vs lerobot's ``lerobot.rl.buffer.ReplayBuffer``, same data, one run.

    make bench-buffer        (python benchmarks/buffer.py [--quick])

Measured side by side, interleaved (lerobot, robolearn, lerobot, ...), medians of the repeats:
- append throughput, transitions/s: state only (reach sizes, 18-d state, 6-d action) and with two
  96x96 RGB cameras (frames rendered by the MuJoCo reach scene). robolearn appends with durability
  on (every batch written to its segment file, batched fsync) in the batches its learner receives
  (``actor.send_every`` = 10 steps), alternating blocks with lerobot; the batch-of-1 figure is
  reported too. lerobot's ``add`` is per transition, in memory, for both its first fill and an
  overwrite pass (the better is compared).
- sample throughput, batches/s of 256, alternating call by call: robolearn's uniform sampler (images
  decompressed to uint8)
  vs lerobot's ``sample`` without its DrQ augmentation (the faster setting); robolearn's H = 10
  windows are reported against the same lerobot figure (lerobot has no windows).
- resident memory per image transition: RSS growth of a fresh process after adding the image
  transitions, each buffer in its own subprocess.
Goals: ``append_ratio_vs_lerobot`` >= 1 and ``sample_ratio_vs_lerobot`` >= 1 (the worse of the
state-only and image cases), ``image_memory_ratio_vs_lerobot`` <= 0.25.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

STATE, ACTION, CAM = 18, 6, (96, 96, 3)
CAMS = ("front", "wrist")


# ---------------------------------------------------------------------------------------------
# data
def render_frames(n: int, seed: int) -> np.ndarray:
    """n distinct 96x96 frames of the reach scene (random arm poses and targets)."""
    from robolearn.sim.reach import ReachEnv

    env = ReachEnv()
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(n):
        env.reset(seed=seed * 1000 + i)
        for _ in range(int(rng.integers(1, 6))):
            env.step(rng.uniform(-6, 6, 6).astype(np.float32))
        frames.append(env.render().copy())
    env.close()
    return np.stack(frames)


def make_specs(images: bool):
    from robolearn.specs import ActionSpec, ArraySpec, ObservationSpec

    arrays = {"state": ArraySpec((STATE,), low=(-1e3,) * STATE, high=(1e3,) * STATE)}
    if images:
        arrays.update({c: ArraySpec(CAM, dtype="uint8") for c in CAMS})
    return ObservationSpec(arrays), ActionSpec(ArraySpec((ACTION,), low=(-1.0,) * ACTION, high=(1.0,) * ACTION))


def episode_batches(n: int, batch: int, frames: dict | None, seed: int = 0) -> list[dict]:
    """n transitions as robolearn wire batches (100-step episodes, ``batch`` steps per message)."""
    from robolearn.transition import SCALAR_FIELDS

    rng = np.random.default_rng(seed)
    out, t = [], 0
    while t < n:
        ep, start = t // 100, t % 100
        k = min(batch, 100 - start, n - t)
        d = {name: np.zeros(k, dtype) for name, dtype in SCALAR_FIELDS.items()}
        d["episode_id"][:] = ep
        d["step"][:] = np.arange(start, start + k)
        d["reward"][:] = rng.normal(size=k)
        d["action"] = rng.uniform(-1, 1, (k, ACTION)).astype(np.float32)
        d["obs.state"] = rng.normal(size=(k, STATE)).astype(np.float32)
        if frames:
            for c in CAMS:
                d[f"obs.{c}"] = frames[c][(t + np.arange(k)) % len(frames[c])]
        if start + k == 100 or t + k == n:
            d["truncated"][-1] = True
            d["final_obs.state"] = rng.normal(size=STATE).astype(np.float32)
            if frames:
                for c in CAMS:
                    d[f"final_obs.{c}"] = frames[c][(t + k) % len(frames[c])]
        out.append(d)
        t += k
    return out


def lerobot_transitions(n: int, frames: dict | None, seed: int = 0) -> list[dict]:
    import torch

    rng = np.random.default_rng(seed)
    out = []
    float_frames = {c: torch.from_numpy(frames[c]).permute(0, 3, 1, 2).float().div(255) for c in CAMS} if frames else {}
    for t in range(n):
        state = {"observation.state": torch.from_numpy(rng.normal(size=(1, STATE)).astype(np.float32))}
        for c in CAMS if frames else ():
            state[f"observation.images.{c}"] = float_frames[c][t % len(float_frames[c])].unsqueeze(0)
        out.append({"state": state, "action": torch.from_numpy(rng.uniform(-1, 1, (1, ACTION)).astype(np.float32)),
                    "reward": float(rng.normal()), "next_state": state, "done": False, "truncated": t % 100 == 99})
    return out


# ---------------------------------------------------------------------------------------------
# the two buffers
def new_lerobot(capacity: int, images: bool):
    from lerobot.rl.buffer import ReplayBuffer as LeRobotReplayBuffer

    keys = ["observation.state", *([f"observation.images.{c}" for c in CAMS] if images else [])]
    return LeRobotReplayBuffer(capacity, device="cpu", storage_device="cpu", state_keys=keys, use_drq=False,
                               optimize_memory=True)


def new_robolearn(directory: Path, capacity: int, images: bool):
    from robolearn.buffer.replay_buffer import ReplayBuffer

    obs, act = make_specs(images)
    return ReplayBuffer(directory, obs, act, capacity=capacity, fsync="batched")


def time_append_interleaved(lerobot_data: list[dict], robolearn_batches: list[dict], images: bool,
                            blocks: int = 10) -> dict[str, float]:
    """Transitions/s into each buffer, feeding them alternately in ``blocks`` chunks so that machine drift
    hits both alike. lerobot: the first fill, then an overwrite pass (same capacity); robolearn: durable
    appends, flushed to the OS and fsynced (batched) before its clock stops."""
    lr = new_lerobot(len(lerobot_data), images)
    n_rl = sum(len(b["action"]) for b in robolearn_batches)
    spent = {"lerobot_first_fill": 0.0, "lerobot_overwrite": 0.0, "robolearn": 0.0}
    with tempfile.TemporaryDirectory() as d:
        rl = new_robolearn(Path(d), 2 * n_rl, images)
        lr_chunks = np.array_split(np.arange(len(lerobot_data)), blocks)
        rl_chunks = np.array_split(np.arange(len(robolearn_batches)), blocks)
        for phase in ("lerobot_first_fill", "lerobot_overwrite"):
            for k in range(blocks):
                t0 = time.perf_counter()
                for i in lr_chunks[k]:
                    lr.add(**lerobot_data[i])
                spent[phase] += time.perf_counter() - t0
                if phase == "lerobot_first_fill":
                    t0 = time.perf_counter()
                    for i in rl_chunks[k]:
                        rl.add("robot-0", robolearn_batches[i])
                    rl.flush()
                    spent["robolearn"] += time.perf_counter() - t0
        rl.close()
    return {"lerobot_first_fill": len(lerobot_data) / spent["lerobot_first_fill"],
            "lerobot_overwrite": len(lerobot_data) / spent["lerobot_overwrite"],
            "robolearn": n_rl / spent["robolearn"]}


def time_robolearn_append(batches: list[dict], images: bool) -> float:
    with tempfile.TemporaryDirectory() as d:
        buf = new_robolearn(Path(d), 2 * sum(len(b["action"]) for b in batches), images)
        n = sum(len(b["action"]) for b in batches)
        t0 = time.perf_counter()
        for b in batches:
            buf.add("robot-0", b)
        buf.flush()  # durable before the clock stops
        rate = n / (time.perf_counter() - t0)
        buf.close()
    return rate


def time_sampling_interleaved(calls: dict, n_batches: int) -> dict[str, float]:
    """Batches/s of each call, alternating call by call so that machine drift hits all of them alike."""
    spent = dict.fromkeys(calls, 0.0)
    for call in calls.values():
        call()  # warm-up
    for _ in range(n_batches):
        for name, call in calls.items():
            t0 = time.perf_counter()
            call()
            spent[name] += time.perf_counter() - t0
    return {name: n_batches / t for name, t in spent.items()}


# ---------------------------------------------------------------------------------------------
def rss_child(which: str, n: int) -> None:
    """Run in a fresh subprocess: print RSS growth (bytes) per image transition after adding n."""
    import gc

    import psutil
    from lerobot.rl.buffer import ReplayBuffer as _LeRobotReplayBuffer  # noqa: F401  (imports before measuring)

    from robolearn.buffer.replay_buffer import ReplayBuffer as _ReplayBuffer  # noqa: F401

    frames = {c: np.load(os.environ["ROBOLEARN_BENCH_FRAMES"])[c] for c in CAMS}
    if which == "lerobot":
        data = lerobot_transitions(n, frames)
        gc.collect()
        before = psutil.Process().memory_info().rss
        buf = new_lerobot(n, True)
        for tr in data:
            buf.add(**tr)
    else:
        data = episode_batches(n, 10, frames)
        tmp = tempfile.mkdtemp()
        gc.collect()
        before = psutil.Process().memory_info().rss
        buf = new_robolearn(Path(tmp), n, True)
        for b in data:
            buf.add("robot-0", b)
    after = psutil.Process().memory_info().rss
    print(json.dumps({"bytes_per_transition": (after - before) / n}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer transitions and repeats (a smoke run)")
    ap.add_argument("--rss-child", nargs=2, metavar=("WHICH", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child[0], int(args.rss_child[1]))
        return
    import torch

    torch.set_num_threads(1)
    n_state, n_img, reps, n_sample = (4000, 1000, 1, 20) if args.quick else (20000, 4000, 3, 100)
    print(f"rendering {2 * 64} sim frames ...", flush=True)
    frames = {"front": render_frames(64, 0), "wrist": render_frames(64, 1)}

    append = {}
    for case, images, n in (("state", False, n_state), ("images", True, n_img)):
        data = frames if images else None
        runs, batch_of_1 = [], []
        for rep in range(reps):
            print(f"append {case}, repeat {rep + 1}/{reps} ...", flush=True)
            runs.append(time_append_interleaved(lerobot_transitions(n, data), episode_batches(n, 10, data), images))
            batch_of_1.append(time_robolearn_append(episode_batches(n // 4, 1, data), images))
        append[case] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        append[case]["lerobot"] = max(append[case]["lerobot_first_fill"], append[case]["lerobot_overwrite"])
        append[case]["robolearn_batch_of_1"] = statistics.median(batch_of_1)

    print("sampling ...", flush=True)
    sample = {}
    with tempfile.TemporaryDirectory() as d:
        for case, images, n in (("state", False, n_state), ("images", True, n_img)):
            lr = new_lerobot(n, images)
            for tr in lerobot_transitions(n, frames if images else None):
                lr.add(**tr)
            rl = new_robolearn(Path(d) / case, n, images)
            for b in episode_batches(n, 10, frames if images else None):
                rl.add("robot-0", b)
            calls = {"lerobot": lambda lr=lr: lr.sample(256),
                     "robolearn": lambda rl=rl: rl.sample(256, gamma=0.99),
                     "robolearn_h10_windows": lambda rl=rl: rl.sample(256, horizon=10, gamma=0.99)}
            runs = [time_sampling_interleaved(calls, n_sample) for _ in range(reps)]
            sample[case] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            rl.close()

    print("resident memory ...", flush=True)
    with tempfile.TemporaryDirectory() as d:
        frames_path = Path(d) / "frames.npz"
        np.savez(frames_path, **frames)
        env = {**os.environ, "ROBOLEARN_BENCH_FRAMES": str(frames_path)}
        mem = {}
        for which in ("lerobot", "robolearn"):
            out = subprocess.run([sys.executable, __file__, "--rss-child", which, str(n_img)], env=env,
                                 capture_output=True, text=True, check=True).stdout
            mem[which] = json.loads(out.strip().splitlines()[-1])["bytes_per_transition"]

    append_ratio = min(append[c]["robolearn"] / append[c]["lerobot"] for c in append)
    sample_ratio = min(sample[c]["robolearn"] / sample[c]["lerobot"] for c in sample)
    memory_ratio = mem["robolearn"] / mem["lerobot"]

    print(f"\n{'':34}{'lerobot':>12}{'robolearn':>12}{'ratio':>8}")
    for case in ("state", "images"):
        a = append[case]
        print(f"{'append/s, ' + case:34}{a['lerobot']:12.0f}{a['robolearn']:12.0f}{a['robolearn'] / a['lerobot']:8.2f}")
        print(f"{'  (robolearn batch of 1)':34}{'':12}{a['robolearn_batch_of_1']:12.0f}"
              f"{a['robolearn_batch_of_1'] / a['lerobot']:8.2f}")
    for case in ("state", "images"):
        s = sample[case]
        print(f"{'sample B=256 /s, ' + case:34}{s['lerobot']:12.1f}{s['robolearn']:12.1f}"
              f"{s['robolearn'] / s['lerobot']:8.2f}")
        print(f"{'  (robolearn H=10 windows)':34}{'':12}{s['robolearn_h10_windows']:12.1f}"
              f"{s['robolearn_h10_windows'] / s['lerobot']:8.2f}")
    print(f"{'KB per image transition':34}{mem['lerobot'] / 1024:12.1f}{mem['robolearn'] / 1024:12.1f}"
          f"{memory_ratio:8.3f}")

    command = run_command(ap, args, "bench-buffer", "buffer.py")
    path = write_result(
        "buffer", command,
        [goal("append_ratio_vs_lerobot", round(append_ratio, 3), ">=", 1),
         goal("sample_ratio_vs_lerobot", round(sample_ratio, 3), ">=", 1),
         goal("image_memory_ratio_vs_lerobot", round(memory_ratio, 4), "<=", 0.25)],
        append_per_s=append, sample_batches_per_s=sample, bytes_per_image_transition=mem,
        sizes={"state_transitions": n_state, "image_transitions": n_img, "repeats": reps, "batch": 256},
        note="robolearn appends durably (segment files, batched fsync) in the 10-step batches its learner "
             "receives; lerobot's best of first fill and overwrite; lerobot sampled without DrQ; images are "
             "rendered MuJoCo reach frames, lz4-compressed by robolearn (uint8), float32 in lerobot")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
