"""The data plane under ``runtime=ray``: robolearn's zmq channels against Ray's own calls and object store.

    make bench-data-plane      (python benchmarks/data_plane.py [--runs 3] [--messages 400])

One message is delivered to another process and acknowledged, one after the other (what an actor waits for
before it may drop a batch from its spool, and what a weight publish costs per robot), in three sizes:

    transitions_state    a 10-step batch of the reach task from state (the state, action, reward, flags): ~2 kB
    transitions_images   the same with two 64 x 64 cameras: ~250 kB
    weights              a full weight message of the default MLP policy (256 x 256, ~290 kB)

    zmq   robolearn's wire format (``transport.wire``: msgpack header + raw array frames) on a DEALER to a ROUTER
          in the receiving process, which decodes it (the learner's checks) and sends the ack
    ray   the same arrays as a dict to a method of a Ray actor in the receiving process (``ray.get`` of its
          answer: the ack); Ray serialises them (pickle protocol 5, numpy out of band) and, for the large
          ones, passes them through its object store

Interleaved, ``--runs`` times each; the median message rate with min/max. Both receivers only decode and answer
(no disk): this measures the transport alone. What it decided is in docs/architecture.md ("Ray runtime").
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).parent))
from common import run_command, write_result  # noqa: E402

from robolearn.transport.wire import decode, encode  # noqa: E402


def payloads() -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    state = {"obs.state": rng.normal(size=(10, 21)).astype(np.float32),
             "action": rng.normal(size=(10, 6)).astype(np.float32),
             "reward": np.zeros(10, np.float32), "terminated": np.zeros(10, bool), "truncated": np.zeros(10, bool),
             "episode_id": np.zeros(10, np.int64), "step": np.arange(10, dtype=np.int64),
             "policy_version": np.zeros(10, np.int64)}
    images = {**state, **{f"obs.{c}": rng.integers(0, 255, size=(10, 64, 64, 3), dtype=np.uint8)
                          for c in ("wrist", "front")}}
    dims = [21, 256, 256, 12]  # the default MLP policy: mean and log-std heads of the 6 actions
    weights = {f"layer{i}.weight": rng.normal(size=(b, a)).astype(np.float32) for i, (a, b) in
               enumerate(zip(dims[:-1], dims[1:]))}
    weights.update({f"layer{i}.bias": np.zeros(b, np.float32) for i, b in enumerate(dims[1:])})
    return {"transitions_state": state, "transitions_images": images, "weights": weights}


def _zmq_receiver(endpoint_queue) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    endpoint_queue.put(f"tcp://127.0.0.1:{port}")
    while True:
        frames = sock.recv_multipart(copy=False)
        peer, body = frames[0].bytes, [f.buffer for f in frames[1:]]
        if bytes(body[0]) == b"stop":
            sock.send_multipart([peer, b"bye"])
            break
        msg = decode(body)
        sock.send_multipart([peer, b"ack", str(msg.seq).encode()])
    sock.close(linger=0)
    ctx.term()


class RayReceiver:
    def take(self, seq: int, arrays: dict) -> int:
        assert all(isinstance(a, np.ndarray) for a in arrays.values())
        return seq


def rate_zmq(sock: zmq.Socket, arrays: dict, n: int) -> float:
    t0 = time.perf_counter()
    for seq in range(n):
        sock.send_multipart(encode("transitions", "bench", seq, {}, arrays), copy=False)
        reply = sock.recv_multipart()
        assert reply[0] == b"ack" and int(reply[1]) == seq
    return n / (time.perf_counter() - t0)


def rate_ray(actor, arrays: dict, n: int) -> float:
    import ray

    t0 = time.perf_counter()
    for seq in range(n):
        assert ray.get(actor.take.remote(seq, arrays)) == seq
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=400)
    args = ap.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    actor = ray.remote(RayReceiver).remote()
    ray.get(actor.take.remote(-1, {}))
    queue = mp.get_context("spawn").Queue()
    receiver = mp.get_context("spawn").Process(target=_zmq_receiver, args=(queue,), daemon=True)
    receiver.start()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(queue.get(timeout=30))
    rates: dict[str, dict[str, list[float]]] = {}
    try:
        data = payloads()
        for arrays in data.values():  # warm both up
            rate_zmq(sock, arrays, 20)
            rate_ray(actor, arrays, 20)
        for run in range(args.runs):
            for name, arrays in data.items():
                for plane, fn, target in (("zmq", rate_zmq, sock), ("ray", rate_ray, actor))[::1 if run % 2 else -1]:
                    rates.setdefault(name, {}).setdefault(plane, []).append(fn(target, arrays, args.messages))
            print(f"run {run + 1}/{args.runs}: " + ", ".join(
                f"{n} zmq {r['zmq'][-1]:.0f}/s ray {r['ray'][-1]:.0f}/s" for n, r in rates.items()), flush=True)
        sizes = {n: int(sum(a.nbytes for a in arrays.values())) for n, arrays in data.items()}
    finally:
        sock.send_multipart([b"stop"])
        sock.recv_multipart()
        sock.close(linger=0)
        ctx.term()
        receiver.join(timeout=10)
        ray.shutdown()
    results = {}
    for name, by_plane in rates.items():
        results[name] = {"bytes": sizes[name], **{plane: {"median_msgs_per_s": round(statistics.median(v), 1),
                                                          "min": round(min(v), 1), "max": round(max(v), 1)}
                                                  for plane, v in by_plane.items()}}
        results[name]["zmq_over_ray"] = round(results[name]["zmq"]["median_msgs_per_s"]
                                              / results[name]["ray"]["median_msgs_per_s"], 2)
    path = write_result("data_plane", run_command(ap, args, "bench-data-plane", "data_plane.py"), [],
                        messages_per_run=args.messages, runs=args.runs, results=results,
                        note="no goal: the measurement behind the Ray runtime's data-plane decision "
                             "(docs/architecture.md)")
    for name, r in results.items():
        print(f"{name} ({r['bytes']} B): zmq {r['zmq']['median_msgs_per_s']}/s, ray {r['ray']['median_msgs_per_s']}/s "
              f"-> zmq/ray {r['zmq_over_ray']}")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
