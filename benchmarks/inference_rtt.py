"""Round-trip time of one chunk request: robolearn's policy server vs lerobot's async-inference server.

    make bench-inference-rtt        (python benchmarks/inference_rtt.py [--rounds 6 --per-round 30])

Both serve the same tiny ACT policy (dim 64, one encoder and one decoder layer, chunk 10; lerobot builds
a randomly initialised resnet18 backbone when pretrained_backbone_weights is None: 11.3M parameters)
saved once with ``save_pretrained`` + its processors, to the same observation (6-d state + one
96x96 RGB camera), each server in its own process:

    robolearn   PolicyServer (zmq ROUTER, msgpack header + raw arrays) with policies.lerobot_policy,
                client: inference.client.RemoteClient (DEALER)
    lerobot     python -m lerobot.async_inference.policy_server --inference_latency=0 (its minimum-latency
                sleep off), client: lerobot's own gRPC stubs (SendObservations then GetActions, pickle on
                its wire) run in a separate process, so only lerobot's code unpickles what its server sends

Serving-path differences, both part of what is measured: robolearn sends raw arrays (no pickle, no
chunked byte stream) and runs the model on the server's main thread with pinned torch threads in
channels-last memory format (oneDNN's preferred layout for the resnet18 convolutions: ~17 ms instead
of ~29 ms per forward pass here); lerobot runs it in a gRPC worker thread in the default layout.

RTT = request sent -> chunk received and decoded. Rounds alternate (robolearn, lerobot, ...) to
spread machine drift over both; medians and p99 over all timed requests, first 5 of each round
are warm-up. Goal ``rtt_ratio_vs_lerobot`` = robolearn median / lerobot median <= 0.5.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import goal, run_command, write_result  # noqa: E402

H, STATE, IMAGE = 10, 6, (96, 96, 3)
JOINTS = [f"joint_{i}.pos" for i in range(STATE)]
WARMUP = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_act(folder: Path) -> None:
    """The ACT policy both servers load (random weights, dummy normalisation statistics)."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    cfg = ACTConfig(
        input_features={"observation.state": PolicyFeature(FeatureType.STATE, (STATE,)),
                        "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, IMAGE[0], IMAGE[1]))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (STATE,))},
        chunk_size=H, n_action_steps=H, dim_model=64, n_heads=2, dim_feedforward=128, n_encoder_layers=1,
        n_decoder_layers=1, latent_dim=8, n_vae_encoder_layers=1, pretrained_backbone_weights=None, device="cpu")
    policy = ACTPolicy(cfg)
    stats = {"observation.state": {"mean": torch.zeros(STATE), "std": torch.ones(STATE),
                                   "min": -torch.ones(STATE), "max": torch.ones(STATE)},
             "action": {"mean": torch.zeros(STATE), "std": torch.ones(STATE) * 10,
                        "min": -torch.ones(STATE) * 30, "max": torch.ones(STATE) * 30},
             "observation.images.front": {"mean": torch.full((3, 1, 1), 0.45), "std": torch.full((3, 1, 1), 0.25),
                                          "min": torch.zeros((3, 1, 1)), "max": torch.ones((3, 1, 1))}}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    policy.save_pretrained(folder)
    pre.save_pretrained(folder)
    post.save_pretrained(folder)


