"""Per-GPU memory terms (bytes) for one pipeline stage.

  weights + gradients + optimizer state   bytes per parameter by precision, optimizer and ZeRO stage
  activations                             kept for backward, per micro-batch in flight
  workspace                               the largest transient buffer (e.g. fp32 logits for the loss),
                                          plus, under full recomputation, one layer's full activations
  runtime reserve                         CUDA context, NCCL buffers, allocator slack
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_tui.core.spec.frameworks import uses_pytorch_fsdp
from amp_tui.core.spec.scenario import Training

# Bytes the optimizer step reads and writes per parameter (it is memory-bound).
_OPTIMIZER_TRAFFIC = {"adam": 28, "sgd": 16}


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter held on one GPU, after ZeRO sharding over `dp` replicas."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes_per_param(training: Training, dp: int, zero_stage: int | None = None, pp: int = 1) -> StateBytes:
    """Per parameter on one GPU; ZeRO-1 (Megatron's distributed optimizer) shards the optimizer
    state over the `dp` ranks that hold the parameter, ZeRO-2 the gradients too, ZeRO-3 (FSDP)
    the weights as well. FSDP under pipeline parallelism (torchtitan) gathers a stage's weights
    once per iteration and keeps them, with their gradients accumulated whole in fp32, until the
    last micro-batch, rather than gathering them again for every micro-batch."""
    stage = training.zero_stage if zero_stage is None else zero_stage
    e = training.bytes_per_element
    optimizer = training.state_bytes_per_param - 2 * e   # what is neither weights nor gradients
    if stage >= 3 and pp > 1 and uses_pytorch_fsdp(training.framework):
        return StateBytes(weights=e + e / dp, gradients=max(e, 4) + e / dp, optimizer=optimizer / dp)
    return StateBytes(
        weights=e / dp if stage >= 3 else e,
        gradients=e / dp if stage >= 2 else e,
        optimizer=optimizer / dp if stage >= 1 else optimizer,
    )


# DeepSpeed ZeRO-3's defaults: parameters gathered at once (stage3_max_live_parameters) and the
# gradient elements reduced per bucket (reduce_bucket_size); Megatron-FSDP buckets likewise.
ZERO3_MAX_LIVE_PARAMS = 1e9
ZERO3_REDUCE_BUCKET = 5e8


def zero3_gathered_params(layer_params, framework: str):
    """Parameters (per GPU, per layer) ZeRO-3 holds whole while a layer runs, beyond its shard.
    PyTorch FSDP gathers a whole wrapped block, prefetches the next and holds its unsharded
    gradient: 3 layers. DeepSpeed (and Megatron-FSDP) gather module by module up to a bound on the
    live parameters and reduce gradients in buckets: a 5-billion-parameter layer does not sit whole."""
    if uses_pytorch_fsdp(framework):
        return 3.0 * layer_params
    return np.minimum(2.0 * layer_params, ZERO3_MAX_LIVE_PARAMS) + np.minimum(layer_params, ZERO3_REDUCE_BUCKET)


# DeepSpeed's 16-bit optimizer wrapper moves the gradients through a flat fp32 buffer around the
# fused step: copy in (2 read, 4 written), unscale and clip (4 + 4, and 4 read for the norm), and
# the fp32 master weights back to 16 bits (4 read, 2 written).
_DEEPSPEED_FP16_WRAPPER = 24


def optimizer_traffic_per_param(training: Training, dp: int, zero_stage: int | None = None) -> float:
    """Bytes moved per parameter by one optimizer step on one GPU (ZeRO shards the step too)."""
    stage = training.zero_stage if zero_stage is None else zero_stage
    traffic = _OPTIMIZER_TRAFFIC[training.optimizer]
    if training.framework == "deepspeed" and training.precision != "fp32":
        traffic += _DEEPSPEED_FP16_WRAPPER
    return traffic / dp if stage >= 1 else traffic


def micro_batches_in_flight(schedule: str, stage: int, pp: int, num_micro_batches: int,
                            virtual_stages: int = 1) -> float:
    """Micro-batches of activations a stage holds at its peak: 1F1B stage s keeps min(pp - s, B),
    GPipe keeps all B. Megatron's interleaved 1F1B with v chunks per rank warms up with
    2 (pp - s - 1) + (v - 1) pp + 1 chunk passes, each holding 1/v of the stage's activations."""
    if schedule == "gpipe":
        return num_micro_batches
    if virtual_stages > 1:
        warmup = 2 * (pp - stage - 1) + (virtual_stages - 1) * pp + 1
        return min(warmup / virtual_stages, num_micro_batches)
    return min(pp - stage, num_micro_batches)


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float
    reserve_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes
                + self.workspace_bytes + self.reserve_bytes)

    def to_dict(self) -> dict:
        return {"weights_bytes": self.weights_bytes, "gradients_bytes": self.gradients_bytes,
                "optimizer_bytes": self.optimizer_bytes, "activations_bytes": self.activations_bytes,
                "workspace_bytes": self.workspace_bytes, "reserve_bytes": self.reserve_bytes,
                "total_bytes": self.total_bytes}
