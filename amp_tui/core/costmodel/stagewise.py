"""Per-stage tensor- and data-parallel degrees (Metis, ATC'24): stage s runs on tp_s x dp_s GPUs.

Ranks: stage s takes the next tp_s x cp x dp_s ranks in placement order (nodes as in placement.py),
replica-major inside the stage (rank = inner + tp_s x cp x replica). The pipeline's micro-batch holds
m = micro_batch_size x max_s dp_s samples; stage s splits it over its own dp_s replicas (m / dp_s
samples each), so every dp_s must divide m and B = global batch / m micro-batches flow through.

Terms, per stage, as in cost.py but with the stage's own degrees:
  C_s    layer times on the stage's GPUs at tp_s and m / dp_s samples, over its own tp ring;
  c_k    boundary k re-splits the micro-batch as engines do (Metis): sender replica i of dp_k holds
         samples [i m / dp_k, (i + 1) m / dp_k), receiver j of dp_(k+1) needs its own range; each
         overlapping (i, j) pair is a flow per receiving tensor rank carrying its 1/tp of the
         overlap's activations (forward, and their gradients back), all flows at once sharing the nodes'
         network interfaces. The boundary takes as long as its slowest flow: with equal degrees
         this is the uniform model's send exactly;
  E_s    the stage's all-reduce over its dp_s replicas (ring or hierarchical, 25 MB buckets) and
         optimizer step, ZeRO sharding over dp_s x cp;
  memory weights, gradients and state of the stage's layers / tp_s, activations of m / dp_s samples.

  iteration = (B - 1) max_s tau_s + sum_s g_s + max_s E_s + fixed, as in cost.py.

`best_partition` finds the partition minimising it exactly (walks over the largest E and the
bottleneck tau, each step a min-sum DP over (stage, end layer); see search/partition/walk.py for the argument),
checked against brute force in tests/core/test_stagewise.py. Interleaving, expert parallelism and
uneven batch shares are not combined with per-stage degrees.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from amp_tui.core.costmodel.cost import DP_BUCKET_BYTES, CostModel, backward_overlap, exposed_allreduce
from amp_tui.core.costmodel.memory import (
    breakdown,
    optimizer_traffic_per_param,
    state_bytes_per_param,
)
from amp_tui.core.costmodel.placement import Nodes
from amp_tui.core.costmodel.prediction import Prediction, StagePrediction, memory_reason
from amp_tui.core.costmodel.terms.runtime import stage_runtime
from amp_tui.core.costmodel.terms.sharding import zero3_ring
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy

INF = float("inf")
MAX_SOLVES = 4000     # DPs per partition search before settling for the best found (then not exact)


@dataclass(frozen=True)
class StageLinks:
    groups: tuple[int, ...]
    capacity: float
    memory_bandwidth: float
    tp_spb: float
    tp_latency: float
    cp_link: tuple[float, float]
    dp_spb: float
    dp_latency: float
    allreduce_spb: float
    allreduce_latency: float


class StageWise:
    """One per-stage strategy (degrees, micro-batch, placement) on a cost model: its tables."""

    def __init__(self, cost: CostModel, strategy: Strategy, order: tuple[int, ...]):
        self.cost, self.strategy, self.order = cost, strategy, tuple(order)
        training = cost.training
        self.knobs = cost.knobs
        cp = self.cp = cost.knobs.cp
        self.tps, self.dps, self.pp = strategy.tps, strategy.dps, strategy.pp
        self.m = strategy.micro_batch_size * max(self.dps)
        self.num_micro_batches = training.global_batch_size // self.m
        self.num_layers = L = cost.model.num_layers
        if self.order not in cost._nodes:
            cost._nodes[self.order] = Nodes(cost.scenario.cluster, self.order, cost.params)
        self.nodes = cost._nodes[self.order]
        offsets = np.concatenate([[0], np.cumsum([t * cp * d for t, d in zip(self.tps, self.dps)])])
        self.ranks = [np.arange(offsets[s], offsets[s + 1]).reshape(d, t * cp)
                      for s, (t, d) in enumerate(zip(self.tps, self.dps))]
        self.links = [self._stage_links(ranks) for ranks in self.ranks]
        self.overhead = cost.micro_batch_overhead
        self.fixed = cost.params("iteration_overhead_s")
        self.offsets = offsets
        # Boundaries: seconds per byte of the whole micro-batch's activation, and latency.
        coef, latency = [], []
        for k in range(self.pp - 1):
            c, lat = self._boundary(k)
            coef.append(c)
            latency.append(lat)
        output = np.concatenate([[0.0], cost._output])
        self.cut = np.array([2.0 * self.m / cp * output * c + 2.0 * lat for c, lat in zip(coef, latency)]
                            ).reshape(self.pp - 1, L + 1)
        self.cut_latency = 2.0 * np.array(latency)
        self.hidden_share = backward_overlap(cost) if self.knobs.zero_stage < 3 else 0.0

    def _stage_links(self, ranks: np.ndarray) -> StageLinks:
        nodes = self.nodes
        groups = tuple(sorted(set(nodes.rank_group[ranks].ravel().tolist())))
        (tp_spb, tp_lat), (cp_spb, cp_lat) = nodes.block_links(ranks, self.cp)
        dp_spb, dp_lat = nodes.ring_links(ranks.T)
        allreduce = float(nodes.allreduce_seconds_per_byte(ranks.T, dp_spb).max()) if ranks.shape[0] > 1 else 0.0
        return StageLinks(groups, float(min(nodes.usable[g] for g in groups)),
                          float(min(nodes.memory_bandwidth[g] for g in groups)),
                          float(tp_spb.max()), float(tp_lat.max()), (float(cp_spb.max()), float(cp_lat.max())),
                          float(dp_spb.max()), float(dp_lat.max()), allreduce,
                          float(nodes.allreduce_latency(ranks.T).max()))

    def _boundary(self, k: int) -> tuple[float, float]:
        """(max over flows of the micro-batch's share it carries x its seconds per byte, latency)."""
        send, recv = self.ranks[k], self.ranks[k + 1]
        dk, dn = send.shape[0], recv.shape[0]
        i, j = np.arange(dk)[:, None], np.arange(dn)[None, :]
        overlap = np.minimum((i + 1) / dk, (j + 1) / dn) - np.maximum(i / dk, j / dn)
        pair_i, pair_j = np.nonzero(overlap > 1e-12)
        t = np.arange(recv.shape[1])[None, :]
        src = send[pair_i[:, None], t % send.shape[1]].ravel()
        dst = recv[pair_j[:, None], t].ravel()
        # Each receiving tensor rank takes its 1/tp of the overlap (sequence shards, scatter/gather).
        share = np.repeat(overlap[pair_i, pair_j], recv.shape[1]) / self.tps[k + 1]
        bandwidth = self.nodes.flow_bandwidth(src[None, :], dst[None, :])[0]
        return float(np.max(share / bandwidth)), float(self.nodes.flow_latency(src, dst).max())

    # -- per-stage arrays ----------------------------------------------------------------------
    def stage_mbs(self, s: int) -> int:
        return self.m // self.dps[s]

    @cached_property
    def rows(self) -> list[tuple[np.ndarray, ...]]:
        """Per stage: LayerTimes.stage_times on the stage's GPUs (layer time, its tensor-parallel
        part, prefix sums, ZeRO-3's exposed part, the host's, the collectives' latency)."""
        out = []
        for s, links in enumerate(self.links):
            shard = (0.0, 0.0)
            n = self.dps[s]
            if self.knobs.zero_stage >= 3 and n * self.cp > 1:
                shard = zero3_ring(self.nodes, self.ranks[s].ravel(), links.dp_spb, links.dp_latency, n,
                                   self.cost.training.framework)
            out.append(self.cost.stage_times(links.groups, links.tp_spb, self.tps[s], self.stage_mbs(s),
                                             links.tp_latency, shard, links.cp_link))
        return out

    @cached_property
    def state(self) -> list:
        return [state_bytes_per_param(self.cost.training, d * self.cp, self.knobs.zero_stage, self.pp)
                for d in self.dps]

    @cached_property
    def coefficients(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per stage, per parameter / tp_s: all-reduce and optimizer seconds; one bucket's latency."""
        dp_coef, opt_coef, last = [], [], []
        for s, links in enumerate(self.links):
            d = self.dps[s]
            opt_coef.append(optimizer_traffic_per_param(self.cost.training, d * self.cp, self.knobs.zero_stage)
                            / links.memory_bandwidth)
            if self.knobs.zero_stage >= 3:
                dp_coef.append(0.0)
                last.append(0.0)
                continue
            grad = self.state[s].reduced
            dp_coef.append(grad * links.allreduce_spb + links.allreduce_latency * (grad / DP_BUCKET_BYTES))
            last.append(links.allreduce_latency)
        return np.array(dp_coef), np.array(opt_coef), np.array(last)

    @cached_property
    def runtime(self) -> tuple[np.ndarray, np.ndarray]:
        """((4, pp), (pp,)): memory.stage_runtime for each stage with its own degrees."""
        cost, groups = self.cost, len(self.cost.scenario.cluster.nodes)
        held, step = np.zeros((4, self.pp)), np.zeros(self.pp)
        for s, links in enumerate(self.links):
            serves = np.zeros((self.pp, groups), dtype=bool)
            serves[:, list(links.groups)] = True
            h, st = stage_runtime(cost.training, self.knobs.zero_stage, cost.rank_links(self.order), serves,
                                  self.tps[s], self.cp, self.dps[s], self.pp, self.offsets[:-1], int(self.offsets[-1]))
            held[:, s], step[s] = h[:, s], st[s]
        return held, step

    @cached_property
    def param_prefix(self) -> np.ndarray:
        """(pp, L + 1): parameters per GPU of stage s's layers, prefix sums."""
        base = np.concatenate([[0.0], np.cumsum(self.cost._params)])
        return np.array([base / t for t in self.tps])

    @cached_property
    def memory(self) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """Per stage: (activation prefix per GPU, per-layer transient peak, micro-batches in flight)."""
        out = []
        for s in range(self.pp):
            act, peak, in_flight = self.cost.memory_arrays(self.tps[s], self.pp, self.stage_mbs(s),
                                                           self.num_micro_batches)
            out.append((act, peak, float(in_flight[s])))
        return out

    # -- one partition -------------------------------------------------------------------------
    def terms(self, partition: tuple[int, ...]) -> dict:
        bounds = np.concatenate([[0], np.cumsum(partition)]).astype(np.int64)
        starts, ends = bounds[:-1], bounds[1:]
        s_idx = np.arange(self.pp)
        prefix = np.array([row[2] for row in self.rows])
        compute = prefix[s_idx, ends] - prefix[s_idx, starts]
        cuts = self.cut[np.arange(self.pp - 1), ends[:-1]] if self.pp > 1 else np.zeros(0)
        comm = np.zeros(self.pp)
        comm[:-1] += cuts
        comm[1:] += cuts
        params = self.param_prefix[s_idx, ends] - self.param_prefix[s_idx, starts]
        dp_coef, opt_coef, last = self.coefficients
        allreduce = exposed_allreduce(dp_coef * params + last, compute, last, self.hidden_share)
        optimizer = opt_coef * params
        busy = compute + comm + self.overhead
        B = self.num_micro_batches
        memory = []
        for s in range(self.pp):
            act, peak, in_flight = self.memory[s]
            i, j = int(starts[s]), int(ends[s])
            st = self.state[s]
            memory.append((params[s] * st.weights, params[s] * st.gradients, params[s] * st.main_gradients,
                           params[s] * st.optimizer, params[s] * st.buckets, in_flight * (act[j] - act[i]),
                           float(peak[i:j].max()), params[s] * st.step + float(self.runtime[1][s])))
        return {"starts": starts, "ends": ends, "compute": compute, "comm": comm, "busy": busy, "cuts": cuts,
                "dp_allreduce": allreduce, "optimizer_step": optimizer, "memory": memory,
                "steady": (B - 1) * float(busy.max()),
                "fill": float(compute.sum() + cuts.sum() + self.pp * self.overhead),
                "tail": float((allreduce + optimizer).max()), "fixed": self.fixed}

    def iteration_time(self, partition: tuple[int, ...]) -> float:
        t = self.terms(partition)
        return t["steady"] + t["fill"] + t["tail"] + t["fixed"]

    def memory_need(self, s: int, memory: tuple) -> float:
        """Bytes per GPU of stage s from its memory terms (as Candidate.memory_need)."""
        weights, gradients, main, optimizer, buckets, activations, workspace, step = memory
        return (weights + gradients + main + optimizer + buckets + max(activations + workspace, step)
                + float(self.runtime[0][:, s].sum()))

    def breakdown(self, s: int, memory: tuple):
        weights, gradients, main, optimizer, buckets, activations, workspace, step = memory
        return breakdown((weights, gradients, main, optimizer, buckets), activations, workspace, step,
                         tuple(float(x) for x in self.runtime[0][:, s]), self.cost.params("memory_fragmentation"))

    def fits(self, partition: tuple[int, ...]) -> bool:
        t = self.terms(partition)
        return all(self.memory_need(s, mem) <= links.capacity for s, (mem, links) in enumerate(zip(t["memory"], self.links)))

    def predict(self, partition: tuple[int, ...]) -> Prediction:
        t = self.terms(partition)
        gpus = self.cost.gpus
        stages = []
        for s, links in enumerate(self.links):
            i, j = int(t["starts"][s]), int(t["ends"][s])
            tp, mbs = self.tps[s], self.stage_mbs(s)
            slowest, source = self.cost.stage_pace(links.groups, tp, mbs, i, j)
            tp_latency = float(self.rows[s][5][i:j].sum())      # NCCL's per-call latency (terms/collectives.py)
            latency = tp_latency + (self.cut_latency[s - 1] if s > 0 else 0.0) \
                + (self.cut_latency[s] if s < self.pp - 1 else 0.0)
            stages.append(StagePrediction(
                index=s, first_layer=i, last_layer=j - 1, gpu=gpus[slowest].name, time_source=source,
                gpu_types=tuple(dict.fromkeys(gpus[g].name for g in links.groups)),
                compute_s=float(t["compute"][s]), tp_comm_s=float(self.rows[s][1][i:j].sum()),
                comm_s=float(t["comm"][s]), overhead_s=self.overhead, stage_time_s=float(t["busy"][s]),
                dp_allreduce_s=float(t["dp_allreduce"][s]), optimizer_step_s=float(t["optimizer_step"][s]),
                memory=self.breakdown(s, t["memory"][s]), capacity_bytes=links.capacity,
                latency_s=latency, host_s=float(self.rows[s][4][i:j].sum()), tp_latency_s=tp_latency,
                shard_comm_s=float(self.rows[s][3][i:j].sum())))
        B = self.num_micro_batches
        steady, fill, tail = t["steady"], t["fill"], t["tail"]
        iteration = steady + fill + tail + t["fixed"]
        pipeline = steady + fill
        bottleneck = float(t["busy"].max())
        over = [st for st in stages if not st.fits]
        reason = memory_reason(max(over, key=lambda st: st.memory.total_bytes - st.capacity_bytes)) if over else None
        strategy = replace(self.strategy, partition=tuple(int(n) for n in partition), placement=self.order,
                           **self.knobs.to_dict())
        return Prediction(
            strategy=strategy, num_micro_batches=B, iteration_time_s=iteration,
            samples_per_s=self.cost.training.global_batch_size / iteration,
            steady_state_s=steady, fill_drain_s=fill, dp_and_optimizer_s=tail,
            dp_allreduce_s=float(t["dp_allreduce"].max()),
            bubble_fraction=max(0.0, (pipeline - B * bottleneck) / pipeline) if pipeline > 0 else 0.0,
            fits_memory=not over, peak_memory_bytes=max(st.memory.total_bytes for st in stages),
            stages=tuple(stages), reason=reason, iteration_overhead_s=t["fixed"])

    # -- the exact partition search ------------------------------------------------------------
    @cached_property
    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(g, tau, E, feasible) over (stage s, first layer i, end j), segment [i, j)."""
        pp, L = self.pp, self.num_layers
        i = np.arange(L + 1)[:, None]
        j = np.arange(L + 1)[None, :]
        valid = i < j
        g = np.full((pp, L + 1, L + 1), INF)
        tau = np.full_like(g, INF)
        e = np.full_like(g, INF)
        ok = np.zeros_like(g, dtype=bool)
        dp_coef, opt_coef, last = self.coefficients
        for s in range(pp):
            prefix = self.rows[s][2]
            compute = prefix[None, :] - prefix[:, None]
            params = self.param_prefix[s][None, :] - self.param_prefix[s][:, None]
            gs = compute + self.overhead + (self.cut[s][None, :] if s < pp - 1 else 0.0)
            ts = gs + (self.cut[s - 1][:, None] if s > 0 else 0.0)
            es = exposed_allreduce(dp_coef[s] * params + last[s], compute, last[s], self.hidden_share) + opt_coef[s] * params
            act, peak, in_flight = self.memory[s]
            seg_peak = np.zeros((L + 1, L + 1))
            for a in range(L):
                seg_peak[a, a + 1:] = np.maximum.accumulate(peak[a:])
            st = self.state[s]
            backward = in_flight * (act[None, :] - act[:, None]) + seg_peak
            step = params * st.step + float(self.runtime[1][s])
            mem = params * st.total + np.maximum(backward, step) + float(self.runtime[0][:, s].sum())
            g[s] = np.where(valid, gs, INF)
            tau[s] = np.where(valid, ts, INF)
            e[s] = np.where(valid, es, INF)
            ok[s] = valid & (mem <= self.links[s].capacity)
        return g, tau, e, ok

    def _dp(self, mask: np.ndarray, cost: np.ndarray, combine) -> tuple[float, tuple[int, ...] | None]:
        """Min over partitions within `mask` of the stages' `cost` combined by np.add or np.maximum."""
        L = self.num_layers
        f = np.full(L + 1, INF)
        f[0] = 0.0
        back = []
        for s in range(self.pp):
            value = combine(f[:, None], np.where(mask[s], cost[s], INF))
            arg = np.argmin(value, axis=0)
            f = value[arg, np.arange(L + 1)]
            back.append(arg)
        if not np.isfinite(f[L]):
            return INF, None
        bounds = [L]
        for s in range(self.pp - 1, 0, -1):
            bounds.append(int(back[s][bounds[-1]]))
        bounds.append(0)
        bounds.reverse()
        return float(f[L]), tuple(b - a for a, b in itertools.pairwise(bounds))

    def best_partition(self, limit: float = INF) -> tuple[tuple[int, ...] | None, bool]:
        """(the partition minimising the iteration time among those that fit, or None when none
        fits or none beats `limit` seconds; whether the walk completed, the result then exact)."""
        g, tau, e, ok = self.tables
        B = self.num_micro_batches
        best, best_part, solves = limit - self.fixed, None, 2
        e_floor = float(np.where(ok, e, INF).min(axis=(1, 2)).max()) if ok.any() else INF
        tau_floor, _ = self._dp(ok, tau, np.maximum)
        sigma_floor, _ = self._dp(ok, g, np.add)
        if (B - 1) * tau_floor + sigma_floor + e_floor >= best:
            return None, True
        e_mask = ok
        while True:       # outer: partitions whose largest E is below the last one's
            F, F_part = INF, None
            t_mask = e_mask
            floor, _ = self._dp(e_mask, tau, np.maximum)
            solves += 1
            while True:   # inner: partitions whose bottleneck is below the last one's
                sigma, part = self._dp(t_mask, g, np.add)
                solves += 1
                if part is None:
                    break
                T = self._segment_max(tau, part)
                value = (B - 1) * T + sigma
                if value < F:
                    F, F_part = value, part
                if (B - 1) * floor + sigma >= F or solves > MAX_SOLVES:
                    break
                t_mask = t_mask & (tau < T)
            if F_part is None:
                break
            E = self._segment_max(e, F_part)
            if F + E < best:
                best, best_part = F + E, F_part
            if F + e_floor >= best or solves > MAX_SOLVES:
                break
            e_mask = e_mask & (e < E)
        return best_part, solves <= MAX_SOLVES

    def _segment_max(self, table: np.ndarray, partition: tuple[int, ...]) -> float:
        bounds = np.concatenate([[0], np.cumsum(partition)])
        return float(max(table[s, bounds[s], bounds[s + 1]] for s in range(self.pp)))


def evaluate_stagewise(cost: CostModel, strategy: Strategy, order: tuple[int, ...], field: str = "strategy"
                       ) -> Prediction:
    """`evaluate` for a strategy with per-stage tp or dp (validated)."""
    from amp_tui.core.spec.strategy import even_partition

    model = StageWise(cost, strategy, order)
    partition = strategy.partition
    if partition is None:
        partition, _ = model.best_partition()
        partition = partition or even_partition(model.num_layers, strategy.pp)
    return model.predict(partition)


def gpu_runs(scenario: Scenario, order: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """The GPUs in placement order as runs of one GPU type: (type, GPUs, GPUs per node)."""
    runs: list[list] = []
    for g in order:
        group = scenario.cluster.nodes[g]
        if runs and runs[-1][0] == group.gpu.name and runs[-1][2] == group.gpus_per_node:
            runs[-1][1] += group.num_gpus
        else:
            runs.append([group.gpu.name, group.num_gpus, group.gpus_per_node])
    return [tuple(run) for run in runs]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def typed_stage_degrees(scenario: Scenario, pp: int, order: tuple[int, ...], cp: int = 1, limit: int = 64):
    """Per-stage (tp, dp) lists where every stage runs on one GPU type: each run of one type in
    placement order takes k of the pp stages, all of its GPUs split evenly among them, each with one
    (tp, dp) for the run (tp dividing the GPUs per node and the heads). At most `limit`, fewest
    stages on slow runs first is not assumed: the caller ranks them by prediction."""
    runs = gpu_runs(scenario, order)
    heads = scenario.model.shape.get("num_heads")
    out = []

    def splits(r: int, left: int):
        if r == len(runs):
            if left == 0:
                yield ()
            return
        for k in range(1, left - (len(runs) - r - 1) + 1):
            for rest in splits(r + 1, left - k):
                yield (k, *rest)

    for stages in splits(0, pp):
        options = []
        for (name, gpus, per_node), k in zip(runs, stages):
            if gpus % (k * cp):
                options = None
                break
            n = gpus // (k * cp)
            options.append([(t, n // t) for t in divisors(n) if per_node % t == 0 and (not heads or heads % t == 0)])
            if not options[-1]:
                options = None
                break
        if options is None:
            continue
        for combo in _product(options):
            tps = tuple(t for (t, _), k in zip(combo, stages) for _ in range(k))
            dps = tuple(d for (_, d), k in zip(combo, stages) for _ in range(k))
            if len(set(tps)) > 1 or len(set(dps)) > 1:
                out.append((tps, dps))
            if len(out) >= limit:
                return out
    return out


def _product(options):
    if not options:
        yield ()
        return
    for first in options[0]:
        for rest in _product(options[1:]):
            yield (first, *rest)


def micro_batch_sizes(scenario: Scenario, dps: tuple[int, ...]) -> list[int]:
    """micro_batch_size values whose pipeline micro-batch every stage's dp divides and the global
    batch is a whole number of."""
    gbs, top = scenario.training.global_batch_size, max(dps)
    lcm = math.lcm(*dps)
    return [b for b in divisors(gbs // top) if (b * top) % lcm == 0 and gbs % (b * top) == 0]
