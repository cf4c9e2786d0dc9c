"""Runs a chunk policy on a batch of requests: one forward pass for every robot that asked.

The policy implements ``predict_chunk(observations {key: (B, ...)}, prefix (B, D, A), prefix_len (B,),
explore) -> (B, H, A)`` in normalised action units (``policies.flow_chunk.FlowChunkPolicy``; the Gaussian MLP
policy and lerobot policies ignore the prefix). A policy with ``takes_mid_observation = True`` also gets
``mid_observations`` (their ``protocol.MID_KEYS``: the state) and ``mid_offsets`` (B,) ticks after the first
observation (two-stage requests; a one-stage request passes its observation again with offset 0); a two-stage
chunk starts at its mid observation's tick (``ChunkResponse.chunk_start``). Such a policy is a trunk and a head
(``predict_trunk``, ``predict_head``): a client runs ``run_trunk`` when the request is made, on what is known then
(the first observation, the committed actions, the planned mid offset ``planned_delay - mid_ticks``), and
``run_head`` once the mid observation is attached, so only the head ever sees it. ``run`` does both at once.
Requests are validated against the observation spec before they reach the model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from robolearn.inference.protocol import MID_KEYS, ChunkRequest, ChunkResponse, mid_part
from robolearn.specs import ObservationSpec, SpecError


@dataclass(frozen=True)
class TrunkResult:
    """What a two-stage policy's trunk computed for a batch of requests, waiting for their mid observations."""

    features: torch.Tensor          # (B, F), the policy's own
    ms: float                       # its compute time

    def row(self, i: int) -> TrunkResult:
        """Request ``i``'s part (a server finishes each request when its own mid observation comes in)."""
        return TrunkResult(self.features[i:i + 1], self.ms)

    @staticmethod
    def stack(parts: list[TrunkResult]) -> TrunkResult:
        """Rows of several requests, for one batched head pass."""
        return TrunkResult(torch.cat([p.features for p in parts]), max(p.ms for p in parts))


