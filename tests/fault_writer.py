"""A writer process for the SIGKILL fault test: appends deterministic batches and prints an ack line
(``ack EPISODE LAST_STEP``) after each ``add`` returns. Usage: python -m tests.fault_writer DIR FIRST_EPISODE"""

import sys
import time

import numpy as np

from robolearn.buffer.replay_buffer import ReplayBuffer
from tests.buffer_data import ACT, OBS, batch


def main() -> None:
    directory, first = sys.argv[1], int(sys.argv[2])
    buf = ReplayBuffer(directory, OBS, ACT, capacity=100_000, segment_mb=0.05)
    rng = np.random.default_rng(first)
    episode = first
    while True:
        step, length = 0, int(rng.integers(5, 40))
        while step < length:
            n = int(min(rng.integers(1, 8), length - step))
            end = ("terminated" if rng.random() < 0.5 else "truncated") if step + n == length else None
            buf.add("robot-0", batch(episode, step, n, end=end, success=end == "terminated"))
            print(f"ack {episode} {step + n - 1}", flush=True)
            time.sleep(0.001)  # about the rate batches reach a learner; keeps the re-checks short
            step += n
        episode += 1


if __name__ == "__main__":
    main()