def observation(i: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(i)
    return rng.uniform(-30, 30, STATE).astype(np.float32), rng.integers(0, 256, IMAGE, dtype=np.uint8)


def action_spec():
    from robolearn.specs import ActionSpec, ArraySpec

    return ActionSpec(ArraySpec((STATE,), low=(-30.0,) * STATE, high=(30.0,) * STATE))


# --- subprocess roles ---------------------------------------------------------------------------------

def serve_robolearn(folder: str, endpoint_file: str) -> None:
    import torch

    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.inference.server import PolicyServer
    from robolearn.policies.lerobot_policy import LerobotChunkPolicy

    torch.set_num_threads(os.cpu_count() or 1)
    policy = LerobotChunkPolicy(folder, action_spec())
    server = PolicyServer(ChunkPolicyRunner(policy, policy.observation_spec, STATE))
    Path(endpoint_file).write_text(json.dumps({"endpoint": server.endpoint}))
    while True:
        server.serve_once(100)


def lerobot_client(port: int, folder: str, count: int) -> None:
    """lerobot's client path: its stubs, its pickled TimedObservation, its chunked byte stream."""
    import pickle  # lerobot's wire format; confined to this measuring process

    import grpc
    from lerobot.async_inference.helpers import RemotePolicyConfig, TimedObservation
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks
    from lerobot.utils.feature_utils import hw_to_dataset_features

    features = hw_to_dataset_features({**{j: float for j in JOINTS}, "front": IMAGE}, "observation", use_video=False)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", grpc_channel_options())
    stub = services_pb2_grpc.AsyncInferenceStub(channel)
    deadline = time.monotonic() + 120
    while True:
        try:
            stub.Ready(services_pb2.Empty())
            break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    spec = RemotePolicyConfig("act", folder, features, H, "cpu")
    stub.SendPolicyInstructions(services_pb2.PolicySetup(data=pickle.dumps(spec)))
    rtts = []
    for i in range(count):
        state, image = observation(i)
        raw = {**{j: float(v) for j, v in zip(JOINTS, state)}, "front": image}
        t0 = time.perf_counter()
        obs = TimedObservation(timestamp=time.time(), timestep=i, observation=raw, must_go=True)
        stub.SendObservations(send_bytes_in_chunks(pickle.dumps(obs), services_pb2.Observation, silent=True))
        reply = stub.GetActions(services_pb2.Empty())
        chunk = pickle.loads(reply.data)  # nosec: lerobot's own reply, decoded by lerobot's client path
        rtts.append(time.perf_counter() - t0)
        assert len(chunk) == H
    print(json.dumps({"rtt_s": rtts}))


# --- the benchmark ------------------------------------------------------------------------------------

def robolearn_round(client, count: int, first_id: int) -> list[float]:
    from robolearn.inference.protocol import ChunkRequest

    rtts = []
    for i in range(count):
        state, image = observation(first_id + i)
        req = ChunkRequest(first_id + i, i, {"state": state, "front": image}, np.zeros((0, STATE), np.float32))
        t0 = time.perf_counter()
        client.submit(req)
        got = []
        while not got:
            got = client.poll(0, timeout_ms=5000)
            if not got:
                raise TimeoutError("robolearn policy server did not answer in 5 s")
        rtts.append(time.perf_counter() - t0)
        assert got[0].request_id == req.request_id and got[0].actions.shape == (H, STATE)
    return rtts


def summary(rtts: list[float]) -> dict:
    ms = np.asarray(rtts) * 1e3
    return {"n": len(ms), "median_ms": round(float(np.median(ms)), 3), "p99_ms": round(float(np.quantile(ms, 0.99)), 3),
            "min_ms": round(float(ms.min()), 3), "max_ms": round(float(ms.max()), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=30)
    ap.add_argument("--serve-robolearn", nargs=2, metavar=("FOLDER", "ENDPOINT_FILE"), help=argparse.SUPPRESS)
    ap.add_argument("--lerobot-client", nargs=3, metavar=("PORT", "FOLDER", "COUNT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_robolearn:
        return serve_robolearn(*args.serve_robolearn)
    if args.lerobot_client:
        return lerobot_client(int(args.lerobot_client[0]), args.lerobot_client[1], int(args.lerobot_client[2]))

    from robolearn.inference.client import RemoteClient

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "act"
        build_act(folder)
        endpoint_file = Path(tmp) / "robolearn.json"
        ours = subprocess.Popen([sys.executable, __file__, "--serve-robolearn", str(folder), str(endpoint_file)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = free_port()
        theirs = subprocess.Popen(
            [sys.executable, "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1", f"--port={port}",
             "--fps=30", "--inference_latency=0.0", "--obs_queue_timeout=2"],
            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # its logs/ go to tmp
        try:
            while not endpoint_file.exists():
                if ours.poll() is not None:
                    raise RuntimeError("robolearn policy server exited at start")
                time.sleep(0.1)
            client = RemoteClient(json.loads(endpoint_file.read_text())["endpoint"], "bench", H, STATE)
            ours_rtt, theirs_rtt = [], []
            for r in range(args.rounds):
                rtt = robolearn_round(client, args.per_round + WARMUP, r * 1000)[WARMUP:]
                ours_rtt += rtt
                out = subprocess.run([sys.executable, __file__, "--lerobot-client", str(port), str(folder),
                                      str(args.per_round + WARMUP)], env=env, capture_output=True, text=True,
                                     timeout=600)
                if out.returncode != 0:
                    raise RuntimeError(f"lerobot client failed: {out.stderr[-2000:]}")
                their = json.loads(out.stdout.strip().splitlines()[-1])["rtt_s"][WARMUP:]
                theirs_rtt += their
                print(f"round {r + 1}/{args.rounds}: robolearn median {np.median(rtt) * 1e3:.1f} ms, "
                      f"lerobot median {np.median(their) * 1e3:.1f} ms", flush=True)
            client.close()
        finally:
            for p in (ours, theirs):
                p.terminate()
                p.wait(timeout=10)
    a, b = summary(ours_rtt), summary(theirs_rtt)
    ratio = a["median_ms"] / b["median_ms"]
    print(f"\n{'server':>10} {'median ms':>10} {'p99 ms':>8} {'min':>7} {'max':>7}")
    for name, s in (("robolearn", a), ("lerobot", b)):
        print(f"{name:>10} {s['median_ms']:>10.2f} {s['p99_ms']:>8.2f} {s['min_ms']:>7.2f} {s['max_ms']:>7.2f}")
    print(f"ratio (median) {ratio:.3f}, p99 ratio {a['p99_ms'] / b['p99_ms']:.3f}")
    command = run_command(ap, args, "bench-inference-rtt", "inference_rtt.py")
    path = write_result("inference_rtt", command, [goal("rtt_ratio_vs_lerobot", round(ratio, 4), "<=", 0.5)],
                        robolearn=a, lerobot=b, p99_ratio=round(a["p99_ms"] / b["p99_ms"], 4),
                        settings={"policy": "ACT dim 64, 1+1 layers, chunk 10, random resnet18 (11.3M params)",
                                  "observation": "6-d state + 96x96x3 uint8", "rounds": args.rounds,
                                  "per_round": args.per_round, "warmup_per_round": WARMUP})
    print(f"rtt_ratio_vs_lerobot = {ratio:.3f} (goal <= 0.5) -> {path}")


if __name__ == "__main__":
    main()
