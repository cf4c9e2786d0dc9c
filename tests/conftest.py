import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

from robolearn.runtime.builtins import register_builtins  # noqa: E402  (after the environment above is set)

register_builtins()  # what every entry point does before configs are validated
