"""``learner.device``: where the learner's networks, optimiser state and batches live.

    auto       the first CUDA device torch sees (under ``runtime=ray``, the GPU Ray gave the learner), else the CPU
    cpu        the CPU
    cuda[:N]   that CUDA device; one torch cannot see is an error naming what it sees, never a quiet fall-back to
               the CPU (a run set up for a GPU that learns tens of times slower on the CPU is a failure to report)

The replay buffer, the sampler and the prefetch thread stay on the CPU: a batch is drawn there and moved to the
device on the prefetch thread (a non-blocking copy from pinned memory, ordered before the update's kernels on the
device's default stream). Weights go out as CPU
arrays (``transport.weights``) and a checkpoint is read onto the CPU (``checkpoint``), so one written on a GPU loads
on a machine without one (the policy server, ``robolearn eval``) and the learner's ``load_state_dict`` copies it to
its device.
"""

from __future__ import annotations

import torch

from robolearn.learner.config import check_device_name


def resolve_device(name: str) -> torch.device:
    """The torch device ``learner.device`` names, on this machine."""
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"learner.device={name}, but torch sees no CUDA device here (torch "
                             f"{torch.__version__}, CUDA build {torch.version.cuda or 'none'}); set learner.device="
                             "auto or cpu to learn on the CPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"learner.device={name}, but torch sees {torch.cuda.device_count()} CUDA device(s) here")
    return device


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's parameters (an algorithm builds its own networks where its policy is)."""
    return next(module.parameters()).device


def batch_to(batch: dict, device: torch.device) -> dict:
    """A batch of tensors (nested dicts of them: observations with cameras) on ``device``; unchanged on the CPU."""
    if device.type == "cpu":
        return batch
    with torch.cuda.device(device):  # this thread's current device: pinning would open a context on cuda:0 otherwise
        return {k: batch_to(v, device) if isinstance(v, dict) else v.pin_memory().to(device, non_blocking=True)
                for k, v in batch.items()}
