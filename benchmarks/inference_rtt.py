"""Round-trip time of one chunk request: robolearn's policy server vs lerobot's async-inference server.

    make bench-inference-rtt        (python benchmarks/inference_rtt.py [--rounds 6 --per-round 30])

Two cases, each an ACT policy saved once with ``save_pretrained`` + its processors and served by both, each
server in its own process, to the same observation (6-d state + one RGB camera):

    model      ACT dim 64, one encoder and one decoder layer, chunk 10, a randomly initialised resnet18
               backbone (11.3M parameters), a 96x96 camera: model and serving path together
    transport  ACT dim 16 on a 16x16 camera (the resnet18's work is ~1/36 of the model case's): the serving
               path alone, what each server adds around a model

The servers:

    robolearn        PolicyServer (zmq ROUTER, msgpack header + raw arrays) with policies.lerobot_policy,
                     client: inference.client.RemoteClient (DEALER)
    lerobot          lerobot's ``PolicyServer`` in lerobot's gRPC server (4 worker threads, as its ``serve``),
                     --inference_latency=0 (its minimum-latency sleep off), given what robolearn's adapter
                     does to the model: torch threads pinned to the same count, the policy and its camera
                     input in channels-last memory format (oneDNN's preferred layout for the resnet18
                     convolutions: ~17 ms instead of ~29 ms per forward pass here). The goals' peer.
    lerobot_default  ``python -m lerobot.async_inference.policy_server`` as shipped (torch defaults), the
                     model case only, reported beside the goals

Clients: lerobot's own gRPC stubs (SendObservations then GetActions, pickle on its wire) run in a separate
process, so only lerobot's code unpickles what its server sends. What stays different is each server's
serving path, which is what is measured: robolearn sends raw arrays (no pickle, no chunked byte stream) and
runs the model on the server's main thread; lerobot runs it in a gRPC worker thread.

RTT = request sent -> chunk received and decoded. Rounds interleave the servers (order alternating) to spread
machine drift over all; medians and p99 over all timed requests, the first 5 of each round are warm-up, and
the spread of the per-round medians (min/max) is reported. Goals: ``rtt_ratio_vs_lerobot`` (model case) and
``transport_rtt_ratio_vs_lerobot`` (transport case), robolearn median / lerobot median, <= 0.5 each.
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

H, STATE = 10, 6
CASES = {"model": {"image": (96, 96, 3), "dim": 64, "ff": 128},
         "transport": {"image": (16, 16, 3), "dim": 16, "ff": 32}}
JOINTS = [f"joint_{i}.pos" for i in range(STATE)]
WARMUP = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_act(folder: Path, case: str) -> None:
    """The ACT policy both servers load for ``case`` (random weights, dummy normalisation statistics)."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    c = CASES[case]
    cfg = ACTConfig(
        input_features={"observation.state": PolicyFeature(FeatureType.STATE, (STATE,)),
                        "observation.images.front": PolicyFeature(FeatureType.VISUAL, (3, *c["image"][:2]))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (STATE,))},
        chunk_size=H, n_action_steps=H, dim_model=c["dim"], n_heads=2, dim_feedforward=c["ff"], n_encoder_layers=1,
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


