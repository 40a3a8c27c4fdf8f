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

import numpy as np

from amp_tui.core.base.lazy import cached_property
from amp_tui.core.costmodel.layer_times import LayerTimes
from amp_tui.core.costmodel.memory import (
    MemoryBreakdown,
    StateBytes,
    breakdown,
    optimizer_traffic_per_param,
    state_bytes_per_param,
)
from amp_tui.core.costmodel.placement import Layout, Nodes, build_layout
from amp_tui.core.costmodel.prediction import Prediction, StagePrediction, memory_reason
from amp_tui.core.costmodel.terms import sharding
from amp_tui.core.costmodel.terms.runtime import RankLinks, stage_runtime
from amp_tui.core.spec.knobs import Knobs
from amp_tui.core.spec.layers import ANY_GPU
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy

# Gradients are all-reduced in buckets of this size (PyTorch DDP's 25 MB; Megatron's are similar):
# each bucket pays the ring's per-message latency.
DP_BUCKET_BYTES = 25e6


class CostModel(LayerTimes):
    """Per-scenario caches of layer times (LayerTimes) and layouts; candidates are built from these."""

    def __init__(self, scenario: Scenario, knobs: Knobs | None = None):
        super().__init__(scenario, knobs)
        self._layouts: dict[tuple, Layout] = {}
        self._nodes: dict[tuple[int, ...], Nodes] = {}   # per placement order, shared by its layouts
        self._stage_links: dict[tuple, object] = {}      # build_layout's stage and boundary terms, every order's
        self.floor_cache: dict = {}  # the search's bound and memory terms shared between candidates

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

    def runtime(self, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
        """Per stage of a layout, what its GPUs hold whatever its layers: ((4, pp) a stated
        reserve, the CUDA context, NCCL's buffers, the engine's fixed buffers; (pp,) the fixed
        bytes of the optimizer step's phase) (memory.stage_runtime)."""
        key = ("runtime", layout.tp, layout.pp, layout.dp, layout.order)
        if key not in self._layouts:
            cp = self.knobs.cp
            self._layouts[key] = stage_runtime(self.training, self.knobs.zero_stage, self.rank_links(layout.order),
                                               layout.serves, layout.tp // cp, cp, layout.dp, layout.pp)
        return self._layouts[key]

    def rank_links(self, order: tuple[int, ...]) -> RankLinks:
        """What each rank's communicators see in this placement order (terms/runtime.py)."""
        key = ("rank links", order)
        if key not in self._layouts:
            if order not in self._nodes:
                self._nodes[order] = Nodes(self.scenario.cluster, order, self.params)
            self._layouts[key] = RankLinks(self.scenario.cluster, self._nodes[order],
                                           self.execution_stack.eager_module_loading)
        return self._layouts[key]

    @property
    def micro_batch_overhead(self) -> float:
        """Seconds per micro-batch on each stage the pipeline engine adds: every engine's fitted
        figure and the framework's own (params pipeline_engine_s: DeepSpeed's pipeline engine)."""
        return self.params("micro_batch_overhead_s") + self.params("pipeline_engine_s", self.training.framework)

    @property
    def execution_stack(self):
        from amp_tui.core.spec.frameworks import PROFILES

        return PROFILES[self.training.framework]

    def candidate(self, tp: int, pp: int, dp: int, mbs: int, order: tuple[int, ...]) -> "Candidate":
        return Candidate(self, self.layout(tp, pp, dp, order), mbs)


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
        self.micro_batch_overhead = cost.micro_batch_overhead

    # Seconds per (parameter / tp) of stage s for the all-reduce and the optimizer step, and both.
    @cached_property
    def _hsdp_allreduce(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stage: HSDP's replica all-reduce of the gradient shard, per parameter over tp, and
        its last bucket's latency (terms/sharding.py)."""
        layout = self.layout
        links = self.cost.hsdp_links(layout.tp // self.cp, self.pp, self.dp, layout.order)
        return sharding.replica_allreduce_coef(links, self.state.reduced / self.shard_group, DP_BUCKET_BYTES)

    @cached_property
    def dp_coef(self) -> np.ndarray:
        if self.hsdp:
            return self._hsdp_allreduce[0]
        if self.knobs.zero_stage >= 3:    # gradients are reduce-scattered layer by layer (stage times)
            return np.zeros(self.pp)
        grad_bytes = self.state.reduced
        latency = self.layout.dp_allreduce_latency * (grad_bytes / DP_BUCKET_BYTES)    # one per bucket
        return grad_bytes * self.layout.dp_allreduce_seconds_per_byte + latency

    @cached_property
    def opt_coef(self) -> np.ndarray:
        """Per stage, seconds per (parameter / tp) of the optimizer step: its bytes over the slowest
        GPU memory, or a profile file's measured step on its GPU type, sharded as ZeRO shards it."""
        training = self.cost.training
        traffic = optimizer_traffic_per_param(training, self.shard_group, self.knobs.zero_stage)
        profile = self.cost.model.measured_profile
        if profile is None or profile.optimizer_step_s_per_param is None or profile.optimizer_name != training.optimizer:
            return traffic / self.layout.stage_memory_bandwidth
        measured = profile.optimizer_step_s_per_param * traffic / optimizer_traffic_per_param(training, 1, 0)
        per_group = np.array([measured if group.gpu.name == profile.gpu or profile.gpu == ANY_GPU else traffic / group.gpu.memory_bandwidth
                              for group in self.cost.scenario.cluster.nodes])
        return np.where(self.layout.serves, per_group[None, :], 0.0).max(axis=1)

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
    def stage_host_times(self) -> np.ndarray:
        """(pp, L): per stage per layer, what the host's issue time adds beyond the GPU's (terms/host.py)."""
        return np.array([row[4] for row in self._stage_rows])

    @cached_property
    def stage_tp_latency_times(self) -> np.ndarray:
        """(pp, L): per stage per layer, the tensor-parallel collectives' latency (terms/collectives.py)."""
        return np.array([row[5] for row in self._stage_rows])

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

    def _per_layer(self, field: str) -> np.ndarray:
        """(L + 1,): prefix sums of one StateBytes figure (a field or `total`) one GPU holds per layer."""
        if self.expert_state is self.state:
            return self.param_prefix * getattr(self.state, field)
        experts = self.expert_prefix
        return (self.param_prefix - experts) * getattr(self.state, field) + experts * getattr(self.expert_state, field)

    @cached_property
    def state_prefix(self) -> np.ndarray:
        """(L + 1,): prefix sums of the bytes one GPU holds per layer through the iteration:
        weights, gradients, fp32 main gradients, optimizer state, gradient buckets."""
        return self._per_layer("total")

    @cached_property
    def step_prefix(self) -> np.ndarray:
        """(L + 1,): prefix sums of the optimizer step's fp32 copies per layer (memory.StateBytes.step)."""
        return self._per_layer("step")

    @cached_property
    def stage_reserve(self) -> np.ndarray:
        """(pp,): bytes per GPU each stage holds whatever its layers (memory.stage_runtime)."""
        return self.cost.runtime(self.layout)[0].sum(axis=0)

    @cached_property
    def step_fixed(self) -> np.ndarray:
        """(pp,): fixed bytes of each stage's optimizer-step phase (a bucket allocated after backward)."""
        return self.cost.runtime(self.layout)[1]

    def memory_terms(self, stages: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """(weights, gradients, fp32 main gradients, optimizer state, gradient buckets, activations,
        workspace, the optimizer step's transient) bytes per GPU of each segment [starts, ends) held
        by `stages`: the memory model's terms bar what a stage holds whatever its layers."""
        act_prefix, peak, in_flight = self.memory_arrays
        pairs = np.column_stack([starts, ends]).ravel()
        workspace = np.maximum.reduceat(np.append(peak, 0.0), pairs)[::2]   # max over each segment
        fields = ("weights", "gradients", "main_gradients", "optimizer", "buckets")
        state = tuple(self._segment(field, starts, ends) for field in fields)
        step = self.step_prefix[ends] - self.step_prefix[starts] + self.step_fixed[stages]
        return (*state, in_flight[stages] * (act_prefix[ends] - act_prefix[starts]), workspace, step)

    def _segment(self, field: str, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        params = self.param_prefix[ends] - self.param_prefix[starts]
        if self.expert_state is self.state:
            return params * getattr(self.state, field)
        experts = self.expert_prefix[ends] - self.expert_prefix[starts]
        return (params - experts) * getattr(self.state, field) + experts * getattr(self.expert_state, field)

    def memory_need(self, memory: tuple[np.ndarray, ...], stages: np.ndarray) -> np.ndarray:
        """Bytes per GPU of segments from their memory_terms: what is held through the iteration,
        and the larger of backward's peak (activations, workspace) and the step's."""
        weights, gradients, main, optimizer, buckets, activations, workspace, step = memory
        return (weights + gradients + main + optimizer + buckets + np.maximum(activations + workspace, step)
                + self.stage_reserve[stages])

    def breakdown(self, s: int, terms) -> MemoryBreakdown:
        """Stage s's MemoryBreakdown from its memory_terms (scalars)."""
        weights, gradients, main, optimizer, buckets, activations, workspace, step = terms
        runtime = tuple(float(x) for x in self.cost.runtime(self.layout)[0][:, s])
        return breakdown((weights, gradients, main, optimizer, buckets), activations, workspace, step, runtime,
                         self.cost.params("memory_fragmentation"))

    def stage_memory(self, s: int, i: int, j: int) -> MemoryBreakdown:
        """Memory per GPU of stage s holding layers [i, j)."""
        terms = self.memory_terms(np.array([s]), np.array([i]), np.array([j]))
        return self.breakdown(s, tuple(float(term[0]) for term in terms))

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
            "memory_total": self.memory_need(memory, stages),
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
        stages = []
        columns = zip(t["starts"].tolist(), t["ends"].tolist(), t["compute"].tolist(), t["comm"].tolist(),
                      t["busy"].tolist(), t["dp_allreduce"].tolist(), t["optimizer_step"].tolist(),
                      zip(*(term.tolist() for term in t["memory"])), self.layout.stage_capacity.tolist(),
                      self.layout.stage_groups)
        latency = self._latency_per_stage(t["starts"], t["ends"])
        for s, row in enumerate(columns):
            i, j, compute, comm, busy, dp_allreduce, optimizer_step, memory, capacity, groups = row
            slowest, source = self.cost.stage_pace(groups, self.tp, self.mbs, i, j)
            stages.append(StagePrediction(
                index=s, first_layer=i, last_layer=j - 1, time_source=source,
                gpu=gpus[slowest].name, gpu_types=tuple(dict.fromkeys(gpus[g].name for g in groups)),
                compute_s=compute, tp_comm_s=float(tp_part[s, i:j].sum()), comm_s=comm,
                shard_comm_s=float(self.stage_shard_times[s, i:j].sum()),
                host_s=float(self.stage_host_times[s, i:j].sum()),
                tp_latency_s=float(self.stage_tp_latency_times[s, i:j].sum()),
                overhead_s=self.micro_batch_overhead, stage_time_s=busy,
                dp_allreduce_s=dp_allreduce, optimizer_step_s=optimizer_step,
                memory=self.breakdown(s, memory), capacity_bytes=capacity,
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
        # (a layer measured on the stage's GPU holds its all-reduces, latency included: none here)
        latency = np.array([float(self.stage_tp_latency_times[s, i:j].sum()) for s, (i, j) in
                            enumerate(zip(starts.tolist(), ends.tolist()))])
        if self.pp > 1:
            latency[:-1] += self.cut_latency
            latency[1:] += self.cut_latency
        return latency


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
    return cost.params("dp_overlap", cost.training.engine) * backward
