"""The cost model: predicted iteration time of one strategy on one cluster.

For a candidate (tp, pp, dp, micro-batch size b, placement) with B micro-batches, stage s on the
GPUs that serve it, and a partition of the layers into contiguous stages:

  C_s   compute of stage s per micro-batch, forward + backward: per layer 3 x forward (4 x with full
        recomputation), forward = measured time scaled to b where a measurement exists for that GPU
        and tp, else FLOPs / (tp x peak x efficiency(kernel size)) with a memory-bandwidth floor;
        plus the Megatron tensor-parallel all-reduces (2 forward, 2 backward per block) over the
        stage's slowest tensor-parallel link where the time was not measured. A stage served by two
        GPU types runs at the slower one's pace.
  c_k   pipeline send across boundary k per micro-batch: activation forward + gradient backward,
        b x output bytes of the boundary layer each way, split over the tp ranks that send at once,
        over the slowest (NIC-shared) link.
  tau_s = C_s + c_(s-1) + c_s: a stage's busy time per micro-batch (sends block).
  E_s   after the last micro-batch: data-parallel ring all-reduce of the stage's gradients,
        2 (dp-1)/dp x bytes over the ring's slowest link, plus the memory-bound optimizer step.

  iteration_time = (B - 1) max_s tau_s  +  sum_s C_s + sum_k c_k  +  max_s E_s
                   steady state            fill and drain            data parallel + optimizer

The same arrays serve `evaluate` and the partition search, so a searched plan re-evaluates exactly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from amp_tui.core.spec.hardware import GPU
from amp_tui.core.spec.knobs import Knobs, default_knobs
from amp_tui.core.base.lazy import cached_property
from amp_tui.core.costmodel.memory import (MemoryBreakdown, StateBytes, micro_batches_in_flight,
                                 optimizer_traffic_per_param, state_bytes_per_param, zero3_gathered_params)
from amp_tui.core.costmodel.placement import Layout, Nodes, build_layout
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy
from amp_tui.core.costmodel.terms import compute as compute_terms
from amp_tui.core.costmodel.terms import context as context_terms
from amp_tui.core.costmodel.terms import sharding
from amp_tui.core.base.units import format_bytes

# Gradients are all-reduced in buckets of this size (PyTorch DDP's 25 MB; Megatron's are similar):
# each bucket pays the ring's per-message latency.
DP_BUCKET_BYTES = 25e6


_SHARED_MODELS = 8     # (model, training, techniques, calibration) whose layer times are kept
_shared: dict[tuple, tuple[object, dict]] = {}
_shared_lock = threading.Lock()


def _shared_layer_times(model, training, knobs, calibration) -> dict:
    """The layer-time cache of one model, training, set of techniques and calibration, shared by
    every cost model built for them (the newest few are kept). Keyed by the model's identity, and
    holding the model so that the identity cannot be reused while the entry lives."""
    key = (id(model), training, knobs, calibration)
    with _shared_lock:        # the dashboard searches in a worker thread while the UI evaluates
        entry = _shared.pop(key, None)
        if entry is None or entry[0] is not model:
            entry = (model, {})
        _shared[key] = entry
        while len(_shared) > _SHARED_MODELS:
            del _shared[next(iter(_shared))]
    return entry[1]


def clear_shared_caches() -> None:
    """Forget every shared layer-time cache (the benchmark times each search from cold)."""
    with _shared_lock:
        _shared.clear()


class CostModel:
    """Per-scenario caches of layer times and layouts; candidates are built from these."""

    def __init__(self, scenario: Scenario, knobs: Knobs | None = None):
        self.scenario = scenario
        self.model = scenario.model
        self.training = scenario.training
        self.params = scenario.params
        self.knobs = knobs or default_knobs(scenario.training)
        self.gpus: list[GPU] = [group.gpu for group in scenario.cluster.nodes]
        # Groups with the same GPU in the same kind of node share layer times (a measured tp > 1
        # time is split by the node's link, and expert all-to-alls run over its GPUs and links),
        # and so do the cost models of one model and training on other clusters (the parts of a
        # cluster the idle-node search tries): the cache is keyed by the kind of node.
        self._node_kind = [(g.gpu, g.gpus_per_node, g.intra_node_bandwidth, g.intra_link_class,
                            g.inter_node_bandwidth, g.inter_link_class) for g in scenario.cluster.nodes]
        self._layer_times = _shared_layer_times(self.model, self.training, self.knobs, scenario.calibration)
        self._layouts: dict[tuple, Layout] = {}
        self._nodes: dict[tuple[int, ...], Nodes] = {}   # per placement order, shared by its layouts
        self._stage_links: dict[tuple, object] = {}      # build_layout's stage and boundary terms, every order's
        cols = self.model.columns
        tokens, width = compute_terms.layer_shapes(self.model, self.training.bytes_per_element)
        self._work_per_sample = tokens * width    # kernel size at tp 1, micro-batch 1 (shapes as inferred)
        self._output = cols["output_bytes"]
        # Parameters per GPU before tp: expert parallelism keeps 1/ep of each MoE layer's experts.
        self._params = cols["params"] - cols["expert_params"] * (1.0 - 1.0 / self.knobs.ep)
        self._profiles = {}  # per-GPU / per-tp layer arrays: measured times, calibration, activations
        self.floor_cache: dict = {}  # the search's bound and memory terms shared between candidates

    # -- layer times ------------------------------------------------------------------------
    def _measured(self, gpu_name: str, tp: int) -> np.ndarray:
        key = (gpu_name, tp)
        if key not in self._profiles:
            copies = self.model.copy_index
            self._profiles[key] = np.array(
                [t if (t := layer.profiled_time(gpu_name, tp, int(c))) is not None else np.nan
                 for layer, c in zip(self.model.layers, copies)])
        return self._profiles[key]

    def _analytic_forward(self, gpu: GPU, tp: int, mbs: int | np.ndarray) -> np.ndarray:
        return compute_terms.analytic_forward(self.model, gpu, self.training.precision, self.params,
                                              tp, self.knobs.cp, self.knobs.sequence_parallel, mbs,
                                              self.training.attention_kernel, self.training.fp8_scaling)

    def _calibration(self, group: int) -> np.ndarray:
        """Per layer, measured / analytic forward time at tp = 1, micro-batch 1 on this GPU (1 where
        not measured): applied to the analytic time at other tp degrees, it keeps the
        measurement's efficiency."""
        key = ("calibration", self._node_kind[group])
        if key not in self._profiles:
            gpu = self.gpus[group]
            base = self._measured(gpu.name, 1)
            analytic = self._analytic_forward(gpu, 1, 1)
            usable = ~np.isnan(base) & (analytic > 0)
            self._profiles[key] = np.where(usable, np.where(usable, base, 1.0) / np.where(usable, analytic, 1.0), 1.0)
        return self._profiles[key]

    def layer_times(self, group: int, tp: int, mbs: int) -> tuple[np.ndarray, np.ndarray]:
        """(compute seconds, tensor-parallel ring bytes) per layer per micro-batch, forward + backward,
        on node group `group`'s GPU. The bytes still need the stage's link: see `stage_layer_times`."""
        key = (self._node_kind[group], tp, mbs)
        if key not in self._layer_times:
            self.prepare_layer_times(group, tp, [mbs])
        return self._layer_times[key]

    def prepare_layer_times(self, group: int, tp: int, micro_batch_sizes: list[int]) -> None:
        """Compute `layer_times` for several micro-batch sizes in one vectorised pass (rows are
        micro-batch sizes; every element is computed as for one size alone)."""
        kind = self._node_kind[group]
        todo = [m for m in dict.fromkeys(micro_batch_sizes) if (kind, tp, m) not in self._layer_times]
        if not todo:
            return
        mbs = np.array(todo, dtype=np.float64)[:, None]
        gpu = self.gpus[group]
        passes = self.knobs.forward_passes + 2.0     # and the backward's two
        measured = self._measured(gpu.name, tp)
        have = ~np.isnan(measured)
        analytic = self._analytic_forward(gpu, tp, mbs)
        if tp > 1:
            analytic = analytic * self._calibration(group)
        if have.any():
            # A measured time scales to b samples like the efficiency model: fixed kernel overheads
            # are paid once per micro-batch, so larger micro-batches run more efficiently.
            work1 = self._work_per_sample / tp
            kappa = np.where(work1 > 0, gpu.half_work / np.where(work1 > 0, work1, 1.0), 0.0)
            known = np.where(have, measured, 0.0)
            forward = np.where(have, known * (mbs + kappa) / (1.0 + kappa), analytic)
            if tp > 1:
                split, measured_comm = self._split_measured(group, tp, known, analytic, mbs, forward)
                forward = np.where(have, split, forward)
                measured_comm = np.where(have, measured_comm, 0.0)
        else:
            forward = analytic
        comm_passes = passes - 1.0  # forward and backward all-reduces, forward again under recompute
        ring = 2.0 * (tp - 1) / tp
        tp_bytes = np.where(have, 0.0, self.model.columns["tp_comm_bytes"] * (comm_passes * mbs * ring / self.knobs.cp))
        # Backward runs twice the forward's compute but only as many all-reduces: a measured
        # time's communication counts once per pass that communicates, not three times.
        # A measured forward's backward takes params `backward_ratio` forwards (2 by FLOPs).
        measured_passes = passes - 2.0 + self.params("backward_ratio")
        compute = np.where(have, measured_passes, passes) * forward \
            + (comm_passes * measured_comm if have.any() and tp > 1 else 0.0)
        if not have.all():   # flash attention's backward recomputes the scores (analytic layers only)
            compute = compute + np.where(have, 0.0, compute_terms.flash_backward_time(
                self.model, gpu, self.params, tp, self.knobs.cp, mbs, self.training.attention_kernel))
        if self.knobs.ep > 1:    # tokens to their experts and back: forward, backward (and recomputed forward)
            compute = compute + comm_passes * self._expert_alltoall(group, tp) * mbs
        if self.knobs.recompute == "selective":   # attention scores and softmax run forward again
            compute = compute + compute_terms.selective_recompute_time(self.model, gpu, self.training, self.params,
                                                                       self.knobs, tp, mbs, forward)
        for row, m in enumerate(todo):
            self._layer_times[(kind, tp, m)] = (compute[row], tp_bytes[row])

    def _expert_alltoall(self, group: int, tp: int) -> np.ndarray:
        """Per layer, seconds of one pass's all-to-alls (dispatch + combine) per sample, over an
        expert-parallel group laid out on this group's nodes (terms/experts.py)."""
        from amp_tui.core.costmodel.terms.experts import alltoall_bytes_per_gpu, alltoall_seconds

        node = self.scenario.cluster.nodes[group]
        ep, cp = self.knobs.ep, self.knobs.cp
        per_node = max(node.gpus_per_node // (tp * cp), 1)
        seconds_per_byte = alltoall_seconds(
            1.0, ep, min(ep, per_node), node.gpus_per_node,
            node.intra_node_bandwidth * self.params("link_efficiency", node.intra_link_class),
            node.inter_node_bandwidth * self.params("link_efficiency", node.inter_link_class))
        return alltoall_bytes_per_gpu(self.model.columns["moe_alltoall_bytes"], 1, tp, cp) * seconds_per_byte

    def _split_measured(self, group: int, tp: int, measured: np.ndarray, analytic: np.ndarray,
                        mbs: np.ndarray, whole: np.ndarray) -> np.ndarray:
        """A layer time measured at tp > 1 and micro-batch 1 holds compute and the tensor-parallel
        all-reduces, which scale differently: the compute is the tp = 1 measurement carried to this
        tp by the analytic model (`analytic`, per micro-batch size), the rest is communication,
        paid as one latency per micro-batch plus the bytes of each sample over the node's link.
        Scaling the whole measurement with the micro-batch would multiply a latency-bound
        all-reduce by the micro-batch size. Returns (compute, communication) per forward pass.
        Layers without a tp = 1 measurement keep `whole`, the measurement scaled by the efficiency
        model, as compute."""
        base = self._measured(self.gpus[group].name, 1)
        compute1 = self._analytic_forward(self.gpus[group], tp, 1) * self._calibration(group)
        compute_share = np.where(compute1 > 0, np.minimum(measured, compute1) / np.where(compute1 > 0, compute1, 1.0), 0.0)
        comm1 = np.maximum(measured - compute1, 0.0)
        node = self.scenario.cluster.nodes[group]
        bandwidth = node.intra_node_bandwidth * self.params("link_efficiency", node.intra_link_class)
        per_sample = np.minimum(comm1, self.model.columns["tp_comm_bytes"] * (2.0 * (tp - 1) / tp) / bandwidth)
        without_base = np.isnan(base)
        compute = np.where(without_base, whole, compute_share * analytic)
        return compute, np.where(without_base, 0.0, (comm1 - per_sample) + per_sample * mbs)

    @cached_property
    def tp_exposed(self) -> float:
        """The share of a layer's tensor-parallel communication left on its critical path: all of
        it, or what overlapping it with the GEMMs leaves (training.tp_comm_overlap: the
        collectives run in chunks beside the GEMMs they feed). Floors use it too."""
        return 1.0 - self.params("tp_overlap") if self.training.tp_comm_overlap else 1.0

    @cached_property
    def tp_messages(self) -> np.ndarray:
        """Per layer per sample-independent micro-batch: tensor-parallel collectives (each a ring
        of 2 (tp - 1) steps): a Megatron block all-reduces twice per pass, another layer that
        communicates once; forward, backward, and forward again under full recomputation."""
        cols = self.model.columns
        kinds = np.array([layer.kind == "block" for layer in self.model.layers])
        per_pass = np.where(cols["tp_comm_bytes"] > 0, np.where(kinds, 2.0, 1.0), 0.0)
        return per_pass * (self.knobs.forward_passes + 1.0)

    def activation_arrays(self, tp: int) -> tuple[np.ndarray, np.ndarray]:
        """Per sample of a micro-batch, per GPU at this tp: (prefix sums of the activation bytes each
        layer keeps for backward, each layer's transient peak). Full recomputation keeps only each
        layer's input, and recomputes one layer's full activations at a time."""
        key = ("activations", tp)
        if key not in self._profiles:
            kept, peak = compute_terms.activation_terms(self.model, tp, self.knobs, self.training)
            grow = 1.0 + self.params("memory_fragmentation")
            self._profiles[key] = (np.concatenate([[0.0], np.cumsum(kept)]) * grow, peak * grow)
        return self._profiles[key]

    def ring_steps(self, group: int, tp: int, mbs: int) -> tuple[np.ndarray, np.ndarray]:
        """Per layer on node group `group`'s GPU: ring attention's key-value bytes per step and one
        step's forward attention seconds (terms/context.py)."""
        key = ("ring", self._node_kind[group], tp, mbs)
        if key not in self._profiles:
            self._profiles[key] = context_terms.ring_steps(
                self.model, self.gpus[group], self.training.precision, self.params, tp, self.knobs.cp, mbs,
                self.training.attention_kernel)
        return self._profiles[key]

    def stage_times(self, groups: tuple[int, ...], tp_seconds_per_byte: float, tp: int,
                    mbs: int, tp_latency: float = 0.0, shard: tuple[float, float] = (0.0, 0.0),
                    cp_link: tuple[float, float] = (0.0, 0.0)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per layer on a stage served by node `groups` with this tensor-parallel link (s/byte and
        per-message latency): (time, its communication part) on the slowest serving GPU type, and
        prefix sums of the time, and the part of the time that is ZeRO-3's exposed parameter traffic.
        `shard` (s/byte, latency) prices ZeRO-3's per-layer parameter all-gathers and gradient
        reduce-scatters (on the HSDP shard ring under hybrid sharding), overlapped with the layer's
        compute. `cp_link` (s/byte, latency) is the context-parallel ring's: what ring attention's
        sends leave exposed counts as communication (terms/context.py)."""
        key = ("stage", groups, tp_seconds_per_byte, tp, mbs, tp_latency, shard, cp_link)
        if key not in self._profiles:
            times = np.zeros(self.model.num_layers)
            tp_part = np.zeros(self.model.num_layers)
            shard_part = np.zeros(self.model.num_layers)
            alpha = self.tp_messages * (2.0 * (tp - 1) * tp_latency) if tp > 1 else 0.0
            collectives = compute_terms.zero3_collectives(self.training.framework, self.knobs.recompute)
            sharded = compute_terms.zero3_layer_time(self._params, self.training.bytes_per_element, tp, shard,
                                                     collectives) if shard[0] else None
            for g in groups:
                compute, tp_bytes = self.layer_times(g, tp, mbs)
                # A measured time already holds its all-reduces, latency included (tp_bytes = 0).
                comm = (tp_bytes * tp_seconds_per_byte + np.where(tp_bytes > 0, alpha, 0.0)) * self.tp_exposed
                if self.knobs.cp > 1:
                    comm = comm + context_terms.exposed_ring_time(
                        *self.ring_steps(g, tp, mbs), self.knobs.cp, *cp_link,
                        forward_passes=self.knobs.forward_passes)
                total = compute + comm
                exposed = 0.0
                if sharded is not None:    # prefetched: the layer waits only for what compute does not hide
                    exposed = np.maximum(sharded - compute, 0.0) + shard[1] * collectives
                    total = total + exposed
                slower = total > times
                times = np.where(slower, total, times)
                tp_part = np.where(slower, comm, tp_part)
                shard_part = np.where(slower, exposed, shard_part)
            self._profiles[key] = (times, tp_part, np.concatenate([[0.0], np.cumsum(times)]), shard_part)
        return self._profiles[key]

    def memory_arrays(self, tp: int, pp: int, mbs: int, num_micro_batches: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """See Candidate.memory_arrays."""
        key = ("memory", tp, pp, mbs, num_micro_batches)
        if key not in self._profiles:
            per_micro_batch = ("activations", tp, mbs)
            if per_micro_batch not in self._profiles:
                prefix, peak = self.activation_arrays(tp)
                peak = peak * mbs
                if self.knobs.zero_stage >= 3:
                    peak = peak + zero3_gathered_params(self._params / tp, self.training.framework) \
                        * self.training.bytes_per_element
                self._profiles[per_micro_batch] = (prefix * mbs, peak)
            in_flight = ("in flight", pp, num_micro_batches)
            if in_flight not in self._profiles:
                schedule = self.training.schedule
                counts = [micro_batches_in_flight(schedule, s, pp, num_micro_batches, self.knobs.virtual_stages)
                          for s in range(pp)]
                self._profiles[in_flight] = np.array(counts, dtype=np.float64)
            self._profiles[key] = (*self._profiles[per_micro_batch], self._profiles[in_flight])
        return self._profiles[key]

    def layout(self, tp: int, pp: int, dp: int, order: tuple[int, ...]) -> Layout:
        key = (tp, pp, dp, order)
        if key not in self._layouts:
            if order not in self._nodes:
                self._nodes[order] = Nodes(self.scenario.cluster, order, self.params)
            # Context-parallel ranks sit beside the tensor-parallel ones (Megatron's order
            # tp-cp-dp-pp): the layout places tp x cp ranks per replica of a stage.
            self._layouts[key] = build_layout(self.scenario.cluster, tp * self.knobs.cp, pp, dp, order,
                                              self._nodes[order], self._stage_links, cp=self.knobs.cp)
        return self._layouts[key]

    def hsdp_links(self, tp: int, pp: int, dp: int, order: tuple[int, ...]) -> sharding.HsdpLinks:
        """The shard and replica rings of a layout under hybrid sharding (terms/sharding.py)."""
        key = ("hsdp", tp, pp, dp, order, self.knobs.hsdp_shard)
        if key not in self._layouts:
            self.layout(tp, pp, dp, order)
            self._layouts[key] = sharding.hsdp_links(self._nodes[order], tp * self.knobs.cp, pp, dp,
                                                     self.knobs.hsdp_shard)
        return self._layouts[key]

    def candidate(self, tp: int, pp: int, dp: int, mbs: int, order: tuple[int, ...]) -> "Candidate":
        return Candidate(self, self.layout(tp, pp, dp, order), mbs)


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

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        return {
            "stage": self.index, "first_layer": self.first_layer, "last_layer": self.last_layer,
            "gpu": self.gpu, "gpu_types": list(self.gpu_types),
            "compute_s": self.compute_s, "tp_comm_s": self.tp_comm_s, "shard_comm_s": self.shard_comm_s,
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
            "compute": path(lambda st: st.compute_s - st.tp_comm_s - st.shard_comm_s),
            "tensor-parallel comm": path(lambda st: st.tp_comm_s),
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


class Candidate:
    """One (tp, pp, dp, micro-batch size, placement): every array the partition search needs.

    Stage-indexed arrays have pp rows; layer-indexed ones L columns; prefix sums L + 1 columns.
    """

    def __init__(self, cost: CostModel, layout: Layout, mbs: int):
        self.cost = cost
        self.layout = layout
        self.mbs = mbs
        training = cost.training
        self.knobs = cost.knobs
        self.cp = cost.knobs.cp
        self.tp, self.pp, self.dp = layout.tp // self.cp, layout.pp, layout.dp
        self.num_layers = cost.model.num_layers
        self.num_micro_batches = training.global_batch_size // (self.dp * mbs)
        # ZeRO shards over every rank holding the same parameters: data- and context-parallel ones,
        # or under HSDP the shard group's (terms/sharding.py).
        self.hsdp = self.knobs.hsdp_shard if self.knobs.zero_stage >= 3 else 0
        self.shard_group = sharding.sharding_group(self.dp, self.cp, self.hsdp)
        self.state = state_bytes_per_param(training, self.shard_group, self.knobs.zero_stage, self.pp)
        params = cost.params
        self.micro_batch_overhead = params("micro_batch_overhead_s")

    # Seconds per (parameter / tp) of stage s for the all-reduce and the optimizer step, and both.
    @cached_property
    def _hsdp_allreduce(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stage: HSDP's replica all-reduce of the gradient shard, per parameter over tp, and
        its last bucket's latency (terms/sharding.py)."""
        layout = self.layout
        links = self.cost.hsdp_links(layout.tp // self.cp, self.pp, self.dp, layout.order)
        return sharding.replica_allreduce_coef(links, self.state.gradients, DP_BUCKET_BYTES)

    @cached_property
    def dp_coef(self) -> np.ndarray:
        if self.hsdp:
            return self._hsdp_allreduce[0]
        if self.knobs.zero_stage >= 3:    # gradients are reduce-scattered layer by layer (stage times)
            return np.zeros(self.pp)
        grad_bytes = self.state.weights
        latency = self.layout.dp_allreduce_latency * (grad_bytes / DP_BUCKET_BYTES)    # one per bucket
        return grad_bytes * self.layout.dp_allreduce_seconds_per_byte + latency

    @cached_property
    def opt_coef(self) -> np.ndarray:
        return optimizer_traffic_per_param(self.cost.training, self.shard_group,
                                           self.knobs.zero_stage) / self.layout.stage_memory_bandwidth

    @cached_property
    def e_coef(self) -> np.ndarray:
        return self.dp_coef + self.opt_coef

    @cached_property
    def last_bucket_latency(self) -> np.ndarray:
        """Per stage, the all-reduce latency paid whatever the stage holds: one bucket's."""
        if self.hsdp:
            return self._hsdp_allreduce[1]
        if self.knobs.zero_stage >= 3:
            return np.zeros(self.pp)
        return self.layout.dp_allreduce_latency

    @property
    def iteration_overhead(self) -> float:
        return self.cost.params("iteration_overhead_s")

    @cached_property
    def e_const(self) -> np.ndarray:
        """Per stage, what its tail E_s costs whatever it holds (the partition search's view,
        with the iteration's fixed cost folded in)."""
        return self.iteration_overhead + self.last_bucket_latency

    @cached_property
    def hidden_share(self) -> float:
        """Share of a stage's compute per micro-batch behind which the gradient all-reduce runs:
        the framework's overlap (params `dp_overlap`) of the last micro-batch's backward pass
        (2 of 3 passes, 3 of 4 under full recomputation). HSDP's replica all-reduce overlaps the
        same way; plain ZeRO-3 has none."""
        if self.knobs.zero_stage >= 3 and not self.hsdp:
            return 0.0
        return backward_overlap(self.cost)

    def exposed_allreduce(self, allreduce: np.ndarray, compute: np.ndarray, last: np.ndarray) -> np.ndarray:
        return exposed_allreduce(allreduce, compute, last, self.hidden_share)

    @cached_property
    def tail_floor(self) -> float:
        """A lower bound on max_s E_s over every partition: with P_s the stage's parameters,
        summing to P, max_s e_s P_s >= P / sum_s (1 / e_s), and every E_s has its constant.
        Where backward hides part of the all-reduce, only the optimizer step is sure."""
        coef = self.e_coef if not self.hidden_share else self.opt_coef
        base = float(self.param_prefix[-1]) / float(np.sum(1.0 / coef)) if np.all(coef > 0) else 0.0
        return base + (float(self.e_const.min()) if not self.hidden_share else self.iteration_overhead)

    @cached_property
    def stage_layer_times(self) -> tuple[np.ndarray, np.ndarray]:
        """(time, tensor-parallel part) per stage per layer: the slowest serving GPU type's."""
        rows = self._stage_rows
        return np.array([row[0] for row in rows]), np.array([row[1] for row in rows])

    @cached_property
    def stage_shard_times(self) -> np.ndarray:
        """(pp, L): per stage per layer, the exposed ZeRO-3 parameter traffic inside its time."""
        return np.array([row[3] for row in self._stage_rows])

    @cached_property
    def time_prefix(self) -> np.ndarray:
        """(pp, L + 1): prefix sums of each stage's per-layer times."""
        return np.array([row[2] for row in self._stage_rows])

    @cached_property
    def stage_hardware(self) -> list[tuple]:
        """Per stage, what its layer times depend on beside tp and the micro-batch size: serving
        groups, tensor-parallel link (s/byte, latency), ZeRO-3 sharding link (s/byte, latency),
        context-parallel ring link (s/byte, latency)."""
        layout = self.layout
        shard = [(0.0, 0.0)] * self.pp
        if self.hsdp:
            shard = sharding.shard_ring(self.cost.hsdp_links(self.tp, self.pp, self.dp, layout.order), self.hsdp)
        elif self.knobs.zero_stage >= 3 and self.dp * self.cp > 1:
            per_stage = self.dp * layout.tp
            shard = [sharding.zero3_ring(self.cost._nodes[layout.order], np.arange(s * per_stage, (s + 1) * per_stage),
                                         float(spb), float(lat), self.dp, self.cost.training.framework)
                     for s, (spb, lat) in enumerate(zip(layout.dp_seconds_per_byte, layout.dp_latency))]
        return [(groups, float(spb), float(lat), sh, (float(cp_spb), float(cp_lat)))
                for groups, spb, lat, sh, cp_spb, cp_lat in
                zip(layout.stage_groups, layout.stage_tp_seconds_per_byte, layout.stage_tp_latency, shard,
                    layout.stage_cp_seconds_per_byte, layout.stage_cp_latency)]

    @cached_property
    def _stage_rows(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        return [self.cost.stage_times(groups, spb, self.tp, self.mbs, lat, shard, cp_link)
                for groups, spb, lat, shard, cp_link in self.stage_hardware]

    @cached_property
    def cut_unit(self) -> np.ndarray:
        """(L + 1,): bytes sent per micro-batch, both directions, across a boundary after layer
        j - 1 (column 0 unused); times a boundary's seconds per byte, its send time. Each of the
        tp x cp ranks of a replica sends its own 1/(tp cp) share at once: its sequence shard under
        sequence parallelism; without it, Megatron's scatter/gather (Narayanan et al. 2021, 4.1)
        and DeepSpeed's partitioned pipeline sends split the activation over the tensor-parallel
        ranks and all-gather it on the other side, over the node's own links."""
        return (2.0 * self.mbs * self.knobs.virtual_stages / (self.cp * self.tp)
                * np.concatenate([[0.0], self.cost._output]))

    @cached_property
    def cut_latency(self) -> np.ndarray:
        """(pp - 1,): per micro-batch, the latency of boundary k's sends: one message each way,
        v of them with v interleaved model chunks per pipeline rank."""
        return 2.0 * self.knobs.virtual_stages * self.layout.boundary_latency

    def cut_cost(self, boundary: np.ndarray, after: np.ndarray) -> np.ndarray:
        """Pipeline send time per micro-batch of boundaries `boundary` following layers `after` - 1
        (arrays broadcast)."""
        return self.cut_unit[after] * self.layout.boundary_seconds_per_byte[boundary] + self.cut_latency[boundary]

    @cached_property
    def cheapest_cut(self) -> np.ndarray:
        """(pp - 1,): per boundary, its least send time per micro-batch wherever it falls (after
        layer 1 ... L - 1). The rounding of u x b + c only grows with u (b >= 0), so the least
        bytes give it exactly, with no (pp - 1, L + 1) table (4 MB per candidate of 512 stages)."""
        if self.pp == 1:
            return np.zeros(0)
        return self.cut_cost(np.arange(self.pp - 1), int(np.argmin(self.cut_unit[1:-1])) + 1)

    @cached_property
    def param_prefix(self) -> np.ndarray:
        """(L + 1,): prefix sums of parameters per GPU (divided by tp)."""
        return np.concatenate([[0.0], np.cumsum(self.cost._params)]) / self.tp

    @cached_property
    def memory_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(activation prefix per micro-batch per GPU, per-layer transient peak, in-flight per stage)."""
        return self.cost.memory_arrays(self.tp, self.pp, self.mbs, self.num_micro_batches)

    @cached_property
    def expert_state(self) -> StateBytes:
        """Bytes per expert parameter on one GPU: ZeRO shards the experts over their own
        data-parallel group, the shard group's ranks that hold the same experts (1/ep of them;
        Megatron's expert data parallelism), not over the whole shard group."""
        ep = self.knobs.ep
        if ep <= 1:
            return self.state
        return state_bytes_per_param(self.cost.training, max(self.shard_group // ep, 1), self.knobs.zero_stage,
                                     self.pp)

    @cached_property
    def expert_prefix(self) -> np.ndarray:
        """(L + 1,): prefix sums of the expert parameters one GPU keeps (1/ep of them, / tp)."""
        experts = self.cost.model.columns["expert_params"] / (self.knobs.ep * self.tp)
        return np.concatenate([[0.0], np.cumsum(experts)])

    @cached_property
    def state_prefix(self) -> np.ndarray:
        """(L + 1,): prefix sums of the weight, gradient and optimizer bytes one GPU holds per layer."""
        if self.expert_state is self.state:
            return self.param_prefix * self.state.total
        experts = self.expert_prefix
        return (self.param_prefix - experts) * self.state.total + experts * self.expert_state.total

    def memory_terms(self, stages: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """(weights, gradients, optimizer state, activations, workspace) bytes per GPU of each
        segment [starts, ends) held by `stages`: the memory model's terms bar the reserve."""
        act_prefix, peak, in_flight = self.memory_arrays
        params = self.param_prefix[ends] - self.param_prefix[starts]
        experts = self.expert_prefix[ends] - self.expert_prefix[starts] if self.expert_state is not self.state else 0.0
        dense, state, expert_state = params - experts, self.state, self.expert_state
        pairs = np.column_stack([starts, ends]).ravel()
        workspace = np.maximum.reduceat(np.append(peak, 0.0), pairs)[::2]   # max over each segment
        return (dense * state.weights + experts * expert_state.weights,
                dense * state.gradients + experts * expert_state.gradients,
                dense * state.optimizer + experts * expert_state.optimizer,
                in_flight[stages] * (act_prefix[ends] - act_prefix[starts]), workspace)

    def stage_memory(self, s: int, i: int, j: int) -> MemoryBreakdown:
        """Memory per GPU of stage s holding layers [i, j)."""
        terms = self.memory_terms(np.array([s]), np.array([i]), np.array([j]))
        reserve = self.cost.training.runtime_reserve_bytes
        return MemoryBreakdown(*(float(term[0]) for term in terms), reserve_bytes=reserve)

    def _terms(self, partition: tuple[int, ...]) -> dict:
        """Every per-stage term of one partition as arrays over stages, and the iteration's three
        terms; `predict` and `quick_evaluate` both read them."""
        pp, B = self.pp, self.num_micro_batches
        bounds = np.concatenate([[0], np.cumsum(partition)]).astype(np.int64)
        starts, ends, stages = bounds[:-1], bounds[1:], np.arange(pp)
        compute = self.time_prefix[stages, ends] - self.time_prefix[stages, starts]
        cuts = self.cut_cost(np.arange(pp - 1), ends[:-1]) if pp > 1 else np.zeros(0)
        comm = np.zeros(pp)
        comm[:-1] += cuts
        comm[1:] += cuts
        params = self.param_prefix[ends] - self.param_prefix[starts]
        dp_allreduce = self.exposed_allreduce(self.dp_coef * params + self.last_bucket_latency, compute,
                                              self.last_bucket_latency)
        optimizer_step = self.opt_coef * params
        memory = self.memory_terms(stages, starts, ends)
        overhead = self.micro_batch_overhead
        busy = compute + comm + overhead
        v = self.knobs.virtual_stages
        return {
            "starts": starts, "ends": ends, "compute": compute, "comm": comm, "busy": busy,
            "dp_allreduce": dp_allreduce, "optimizer_step": optimizer_step, "memory": memory,
            "memory_total": sum(memory) + self.cost.training.runtime_reserve_bytes,
            "steady": (B - 1) * float(busy.max()),
            # Interleaving v chunks per rank fills and drains the pipeline v times faster.
            "fill": float(compute.sum() + cuts.sum() + pp * overhead) / v,
            "tail": float((dp_allreduce + optimizer_step).max()),
            "fixed": self.iteration_overhead,
        }

    def quick_evaluate(self, partition: tuple[int, ...]) -> tuple[float, int, float]:
        """(iteration time, fullest stage, its bytes over capacity): the same terms as `predict`
        without building a Prediction, for the many partitions the search only needs to rank."""
        t = self._terms(partition)
        over = t["memory_total"] - self.layout.stage_capacity
        fullest = int(np.argmax(over))
        return t["steady"] + t["fill"] + t["tail"] + t["fixed"], fullest, float(over[fullest])

    def strategy(self, partition: tuple[int, ...]) -> Strategy:
        return Strategy(self.tp, self.pp, self.dp, self.mbs, tuple(int(n) for n in partition), self.layout.order,
                        ep=self.knobs.ep if self.knobs.ep > 1 else None, hsdp_shard=self.hsdp or None,
                        **self.knobs.to_dict())

    def predict(self, partition: tuple[int, ...]) -> Prediction:
        """Every term of the cost and memory model for one partition (layers per stage)."""
        B = self.num_micro_batches
        t = self._terms(partition)
        _, tp_part = self.stage_layer_times
        gpus = self.cost.gpus
        reserve = self.cost.training.runtime_reserve_bytes
        stages = []
        columns = zip(t["starts"].tolist(), t["ends"].tolist(), t["compute"].tolist(), t["comm"].tolist(),
                      t["busy"].tolist(), t["dp_allreduce"].tolist(), t["optimizer_step"].tolist(),
                      zip(*(term.tolist() for term in t["memory"])), self.layout.stage_capacity.tolist(),
                      self.layout.stage_groups)
        latency = self._latency_per_stage(t["starts"], t["ends"])
        for s, row in enumerate(columns):
            i, j, compute, comm, busy, dp_allreduce, optimizer_step, memory, capacity, groups = row
            slowest = groups[0] if len(groups) == 1 else max(
                groups, key=lambda g: float(self.cost.layer_times(g, self.tp, self.mbs)[0][i:j].sum()))
            stages.append(StagePrediction(
                index=s, first_layer=i, last_layer=j - 1,
                gpu=gpus[slowest].name, gpu_types=tuple(dict.fromkeys(gpus[g].name for g in groups)),
                compute_s=compute, tp_comm_s=float(tp_part[s, i:j].sum()), comm_s=comm,
                shard_comm_s=float(self.stage_shard_times[s, i:j].sum()),
                overhead_s=self.micro_batch_overhead, stage_time_s=busy,
                dp_allreduce_s=dp_allreduce, optimizer_step_s=optimizer_step,
                memory=MemoryBreakdown(*memory, reserve_bytes=reserve), capacity_bytes=capacity,
                latency_s=float(latency[s]),
            ))
        bottleneck = float(t["busy"].max())
        steady, fill, tail = t["steady"], t["fill"], t["tail"]
        iteration = steady + fill + tail + t["fixed"]
        pipeline = steady + fill
        over = [stage for stage in stages if not stage.fits]
        reason = None
        if over:
            worst = max(over, key=lambda st: st.memory.total_bytes - st.capacity_bytes)
            reason = memory_reason(worst)
        return Prediction(
            strategy=self.strategy(partition), num_micro_batches=B,
            iteration_time_s=iteration, samples_per_s=self.cost.training.global_batch_size / iteration,
            steady_state_s=steady, fill_drain_s=fill, dp_and_optimizer_s=tail,
            dp_allreduce_s=float(t["dp_allreduce"].max()),
            bubble_fraction=max(0.0, (pipeline - B * bottleneck) / pipeline) if pipeline > 0 else 0.0,
            fits_memory=not over, peak_memory_bytes=max(stage.memory.total_bytes for stage in stages),
            stages=tuple(stages), reason=reason, iteration_overhead_s=t["fixed"],
            virtual_stages=self.knobs.virtual_stages,
        )

    def _latency_per_stage(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Per stage per micro-batch: tensor-parallel collectives' and pipeline sends' latency."""
        latency = np.zeros(self.pp)
        if self.tp > 1:
            for s, groups in enumerate(self.layout.stage_groups):
                # a layer measured on the stage's GPU holds its all-reduces, latency included
                _, tp_bytes = self.cost.layer_times(groups[0], self.tp, self.mbs)
                messages = np.where(tp_bytes > 0, self.cost.tp_messages, 0.0)[starts[s]:ends[s]].sum()
                latency[s] += messages * 2.0 * (self.tp - 1) * self.layout.stage_tp_latency[s]
        if self.pp > 1:
            latency[:-1] += self.cut_latency
            latency[1:] += self.cut_latency
        return latency


def memory_reason(stage: StagePrediction) -> str:
    return over_capacity(stage.index, stage.first_layer, stage.last_layer, stage.gpu,
                         stage.memory.total_bytes, stage.capacity_bytes)


def over_capacity(stage: int, first_layer: int, last_layer: int, gpu: str, need: float, capacity: float) -> str:
    return (f"stage {stage} (layers {first_layer}-{last_layer}, {gpu}) needs {format_bytes(need)} of "
            f"{format_bytes(capacity)}: {format_bytes(need - capacity)} over")


def exposed_allreduce(allreduce, compute, last, hidden_share: float):
    """What of the all-reduce the backward pass does not hide (it hides up to `hidden_share` of
    the stage's `compute`): at least the last bucket's latency (`last`, in `allreduce` too), paid
    after the backward pass has ended."""
    if not hidden_share:
        return allreduce
    return np.maximum(allreduce - hidden_share * compute, last)


def backward_overlap(cost: CostModel) -> float:
    """Share of a stage's compute per micro-batch behind which a gradient all-reduce can run: the
    framework's overlap (params `dp_overlap`) of the last micro-batch's backward pass (2 of 3
    passes, 3 of 4 under full recomputation)."""
    passes = cost.knobs.forward_passes + 2.0
    backward = (passes - 1.0) / passes      # the recomputed forward runs in the backward pass
    return cost.params("dp_overlap", cost.training.framework) * backward