def observation(i: int, image: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(i)
    return rng.uniform(-30, 30, STATE).astype(np.float32), rng.integers(0, 256, image, dtype=np.uint8)


def action_spec():
    from robolearn.specs import ActionSpec, ArraySpec

    return ActionSpec(ArraySpec((STATE,), low=(-30.0,) * STATE, high=(30.0,) * STATE))


# --- subprocess roles ---------------------------------------------------------------------------------

def serve_robolearn(folder: str, endpoint_file: str) -> None:
    import torch

    from robolearn.inference.runner import ChunkPolicyRunner
    from robolearn.inference.server import PolicyServer
    from robolearn.policies.lerobot_policy import LerobotFolderPolicy

    torch.set_num_threads(os.cpu_count() or 1)
    policy = LerobotFolderPolicy(folder, action_spec())
    server = PolicyServer(ChunkPolicyRunner(policy, policy.observation_spec, STATE))
    Path(endpoint_file).write_text(json.dumps({"endpoint": server.endpoint}))
    while True:
        server.serve_once(100)


def serve_lerobot(port: int) -> None:
    """lerobot's PolicyServer in a gRPC server built as its ``serve`` builds it, with robolearn's adapter's
    model-side settings: torch threads pinned to the CPU count, the policy and its camera input channels-last."""
    from concurrent import futures

    import grpc
    import torch
    from lerobot.async_inference.configs import PolicyServerConfig
    from lerobot.async_inference.policy_server import PolicyServer
    from lerobot.transport import services_pb2_grpc

    class ChannelsLastPolicyServer(PolicyServer):
        def SendPolicyInstructions(self, request, context):  # noqa: N802 (gRPC's name)
            reply = super().SendPolicyInstructions(request, context)
            self.policy.to(memory_format=torch.channels_last)
            return reply

        def _get_action_chunk(self, observation):
            observation = {k: v.contiguous(memory_format=torch.channels_last)
                           if isinstance(v, torch.Tensor) and v.ndim == 4 else v for k, v in observation.items()}
            return super()._get_action_chunk(observation)

    torch.set_num_threads(os.cpu_count() or 1)
    servicer = ChannelsLastPolicyServer(PolicyServerConfig(host="127.0.0.1", port=port, fps=30,
                                                           inference_latency=0.0, obs_queue_timeout=2))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def lerobot_client(port: int, folder: str, count: int, case: str) -> None:
    """lerobot's client path: its stubs, its pickled TimedObservation, its chunked byte stream."""
    import pickle  # lerobot's wire format; confined to this measuring process

    import grpc
    from lerobot.async_inference.helpers import RemotePolicyConfig, TimedObservation
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks
    from lerobot.utils.feature_utils import hw_to_dataset_features

    image = CASES[case]["image"]
    features = hw_to_dataset_features({**{j: float for j in JOINTS}, "front": image}, "observation", use_video=False)
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
        state, frame = observation(i, image)
        raw = {**{j: float(v) for j, v in zip(JOINTS, state)}, "front": frame}
        t0 = time.perf_counter()
        obs = TimedObservation(timestamp=time.time(), timestep=i, observation=raw, must_go=True)
        stub.SendObservations(send_bytes_in_chunks(pickle.dumps(obs), services_pb2.Observation, silent=True))
        reply = stub.GetActions(services_pb2.Empty())
        chunk = pickle.loads(reply.data)  # nosec: lerobot's own reply, decoded by lerobot's client path
        rtts.append(time.perf_counter() - t0)
        assert len(chunk) == H
    print(json.dumps({"rtt_s": rtts}))


# --- the benchmark ------------------------------------------------------------------------------------

def robolearn_round(client, count: int, first_id: int, case: str) -> list[float]:
    from robolearn.inference.protocol import ChunkRequest

    rtts = []
    for i in range(count):
        state, image = observation(first_id + i, CASES[case]["image"])
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


def summary(rtts: list[float], round_medians: list[float]) -> dict:
    ms = np.asarray(rtts) * 1e3
    return {"n": len(ms), "median_ms": round(float(np.median(ms)), 3), "p99_ms": round(float(np.quantile(ms, 0.99)), 3),
            "min_ms": round(float(ms.min()), 3), "max_ms": round(float(ms.max()), 3),
            "round_median_ms_min_max": [round(min(round_medians) * 1e3, 3), round(max(round_medians) * 1e3, 3)],
            "round_median_ms": [round(m * 1e3, 3) for m in round_medians]}


def wait_for_file(path: Path, proc: subprocess.Popen, what: str) -> None:
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start")
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=30)
    ap.add_argument("--serve-robolearn", nargs=2, metavar=("FOLDER", "ENDPOINT_FILE"), help=argparse.SUPPRESS)
    ap.add_argument("--serve-lerobot", type=int, metavar="PORT", help=argparse.SUPPRESS)
    ap.add_argument("--lerobot-client", nargs=4, metavar=("PORT", "FOLDER", "COUNT", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_robolearn:
        return serve_robolearn(*args.serve_robolearn)
    if args.serve_lerobot:
        return serve_lerobot(args.serve_lerobot)
    if args.lerobot_client:
        port, folder, count, case = args.lerobot_client
        return lerobot_client(int(port), folder, int(count), case)
    if args.rounds < 3:
        ap.error("--rounds must be >= 3")

    from robolearn.inference.client import RemoteClient

    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    arms = {"model": ["robolearn", "lerobot", "lerobot_default"], "transport": ["robolearn", "lerobot"]}
    rtt = {case: {arm: [] for arm in names} for case, names in arms.items()}
    round_medians = {case: {arm: [] for arm in names} for case, names in arms.items()}
    with tempfile.TemporaryDirectory() as tmp:
        for case, names in arms.items():
            folder = Path(tmp) / case
            build_act(folder, case)
            endpoint_file = Path(tmp) / f"robolearn-{case}.json"
            ports = {"lerobot": free_port(), "lerobot_default": free_port()}
            procs = {"robolearn": subprocess.Popen(
                [sys.executable, __file__, "--serve-robolearn", str(folder), str(endpoint_file)], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
                "lerobot": subprocess.Popen([sys.executable, __file__, "--serve-lerobot", str(ports["lerobot"])],
                                            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)}
            if "lerobot_default" in names:
                procs["lerobot_default"] = subprocess.Popen(
                    [sys.executable, "-m", "lerobot.async_inference.policy_server", "--host=127.0.0.1",
                     f"--port={ports['lerobot_default']}", "--fps=30", "--inference_latency=0.0",
                     "--obs_queue_timeout=2"],
                    env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # its logs/ go to tmp
            try:
                wait_for_file(endpoint_file, procs["robolearn"], "robolearn policy server")
                client = RemoteClient(json.loads(endpoint_file.read_text())["endpoint"], "bench", H, STATE)
                for r in range(args.rounds):
                    for arm in names if r % 2 == 0 else reversed(names):
                        if arm == "robolearn":
                            got = robolearn_round(client, args.per_round + WARMUP, r * 1000, case)[WARMUP:]
                        else:
                            out = subprocess.run(
                                [sys.executable, __file__, "--lerobot-client", str(ports[arm]), str(folder),
                                 str(args.per_round + WARMUP), case], env=env, capture_output=True, text=True,
                                timeout=600)
                            if out.returncode != 0:
                                raise RuntimeError(f"lerobot client ({arm}) failed: {out.stderr[-2000:]}")
                            got = json.loads(out.stdout.strip().splitlines()[-1])["rtt_s"][WARMUP:]
                        rtt[case][arm] += got
                        round_medians[case][arm].append(float(np.median(got)))
                    print(f"{case} round {r + 1}/{args.rounds}: " + ", ".join(
                        f"{arm} {round_medians[case][arm][-1] * 1e3:.1f} ms" for arm in names), flush=True)
                client.close()
            finally:
                for proc in procs.values():
                    proc.terminate()
                    proc.wait(timeout=10)
    stats = {case: {arm: summary(rtt[case][arm], round_medians[case][arm]) for arm in names}
             for case, names in arms.items()}
    ratio = {case: stats[case]["robolearn"]["median_ms"] / stats[case]["lerobot"]["median_ms"] for case in arms}
    default_ratio = stats["model"]["robolearn"]["median_ms"] / stats["model"]["lerobot_default"]["median_ms"]
    for case, names in arms.items():
        print(f"\n{case}: {'server':>16} {'median ms':>10} {'p99 ms':>8} {'min':>7} {'max':>7}")
        for arm in names:
            st = stats[case][arm]
            print(f"{'':>{len(case) + 1}} {arm:>16} {st['median_ms']:>10.2f} {st['p99_ms']:>8.2f} "
                  f"{st['min_ms']:>7.2f} {st['max_ms']:>7.2f}")
        print(f"ratio (median) robolearn / lerobot: {ratio[case]:.3f}")
    print(f"model case against lerobot as shipped: {default_ratio:.3f}")
    command = run_command(ap, args, "bench-inference-rtt", "inference_rtt.py")
    path = write_result(
        "inference_rtt", command, [goal("rtt_ratio_vs_lerobot", round(ratio["model"], 4), "<=", 0.5),
                                   goal("transport_rtt_ratio_vs_lerobot", round(ratio["transport"], 4), "<=", 0.5)],
        rtt=stats, model_rtt_ratio_vs_lerobot_as_shipped=round(default_ratio, 4),
        p99_ratio={case: round(stats[case]["robolearn"]["p99_ms"] / stats[case]["lerobot"]["p99_ms"], 4)
                   for case in arms},
        peer="lerobot's PolicyServer with robolearn's model-side settings (pinned threads, channels-last); "
             "lerobot_default: its server as shipped",
        settings={"model": "ACT dim 64, 1+1 layers, chunk 10, random resnet18 (11.3M params), 6-d state + 96x96x3",
                  "transport": "ACT dim 16, 1+1 layers, chunk 10, random resnet18, 6-d state + 16x16x3",
                  "rounds": args.rounds, "per_round": args.per_round, "warmup_per_round": WARMUP})
    print(f"rtt_ratio_vs_lerobot = {ratio['model']:.3f}, transport_rtt_ratio_vs_lerobot = {ratio['transport']:.3f} "
          f"(goals <= 0.5) -> {path}")


if __name__ == "__main__":
    main()
