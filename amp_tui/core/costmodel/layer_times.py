"""What each layer costs on one GPU type: the per-layer half of the cost model (cost.py).

Per node group's kind of node, tensor-parallel degree and micro-batch size: each layer's forward +
backward seconds (measured where a profile has it, else the analytic terms of terms/compute.py
carried by the layer's measured / analytic ratio where one exists: time_sources.py),
the bytes its tensor-parallel collectives move, ring attention's steps, and the activations it keeps.
Layer times are shared by every cost model of one model, training, set of techniques and
calibration (the parts of a cluster the idle-node search tries), the newest few kept.
"""

from __future__ import annotations

import threading

import numpy as np

from amp_tui.core.base.lazy import cached_property
from amp_tui.core.costmodel import measured as profile_terms
from amp_tui.core.costmodel.memory import micro_batches_in_flight, zero3_gathered_params
from amp_tui.core.costmodel.terms import collectives as collective_terms
from amp_tui.core.costmodel.terms import compute as compute_terms
from amp_tui.core.costmodel.terms import context as context_terms
from amp_tui.core.costmodel.terms import host as host_terms
from amp_tui.core.costmodel.time_sources import TimeSources, clear_tables, measured_table, span_label
from amp_tui.core.spec.frameworks import execution_key, execution_profile
from amp_tui.core.spec.hardware import GPU, gpu_catalog
from amp_tui.core.spec.knobs import Knobs, default_knobs
from amp_tui.core.spec.scenario import Scenario

_SHARED_MODELS = 8     # (model, training, techniques, calibration) whose layer times are kept


_shared: dict[tuple, tuple[object, dict]] = {}


_shared_lock = threading.Lock()


def _shared_layer_times(model, training, knobs, calibration, references) -> dict:
    """The layer-time cache of one model, training, set of techniques, calibration and what
    unmeasured GPU types carry (whether they do, the measured types' figures: time_sources.py),
    shared by every cost model built for them (the newest few are kept). Keyed by the model's identity, and holding the model so
    that the identity cannot be reused while the entry lives."""
    key = (id(model), training, knobs, calibration, references)
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
    clear_tables()


