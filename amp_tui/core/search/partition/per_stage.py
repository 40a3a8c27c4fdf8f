"""A strategy with per-stage tp and dp (costmodel/stagewise.py) seen as the partition walk sees a
uniform candidate, so that its best partition is found by the same exact walk over banded, capped
segment tables (walk.py) instead of dense (pp, L + 1, L + 1) tables: on 1,000 layers a per-stage
layout took 2 s and 143 DPs of a million cells each that way.

The walk reads a candidate's per-stage arrays: layer-time prefix sums, sends at each boundary
(bytes per micro-batch x seconds per byte + latency), the tail's coefficients and the memory of a
segment. For a per-stage strategy those differ stage by stage in more ways than a uniform one's
(each stage its own tp, micro-batch share, ZeRO group and activations): `param_prefix` is per stage,
and the memory of a segment is the stage's own (`segment_need`), which the tables and memory
checks ask for where a candidate has one.
"""

from __future__ import annotations

from functools import cached_property
from types import SimpleNamespace

import numpy as np

from amp_tui.core.costmodel.cost import exposed_allreduce
from amp_tui.core.costmodel.stagewise import StageWise


class PerStageCandidate:
    """What the partition walk (walk.solve over tables.SegmentTables) reads of a candidate, for one
    StageWise model. Its partitions' times are StageWise's terms, summed in the walk's order."""

    def __init__(self, model: StageWise):
        self.model = model
        self.pp, self.num_layers = model.pp, model.num_layers
        self.num_micro_batches = model.num_micro_batches
        self.knobs = model.knobs          # (per-stage degrees are never interleaved: virtual_stages 1)
        self.micro_batch_overhead = model.overhead
        self.iteration_overhead = model.fixed
        self.hidden_share = model.hidden_share
        self.dp_coef, self.opt_coef, self.last_bucket_latency = model.coefficients
        self.e_coef = self.dp_coef + self.opt_coef
        self.e_const = self.iteration_overhead + self.last_bucket_latency
        self.param_prefix = model.param_prefix          # (pp, L + 1): per stage, its GPUs' share
        self.cut_latency = model.cut_latency
        self.layout = SimpleNamespace(stage_capacity=np.array([links.capacity for links in model.links]))
        # the tables' caches (a uniform candidate shares its cost model's between candidates)
        self.cost = SimpleNamespace(floor_cache={}, training=model.cost.training)

    # -- compute ------------------------------------------------------------------------------
    @cached_property
    def time_prefix(self) -> np.ndarray:
        """(pp, L + 1): prefix sums of each stage's layer times on its own GPUs and degrees."""
        return np.array([row[2] for row in self.model.rows])

    @cached_property
    def stage_layer_times(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array([row[0] for row in self.model.rows]), np.array([row[1] for row in self.model.rows])

    @cached_property
    def stage_hardware(self) -> list[tuple]:
        """Per stage, what its layer times depend on: equal entries, equal times."""
        m = self.model
        return [(m.tps[s], m.dps[s], m.stage_mbs(s), m.links[s]) for s in range(self.pp)]

    @cached_property
    def cheapest_cut(self) -> np.ndarray:
        """(pp - 1,): each boundary's least send time wherever it falls (after layer 1 ... L - 1)."""
        if self.pp == 1:
            return np.zeros(0)
        return self.model.cut[:, 1:-1].min(axis=1) if self.num_layers > 2 else self.model.cut[:, 1]

    def cut_cost(self, boundary: np.ndarray, after: np.ndarray) -> np.ndarray:
        """Send time per micro-batch of boundaries `boundary` after layers `after` - 1 (broadcast)."""
        return self.model.cut[boundary, after]

    def exposed_allreduce(self, allreduce: np.ndarray, compute: np.ndarray, last: np.ndarray) -> np.ndarray:
        return exposed_allreduce(allreduce, compute, last, self.hidden_share)

    @cached_property
    def tail_floor(self) -> float:
        """A lower bound on max_s E_s over every partition: stage s holds P_s of the P parameters,
        P_s / tp_s per GPU, so max_s e_s P_s / tp_s >= P / sum_s (tp_s / e_s); where backward
        hides part of the all-reduce, only the optimizer step is sure."""
        coef = self.e_coef if not self.hidden_share else self.opt_coef
        tps = np.array(self.model.tps, dtype=np.float64)
        total = float(self.param_prefix[0, -1]) * tps[0]
        base = total / float(np.sum(tps / coef)) if np.all(coef > 0) else 0.0
        return base + (float(self.e_const.min()) if not self.hidden_share else self.iteration_overhead)

    def quick_evaluate(self, partition: tuple[int, ...]) -> tuple[float, int, float]:
        """(iteration time, 0, 0.0): the walk caps its tables with the time of a partition that fits."""
        return self.model.iteration_time(partition), 0, 0.0

    # -- memory -------------------------------------------------------------------------------
    @cached_property
    def memory_arrays(self) -> tuple[None, None, np.ndarray]:
        """(-, -, micro-batches in flight per stage): the per-stage activations are segment_need's."""
        return None, None, np.array([in_flight for _, _, in_flight in self.model.memory])

    @cached_property
    def _stage_memory(self) -> tuple[np.ndarray, ...]:
        """Per stage: state bytes prefix per GPU, activation prefix x
        micro-batches in flight, the transient peak's sparse table (levels[s, k, i] =
        max(peak_s[i:i + 2**k])), floor(log2(n)) for n in [0, L], the optimizer step's bytes
        prefix, and what the stage holds whatever its layers."""
        m, L = self.model, self.num_layers
        state = np.array([m.param_prefix[s] * m.state[s].total for s in range(self.pp)])
        step = np.array([m.param_prefix[s] * m.state[s].step for s in range(self.pp)])
        acts = np.array([act * in_flight for act, _, in_flight in m.memory])
        levels = [np.array([peak for _, peak, _ in m.memory])]
        while 2 << (len(levels) - 1) <= L:
            half, prev = 1 << (len(levels) - 1), levels[-1]
            levels.append(np.concatenate([np.maximum(prev[:, :-half], prev[:, half:]), np.zeros((self.pp, half))],
                                         axis=1))
        log2 = np.concatenate([[0], np.log2(np.arange(1, L + 1)).astype(np.int64)])   # (exact at powers of 2)
        held, step_fixed = m.runtime
        return state, acts, np.stack(levels, axis=1), log2, step, step_fixed, held.sum(axis=0)

    def segment_need(self, stage: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Bytes per GPU of segments [start, end) on stages `stage` (end > start; arrays broadcast):
        as StageWise.memory_need."""
        state, acts, levels, log2, step, step_fixed, held = self._stage_memory
        k = log2[end - start]
        peak = np.maximum(levels[stage, k, start], levels[stage, k, end - (1 << k)])
        backward = (acts[stage, end] - acts[stage, start]) + peak
        optimizer_step = step[stage, end] - step[stage, start] + step_fixed[stage]
        return state[stage, end] - state[stage, start] + np.maximum(backward, optimizer_step) + held[stage]

    def some_partition_fits(self) -> bool:
        """Whether some partition fits every stage's memory: a segment needs more the more layers
        it holds, so of the ends the stages before can reach the latest one before layer j is the
        best start for a stage ending at j (as memory._reachable_fits, for one candidate)."""
        L, pp = self.num_layers, self.pp
        capacity = self.layout.stage_capacity
        ends = np.arange(L + 1)
        reach = ends == 0
        for s in range(pp):
            latest = np.maximum.accumulate(np.where(reach, ends, -1))       # latest reachable start <= j
            start = latest[:-1]                                                # before each end j = 1 ... L
            ok = start >= 0
            need = self.segment_need(s, np.where(ok, start, 0), ends[1:])
            fits = ok & (need <= capacity[s]) & (ends[1:] >= s + 1) & (ends[1:] <= L - (pp - 1 - s))
            reach = np.concatenate([[False], fits])
            if not reach.any():
                return False
        return bool(reach[L])