class ChunkPolicyRunner:
    def __init__(self, policy: torch.nn.Module, obs_spec: ObservationSpec, action_dim: int,
                 version: int = 0, explore: bool = False) -> None:
        self.policy = policy.eval()
        self.explore = explore  # sample exploratory actions (an RL actor collecting data)
        self.obs_spec = obs_spec
        self.mid_spec = obs_spec.select(MID_KEYS)  # what a mid observation carries
        self.action_dim = action_dim
        self.version = version

    def check(self, req: ChunkRequest) -> None:
        """Raise ``SpecError`` naming the key when a request does not fit the policy."""
        self.obs_spec.validate(req.observation)
        if req.prefix.shape[1:] != (self.action_dim,):
            raise SpecError(f"prefix: shape {tuple(req.prefix.shape)}, expected (d, {self.action_dim})")
        if req.mid_observation is not None:
            self.check_mid(req.mid_observation)
        horizon = getattr(self.policy, "horizon", None)
        if horizon is not None and req.prefix_len >= horizon:
            raise SpecError(f"prefix: {req.prefix_len} committed actions, the chunk has only {horizon}")
        if req.mid_ticks:
            if not getattr(self.policy, "takes_mid_observation", False):
                raise self._not_two_stage()
            if not 0 <= req.planned_delay - req.mid_ticks <= req.prefix_len:
                raise SpecError("a two-stage request's planned mid observation falls outside its committed prefix")

    def _batch(self, requests: list[ChunkRequest]) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """The requests' first observations {key: (B, ...)}, committed actions (B, D, A) zero-padded, lengths (B,)."""
        observations = {k: np.stack([r.observation[k] for r in requests]) for k in self.obs_spec.arrays}
        d_max = max(r.prefix_len for r in requests)
        prefix = np.zeros((len(requests), d_max, self.action_dim), np.float32)
        for i, r in enumerate(requests):
            prefix[i, :r.prefix_len] = r.prefix
        return observations, prefix, np.array([r.prefix_len for r in requests], np.int64)

    def _offsets(self, requests: list[ChunkRequest]) -> np.ndarray:
        """Each request's mid observation's ticks after its first one (0: one-stage)."""
        offsets = np.array([r.mid_tick - r.tick if r.mid_observation is not None else 0 for r in requests], np.int64)
        if getattr(self.policy, "takes_mid_observation", False):
            if any(k > r.prefix_len for k, r in zip(offsets, requests)):
                raise SpecError("a mid observation taken after the committed prefix ends")
        elif any(r.mid_observation is not None for r in requests):
            raise self._not_two_stage()
        return offsets

    def _not_two_stage(self) -> SpecError:
        return SpecError(f"a two-stage request (chunking.mid_observation_ticks > 0) reached "
                         f"{type(self.policy).__name__}, which takes no mid-inference observation (a two-stage "
                         "policy has a trunk and a head: policy.mid_observation=true)")

    def _responses(self, requests: list[ChunkRequest], chunks: np.ndarray, offsets: np.ndarray,
                   ms: float) -> list[ChunkResponse]:
        # a two-stage chunk starts at its mid observation's tick, with the committed actions left from there
        return [ChunkResponse(r.request_id, r.tick, chunks[i], self.version, r.prefix_len - int(k), ms,
                              chunk_start=r.tick + int(k)) for i, (r, k) in enumerate(zip(requests, offsets))]

    def check_mid(self, observation: dict[str, np.ndarray]) -> None:
        """Raise ``SpecError`` naming the key when a mid observation's ``MID_KEYS`` do not fit the policy (the rest
        of an in-process observation is not read)."""
        self.mid_spec.validate(mid_part(observation))

    def _stack_mids(self, mids: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {k: np.stack([m[k] for m in mids]) for k in self.mid_spec.arrays}

    def run(self, requests: list[ChunkRequest]) -> list[ChunkResponse]:
        """Whole chunks now (one-stage requests, or two-stage ones whose mid observation is attached)."""
        t0 = time.perf_counter()
        observations, prefix, lens = self._batch(requests)
        offsets = self._offsets(requests)
        extra = {}
        if getattr(self.policy, "takes_mid_observation", False):
            mids = [r.mid_observation if r.mid_observation is not None else r.observation for r in requests]
            extra = {"mid_observations": self._stack_mids(mids), "mid_offsets": offsets}
        with torch.no_grad():
            chunks = self.policy.predict_chunk(observations, prefix, lens, explore=self.explore, **extra)
        return self._responses(requests, chunks, offsets, (time.perf_counter() - t0) * 1e3)

    def run_trunk(self, requests: list[ChunkRequest]) -> TrunkResult:
        """Two-stage, at request time: the trunk on the first observations, for the planned mid offsets."""
        if not getattr(self.policy, "takes_mid_observation", False):
            raise self._not_two_stage()
        t0 = time.perf_counter()
        observations, prefix, lens = self._batch(requests)
        planned = np.array([r.planned_delay - r.mid_ticks for r in requests], np.int64)
        if (planned < 0).any() or (planned > lens).any():
            raise SpecError("a two-stage request's planned mid observation falls outside its committed prefix")
        features = self.policy.predict_trunk(observations, prefix, lens, planned)
        return TrunkResult(features, (time.perf_counter() - t0) * 1e3)

    def run_head(self, requests: list[ChunkRequest], trunk: TrunkResult) -> list[ChunkResponse]:
        """Two-stage, once each request has its mid observation: the head alone. A mid observation taken at
        another tick than planned still anchors the chunk at its own tick (the trunk saw the planned one)."""
        t0 = time.perf_counter()
        _, prefix, lens = self._batch(requests)
        offsets = self._offsets(requests)
        mids = self._stack_mids([r.mid_observation for r in requests])
        chunks = self.policy.predict_head(trunk.features, mids, prefix, lens, offsets)
        return self._responses(requests, chunks, offsets, trunk.ms + (time.perf_counter() - t0) * 1e3)

    def spread(self, observation: dict[str, np.ndarray], samples: int = 8) -> float:
        """The policy's uncertainty at ``observation``: the standard deviation across ``samples`` sampled chunks,
        averaged over the chunk's actions and dimensions (normalised units, [-1, 1]). For a Gaussian policy it is
        its spread, for a flow policy the spread of its samples; a deterministic policy gives 0."""
        observations = {k: np.repeat(np.asarray(observation[k])[None], samples, axis=0) for k in self.obs_spec.arrays}
        prefix = np.zeros((samples, 0, self.action_dim), np.float32)
        lens = np.zeros(samples, np.int64)
        extra = {}
        if getattr(self.policy, "takes_mid_observation", False):
            extra = {"mid_observations": observations, "mid_offsets": lens}
        with torch.no_grad():
            chunks = self.policy.predict_chunk(observations, prefix, lens, explore=True, **extra)
        return float(np.asarray(chunks).std(axis=0).mean())