class LayerTimes:
    """Per-scenario caches of what each layer costs on each GPU type, tp degree and micro-batch size."""

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
                            g.inter_node_bandwidth, g.inter_link_class, g.measured) for g in scenario.cluster.nodes]
        # Where each layer's time comes from, and what an unmeasured one carries (time_sources.py):
        # shared like the layer times, whose carried entries depend on the measured GPU types' figures.
        table = measured_table(self.model)
        across = table.measured_any(scenario.cluster.gpu_types or [gpu.name for gpu in self.gpus])
        references = (across, *(self._gpu_named(name) for name in table.gpus))
        self._layer_times = _shared_layer_times(self.model, self.training, self.knobs, scenario.calibration,
                                                references)
        self.sources = self._layer_times.get("sources")
        if self.sources is None:
            self.sources = self._layer_times["sources"] = TimeSources(table, self._analytic_forward, self._gpu_named,
                                                                      across)
        cols = self.model.columns
        tokens, width = compute_terms.layer_shapes(self.model, self.training.bytes_per_element)
        self._work_per_sample = tokens * width    # kernel size at tp 1, micro-batch 1 (shapes as inferred)
        self._output = cols["output_bytes"]
        # Parameters per GPU before tp: expert parallelism keeps 1/ep of each MoE layer's experts.
        self._params = cols["params"] - cols["expert_params"] * (1.0 - 1.0 / self.knobs.ep)
        self._profiles = {}  # per-GPU / per-tp layer arrays: measured times, calibration, activations
        # The execution profile (spec/frameworks.py): the framework's, or compiled execution's.
        self.profile_key = execution_key(self.training.framework, self.training.compile)
        self.execution = execution_profile(self.training.framework, self.training.compile)

    # -- layer times ------------------------------------------------------------------------
    def _gpu_named(self, name: str) -> GPU | None:
        """A measured GPU type's figures, to carry its ratio from: the catalog's (the same whatever
        part of the cluster is priced), else the cluster's GPU of that name."""
        return gpu_catalog().get(name) or next((g for g in self.gpus if g.name == name), None)

    def _measured(self, gpu_name: str, tp: int) -> np.ndarray:
        """Per layer, the inline measured forward per sample at micro-batch 1 (NaN where none)."""
        return self.sources.table.entry(gpu_name, tp)[0]

    def time_sources(self, gpu: GPU, tp: int) -> tuple[str, ...]:
        """Per layer, where its time on this GPU type at this tp comes from (time_sources.py)."""
        return self.sources.labels(gpu, tp)

    def stage_pace(self, groups: tuple[int, ...], tp: int, mbs: int, first: int, end: int) -> tuple[int, str]:
        """(the node group that sets the pace of a stage of layers first..end - 1 served by `groups`:
        the slowest, where its layer times come from)."""
        slowest = groups[0] if len(groups) == 1 else max(
            groups, key=lambda g: float(self.layer_times(g, tp, mbs)[0][first:end].sum()))
        return slowest, span_label(self.time_sources(self.gpus[slowest], tp), self.model.columns["flops"] > 0,
                                   first, end)

    def _analytic_forward(self, gpu: GPU, tp: int, mbs: int | np.ndarray) -> np.ndarray:
        return compute_terms.analytic_forward(self.model, gpu, self.training.precision, self.params,
                                              tp, self.knobs.cp, self.knobs.sequence_parallel, mbs,
                                              self.training.attention_kernel, self.training.fp8_scaling,
                                              self.execution.elementwise_traffic)

    @cached_property
    def _blocks(self) -> np.ndarray:
        return np.array([layer.kind == "block" for layer in self.model.layers], dtype=bool)

    def _shard_measured(self, gpu_name: str, tp: int) -> np.ndarray:
        """Per layer, whether a profile file measured it on this GPU type at this tp (measured.py)."""
        return self.sources.table.entry(gpu_name, tp)[1]

    def layer_times(self, group: int, tp: int, mbs: int) -> tuple[np.ndarray, np.ndarray]:
        """(compute seconds, tensor-parallel ring bytes) per layer per micro-batch, forward + backward,
        on node group `group`'s GPU. The bytes still need the stage's link: see `stage_layer_times`."""
        key = (self._node_kind[group], tp, mbs)
        if key not in self._layer_times:
            self.prepare_layer_times(group, tp, [mbs])
        return self._layer_times[key][:2]

    def measured_tp_comm(self, group: int, tp: int, mbs: int) -> np.ndarray | float:
        """Per layer per micro-batch, the tensor-parallel all-reduce seconds a measured layer time
        (tp > 1) holds inside `layer_times`' compute (_split_measured): reported as tensor-parallel
        communication, never added to the time again. 0 where nothing is measured."""
        key = (self._node_kind[group], tp, mbs)
        if key not in self._layer_times:
            self.prepare_layer_times(group, tp, [mbs])
        return self._layer_times[key][2]

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
        shard = self._shard_measured(gpu.name, tp)
        have = ~np.isnan(measured) & ~shard          # AMP's form: forward per sample, collectives inside
        # Where this GPU type at this tp measured nothing: carried by the layer's ratio (time_sources.py).
        ratio = self.sources.ratio(gpu, tp)
        analytic = self._analytic_forward(gpu, tp, mbs) * ratio
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
        held_comm = comm_passes * measured_comm if have.any() and tp > 1 else np.zeros_like(forward)
        compute = np.where(have, measured_passes, passes) * forward + held_comm
        if shard.any():      # a profile file's forward and backward at this shard shape (measured.py)
            _, shard_forward, shard_backward, checkpointed = profile_terms.measured_passes(
                self.model.layers, gpu.name, tp, mbs, analytic,
                lambda m: self._analytic_forward(gpu, tp, m) * ratio,
                self.params("backward_ratio"))
            forward = np.where(shard, shard_forward, forward)
            # Full recomputation runs a block's forward again; trainers checkpoint the transformer
            # blocks only (Megatron-LM, torchtitan, Hugging Face), never the embedding or the head.
            # The profile's checkpointed time holds the checkpointing's own cost, where it has one.
            recomputed = np.where(self._blocks, self.knobs.forward_passes, 1.0) * shard_forward + shard_backward
            if self.knobs.forward_passes > 1:
                recomputed = np.where(self._blocks & ~np.isnan(checkpointed), checkpointed, recomputed)
            compute = np.where(shard, recomputed, compute)
        if not (have | shard).all():   # flash attention's backward recomputes the scores (analytic layers only)
            compute = compute + np.where(have | shard, 0.0, compute_terms.flash_backward_time(
                self.model, gpu, self.params, tp, self.knobs.cp, mbs, self.training.attention_kernel))
        if self.knobs.ep > 1:    # tokens to their experts and back: forward, backward (and recomputed forward)
            compute = compute + comm_passes * self._expert_alltoall(group, tp) * mbs
        if self.knobs.recompute == "selective":   # attention scores and softmax run forward again
            compute = compute + compute_terms.selective_recompute_time(self.model, gpu, self.training, self.params,
                                                                       self.knobs, tp, mbs, forward)
        for row, m in enumerate(todo):
            self._layer_times[(kind, tp, m)] = (compute[row], tp_bytes[row], held_comm[row])

    def _expert_alltoall(self, group: int, tp: int) -> np.ndarray:
        """Per layer, seconds of one pass's all-to-alls (dispatch + combine) per sample, over an
        expert-parallel group laid out on this group's nodes (terms/experts.py)."""
        from amp_tui.core.costmodel.terms.experts import (
            alltoall_bytes_per_gpu,
            alltoall_seconds,
        )

        node = self.scenario.cluster.nodes[group]
        ep, cp = self.knobs.ep, self.knobs.cp
        per_node = max(node.gpus_per_node // (tp * cp), 1)
        intra, inter = node.link_figures(self.params)[:2]
        seconds_per_byte = alltoall_seconds(1.0, ep, min(ep, per_node), node.gpus_per_node, intra, inter)
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
        compute1 = self._analytic_forward(self.gpus[group], tp, 1) * self.sources.ratio(self.gpus[group], tp)
        compute_share = np.where(compute1 > 0, np.minimum(measured, compute1) / np.where(compute1 > 0, compute1, 1.0), 0.0)
        comm1 = np.maximum(measured - compute1, 0.0)
        node = self.scenario.cluster.nodes[group]
        bandwidth = node.link_figures(self.params)[0]
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

    def host_times(self, gpu_name: str, tp: int, zero3_collectives: float = 0.0) -> np.ndarray:
        """Per layer per micro-batch on a GPU type at this tp: the host's time to issue the layer's
        kernels and collectives (terms/host.py); 0 for a layer with a measured time, which holds it."""
        key = ("host", gpu_name, tp, zero3_collectives)
        if key not in self._profiles:
            collectives = (self.tp_messages if tp > 1 else 0.0) + zero3_collectives
            host = host_terms.host_issue_time(self.model, self.params, self.profile_key, self.knobs.forward_passes,
                                              collectives * (self.model.columns["flops"] > 0))
            measured = ~np.isnan(self._measured(gpu_name, tp)) | self._shard_measured(gpu_name, tp)
            self._profiles[key] = np.where(measured, 0.0, host)
        return self._profiles[key]

    def bound_times(self, group: int, tp: int, mbs: int, tp_comm_seconds_per_byte: float) -> np.ndarray:
        """Per layer, a lower bound on its time on node group `group`'s GPU whatever stage it falls
        in, for the search's floors: compute and the tensor-parallel bytes at `tp_comm_seconds_per_byte`
        (the fastest link's, overlap applied), or the host's issue time where that is longer."""
        compute, tp_bytes = self.layer_times(group, tp, mbs)
        return np.maximum(compute + tp_bytes * tp_comm_seconds_per_byte, self.host_times(self.gpus[group].name, tp))

    def stage_times(self, groups: tuple[int, ...], tp_seconds_per_byte: float, tp: int,
                    mbs: int, tp_latency: float = 0.0, shard: tuple[float, float] = (0.0, 0.0),
                    cp_link: tuple[float, float] = (0.0, 0.0)) -> tuple[np.ndarray, ...]:
        """Per layer on a stage served by node `groups` with this tensor-parallel link (s/byte and
        per-hop latency), on the slowest serving GPU type: (time, its tensor-parallel and ring
        attention communication, prefix sums of the time, the part that is ZeRO-3's exposed
        parameter traffic, the part the host's issue time adds, the tensor-parallel collectives'
        latency inside the communication). `shard` (s/byte, latency) prices ZeRO-3's per-layer
        parameter all-gathers and gradient reduce-scatters (on the HSDP shard ring under hybrid
        sharding), overlapped with the layer's compute. `cp_link` (s/byte, latency) is the
        context-parallel ring's: what ring attention's sends leave exposed counts as
        communication (terms/context.py). A layer takes the longer of its GPU time and the host's
        time to issue it (terms/host.py); tensor-parallel collectives pay NCCL's latency by
        protocol (terms/collectives.py)."""
        key = ("stage", groups, tp_seconds_per_byte, tp, mbs, tp_latency, shard, cp_link)
        if key not in self._profiles:
            layers = self.model.num_layers
            times, tp_part, shard_part, host_part, latency_part = (np.zeros(layers) for _ in range(5))
            collectives = compute_terms.zero3_collectives(self.training.framework, self.knobs.recompute)
            sharded = compute_terms.zero3_layer_time(self._params, self.training.bytes_per_element, tp, shard,
                                                     collectives) if shard[0] else None
            for g in groups:
                compute, tp_bytes = self.layer_times(g, tp, mbs)
                # A measured time already holds its all-reduces, latency included (tp_bytes = 0).
                latency, bandwidth = collective_terms.tp_collective_time(
                    tp_bytes, self.tp_messages, tp, tp_seconds_per_byte, tp_latency, self.params("collective_base_s"))
                latency = latency * self.tp_exposed
                comm = latency + bandwidth * self.tp_exposed
                if self.knobs.cp > 1:
                    comm = comm + context_terms.exposed_ring_time(
                        *self.ring_steps(g, tp, mbs), self.knobs.cp, *cp_link,
                        forward_passes=self.knobs.forward_passes)
                total = compute + comm
                # Reported with the all-reduces: what a measured time holds of them (inside `compute`).
                held = self.measured_tp_comm(g, tp, mbs) if tp > 1 else 0.0
                exposed = 0.0
                if sharded is not None:    # prefetched: the layer waits only for what compute does not hide
                    exposed = np.maximum(sharded - compute, 0.0) + shard[1] * collectives
                    total = total + exposed
                host = host_terms.exposed_host_time(
                    self.host_times(self.gpus[g].name, tp, collectives if sharded is not None else 0.0), total,
                    self.execution.host_overlap)
                total = total + host
                slower = total > times
                times = np.where(slower, total, times)
                tp_part = np.where(slower, comm + held, tp_part)
                shard_part = np.where(slower, exposed, shard_part)
                host_part = np.where(slower, host, host_part)
                latency_part = np.where(slower, latency, latency_part)
            self._profiles[key] = (times, tp_part, np.concatenate([[0.0], np.cumsum(times)]), shard_part,
                                   host_part, latency_part)
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
