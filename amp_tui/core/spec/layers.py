"""One layer of a model: what it weighs, computes, keeps and sends, per sample.

model.py reads a model's layers from YAML (or builds them with families.py); both use this type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAYER_KINDS = ("embedding", "block", "head", "other")
ANY_GPU = "any"     # a CPU profile's `gpu` when it stands in for every GPU type (spec/profiles.py)

LAYER_NUMBERS = {
    "params": "parameters",
    "flops": "forward FLOPs per sample",
    "activation_bytes": "bytes kept for backward per sample",
    "output_bytes": "bytes sent across a pipeline boundary per sample",
    "tp_comm_bytes": "bytes all-reduced per sample per forward under tensor parallelism",
    "activation_replicated_bytes": "part of activation_bytes that tensor parallelism does not split",
    "workspace_bytes": "transient bytes per sample at the layer's peak (e.g. fp32 logits for the loss)",
    "tokens": "tokens per sample (sets the kernel size in the efficiency model)",
    "width": "hidden width (sets the kernel size in the efficiency model)",
    # Mixture of experts (0 in a dense layer): `params` counts every expert, `flops` the top-k ones.
    "experts": "experts in the layer's mixture-of-experts MLP",
    "expert_params": "part of params in the experts (expert parallelism splits it over ep GPUs)",
    "moe_alltoall_bytes": "bytes per sample per forward sent to the experts and back (all-to-all dispatch + combine)",
}


REQUIRED_NUMBERS = ("params", "flops", "activation_bytes", "output_bytes")


@dataclass(frozen=True)
class Layer:
    name: str
    params: float
    flops: float
    activation_bytes: float
    output_bytes: float
    tp_comm_bytes: float = 0.0
    activation_replicated_bytes: float = 0.0
    workspace_bytes: float = 0.0
    tokens: float = 0.0
    width: float = 0.0
    experts: float = 0.0
    expert_params: float = 0.0
    moe_alltoall_bytes: float = 0.0
    kind: str = "other"
    repeat: int = 1
    # Measured forward seconds per sample: {gpu: {tp: seconds or one value per repeated copy}}.
    profile: dict = field(default_factory=dict, compare=True, hash=False)
    # Measured by `amp-tui profile` (spec/profiles.py) at tp's shard shape, without the collectives:
    # {gpu: {tp: ((micro_batch, forward_s, backward_s, recompute_s or nan), ...) by micro-batch}},
    # seconds per micro-batch; recompute_s is forward + backward with the layer checkpointed.
    measured: dict = field(default_factory=dict, compare=True, hash=False)

    def profiled_time(self, gpu: str, tp: int, copy: int) -> float | None:
        by_tp = self.profile.get(gpu)
        value = by_tp.get(tp) if by_tp else None
        if value is None:
            return None
        return value[copy] if isinstance(value, tuple) else value

    def measured_passes(self, gpu: str, tp: int) -> tuple | None:
        """((micro_batch, forward_s, backward_s, recompute_s), ...) measured for this GPU type at this tp, or None.
        A CPU profile that stands in for no GPU in particular is filed under ANY_GPU."""
        by_tp = self.measured.get(gpu) or self.measured.get(ANY_GPU)
        return by_tp.get(tp) if by_tp else None

    def to_dict(self) -> dict:
        out: dict = {"name": self.name}
        if self.repeat != 1:
            out["repeat"] = self.repeat
        out["kind"] = self.kind
        for key in LAYER_NUMBERS:
            value = getattr(self, key)
            if value or key in REQUIRED_NUMBERS:
                out[key] = float(value)
        if self.profile:
            out["profile"] = {gpu: {tp: (list(v) if isinstance(v, tuple) else v) for tp, v in by_tp.items()}
                              for gpu, by_tp in self.profile.items()}
        return out


# The cross-entropy's transient buffers per logit, as the GPT family writes them (families.py):
# three fp32 copies of the logits (upcast, softmax, gradient); each framework holds a share of
# them (spec/frameworks.py, FrameworkProfile.loss_buffers).
LOSS_WORKSPACE_PER_LOGIT = 12
