"""What the cost model predicts for one strategy: per stage and for the iteration, every term
named, and the memory each stage needs against what its GPUs hold. Candidate.predict (cost.py)
builds them; plans, exports and both front ends read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from amp_tui.core.base.units import format_bytes
from amp_tui.core.costmodel.memory import MemoryBreakdown
from amp_tui.core.spec.strategy import Strategy


@dataclass(frozen=True)
class StagePrediction:
    index: int
    first_layer: int
    last_layer: int
    gpu: str                       # the GPU type that sets the pace (the slowest serving the stage)
    gpu_types: tuple[str, ...]
    compute_s: float               # per micro-batch, forward + backward, incl. tensor-parallel comm
    tp_comm_s: float               # the tensor-parallel collectives (and ring attention's exposed sends) in compute_s
    comm_s: float                  # pipeline sends per micro-batch, both neighbours, both directions
    overhead_s: float              # the pipeline engine's fixed cost per micro-batch
    stage_time_s: float            # compute_s + comm_s + overhead_s: busy time per micro-batch
    dp_allreduce_s: float          # after the last micro-batch (incl. its per-bucket latency)
    optimizer_step_s: float
    memory: MemoryBreakdown
    capacity_bytes: float
    latency_s: float = 0.0         # per micro-batch, the per-message latency inside tp_comm_s and comm_s
    shard_comm_s: float = 0.0      # the part of compute_s ZeRO-3's parameter traffic leaves exposed
    host_s: float = 0.0            # the part of compute_s the host's kernel issue adds beyond the GPU's time
    tp_latency_s: float = 0.0      # the part of tp_comm_s that is NCCL's per-call latency
    time_source: str = ""          # where its layer times come from on `gpu` (costmodel/time_sources.py)

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        return {
            "stage": self.index, "first_layer": self.first_layer, "last_layer": self.last_layer,
            "gpu": self.gpu, "gpu_types": list(self.gpu_types), "time_source": self.time_source,
            "compute_s": self.compute_s, "tp_comm_s": self.tp_comm_s, "shard_comm_s": self.shard_comm_s,
            "host_s": self.host_s, "tp_latency_s": self.tp_latency_s,
            "comm_s": self.comm_s,
            "overhead_s": self.overhead_s, "latency_s": self.latency_s,
            "stage_time_s": self.stage_time_s, "dp_allreduce_s": self.dp_allreduce_s,
            "optimizer_step_s": self.optimizer_step_s,
            "memory_bytes": self.memory.total_bytes, "capacity_bytes": self.capacity_bytes,
            "fits_memory": self.fits, "memory": self.memory.to_dict(),
        }


@dataclass(frozen=True)
class Prediction:
    strategy: Strategy              # with partition and placement filled in
    num_micro_batches: int
    iteration_time_s: float
    samples_per_s: float
    steady_state_s: float           # (B - 1) x the bottleneck stage's time
    fill_drain_s: float             # one micro-batch through every stage and boundary
    dp_and_optimizer_s: float       # the slowest stage's all-reduce + optimizer step
    dp_allreduce_s: float           # the slowest stage's all-reduce alone
    bubble_fraction: float          # share of the pipeline time a bottleneck GPU sits idle
    fits_memory: bool
    peak_memory_bytes: float
    stages: tuple[StagePrediction, ...]
    reason: str | None = None       # why it does not fit
    cost_per_hour_usd: float | None = None            # see pricing.py; None: a used node has no price
    cost_per_million_tokens_usd: float | None = None  # per million samples for a model without tokens
    iteration_overhead_s: float = 0.0   # the fixed cost of every iteration
    virtual_stages: int = 1         # interleaved chunks per pipeline rank (fill and drain / v)
    # Under uneven batch shares (shares.py): each replica's pipeline time; the stages carry the slowest's.
    replica_times_s: tuple[float, ...] | None = None

    def time_terms(self) -> dict[str, float]:
        """The iteration time as named terms that add up to it: each is what that kind of work
        costs on the critical path, the bottleneck stage's share in the steady state plus every
        stage's in the fill and drain, and the slowest stage's tail."""
        B, v = self.num_micro_batches, self.virtual_stages
        b = self.stages[self.bottleneck_stage]
        tail = max(self.stages, key=lambda st: st.dp_allreduce_s + st.optimizer_step_s)

        def path(per_stage) -> float:
            return (B - 1) * per_stage(b) + sum(per_stage(st) for st in self.stages) / v

        # Under HSDP the tail's all-reduce is the gradient shard's across replicas (terms/sharding.py).
        allreduce = "HSDP replica all-reduce" if self.strategy.hsdp_shard else "data-parallel all-reduce"
        return {
            "compute": path(lambda st: st.compute_s - st.tp_comm_s - st.shard_comm_s - st.host_s),
            "kernel issue (host)": path(lambda st: st.host_s),
            "tensor-parallel comm": path(lambda st: st.tp_comm_s - st.tp_latency_s),
            "tensor-parallel latency": path(lambda st: st.tp_latency_s),
            "ZeRO-3 all-gather/reduce-scatter": path(lambda st: st.shard_comm_s),
            "pipeline sends": path(lambda st: st.comm_s / 2) + (B - 1) * b.comm_s / 2,
            "pipeline engine overhead": path(lambda st: st.overhead_s),
            allreduce: tail.dp_allreduce_s,
            "optimizer step": tail.optimizer_step_s,
            "per-iteration overhead": self.iteration_overhead_s,
        }

    @property
    def latency_s(self) -> float:
        """How much of the iteration is per-message latency (alpha terms) on the critical path."""
        B, v = self.num_micro_batches, self.virtual_stages
        b = self.stages[self.bottleneck_stage]
        return (B - 1) * b.latency_s + sum(st.latency_s for st in self.stages) / v

    @property
    def tightest_stage(self) -> "StagePrediction":
        """The stage using the largest share of its own GPUs' memory."""
        return max(self.stages, key=lambda st: st.memory.total_bytes / st.capacity_bytes)

    @property
    def bottleneck_stage(self) -> int:
        return max(range(len(self.stages)), key=lambda s: self.stages[s].stage_time_s)

    def to_dict(self) -> dict:
        out = self.strategy.to_dict()
        out.update({
            "num_micro_batches": self.num_micro_batches,
            "iteration_time_s": self.iteration_time_s, "samples_per_s": self.samples_per_s,
            "fits_memory": self.fits_memory, "peak_memory_bytes": self.peak_memory_bytes,
            "dp_allreduce_s": self.dp_allreduce_s, "bubble_fraction": self.bubble_fraction,
            "steady_state_s": self.steady_state_s, "fill_drain_s": self.fill_drain_s,
            "dp_and_optimizer_s": self.dp_and_optimizer_s,
            "iteration_overhead_s": self.iteration_overhead_s, "latency_s": self.latency_s,
            "time_terms": self.time_terms(),
        })
        out.update({"gpus_used": self.strategy.num_gpus,
                    "idle": [{"group": group, "nodes": nodes} for group, nodes in self.strategy.idle or ()],
                    "cost_per_hour_usd": self.cost_per_hour_usd,
                    "cost_per_million_tokens_usd": self.cost_per_million_tokens_usd})
        if self.replica_times_s is not None:
            out["replica_times_s"] = list(self.replica_times_s)
        if self.reason:
            out["reason"] = self.reason
        out["stages"] = [stage.to_dict() for stage in self.stages]
        return out


def memory_terms_text(stage: StagePrediction) -> str:
    """One stage's memory by term (memory.MemoryBreakdown.terms, those above zero):
    'stage 3 (V100): 11.5 GiB of 15.8 GiB: weights 240 MiB, ..., CUDA context 1.03 GiB'."""
    terms = ", ".join(f"{name} {format_bytes(value)}" for name, value in stage.memory.terms().items() if value > 0)
    return (f"stage {stage.index} ({stage.gpu}): {format_bytes(stage.memory.total_bytes)} of "
            f"{format_bytes(stage.capacity_bytes)}: {terms}")


def memory_reason(stage: StagePrediction) -> str:
    return over_capacity(stage.index, stage.first_layer, stage.last_layer, stage.gpu,
                         stage.memory.total_bytes, stage.capacity_bytes)


def over_capacity(stage: int, first_layer: int, last_layer: int, gpu: str, need: float, capacity: float) -> str:
    return (f"stage {stage} (layers {first_layer}-{last_layer}, {gpu}) needs {format_bytes(need)} of "
            f"{format_bytes(capacity)}: {format_bytes(need - capacity)} over")
