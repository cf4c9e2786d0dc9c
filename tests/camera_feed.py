"""A live video feed for lerobot's real ``OpenCVCamera``: raw YUV4MPEG frames written into a named pipe at a set
rate, which OpenCV's FFmpeg backend reads like a device; ``pause`` stalls it (a USB camera that stops delivering).
Only the camera is missing here: lerobot's capture thread, its timestamps and ``read_latest`` run for real."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np


class CameraFeed:
    """Frames of ``width`` x ``height`` at ``fps`` into the FIFO ``path`` until ``close``; frame i is grey, luma
    16 + i % 200 (video range, so the camera's RGB tells it back: ``number``). ``frames`` counts those written."""

    def __init__(self, path: Path, width: int = 64, height: int = 48, fps: int = 30) -> None:
        self.path, self.width, self.height, self.fps = path, width, height, fps
        os.mkfifo(path)
        self.frames = 0
        self.paused = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def _write(self) -> None:
        chroma = np.full(self.width * self.height // 2, 128, np.uint8).tobytes()
        with open(self.path, "wb", buffering=0) as pipe:  # blocks until the camera opens the pipe
            try:
                pipe.write(f"YUV4MPEG2 W{self.width} H{self.height} F{self.fps}:1 Ip A1:1 C420jpeg\n".encode())
                while not self._closed.is_set():
                    if not self.paused.is_set():
                        pipe.write(b"FRAME\n" + np.full(self.width * self.height, 16 + self.frames % 200,
                                                        np.uint8).tobytes() + chroma)
                        self.frames += 1
                    time.sleep(1.0 / self.fps)
            except BrokenPipeError:  # the camera disconnected
                return

    @staticmethod
    def number(image: np.ndarray) -> int:
        """The frame number, modulo 200, of an RGB image the camera made of one of these frames."""
        return int(round(float(image.mean()) * 219 / 255)) % 200

    def close(self) -> None:
        self._closed.set()
        if self._thread.is_alive():  # still waiting for a reader: open the pipe once to release it
            with open(self.path, "rb"):
                pass
        self._thread.join(timeout=2.0)
        self.path.unlink(missing_ok=True)
