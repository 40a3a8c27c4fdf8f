"""Predictions under uneven data-parallel shares (terms in core/costmodel/terms/shares.py).

With one tp, pp and dp, ranks fill the node groups in placement order, so with dp > 1 the replicas
of a stage may run on different GPUs. The uniform model (cost.py) runs every stage at its slowest
replica's pace; here each replica r is timed on its own GPUs: stage s's compute C_sr from the GPU
types serving (s, r) over r's own tensor-parallel ring (all rings busy at once), the pipeline
sends as in the uniform model (every replica's flows share the boundary's links), then

    M_r = max_s (C_sr + sends of s + engine overhead),   F_r = sum_s C_sr + sum_k c_k + pp x overhead,
    replica r runs n_r = share_r / b micro-batches:  P_r = (n_r - 1) M_r + F_r,
    iteration = max_r P_r + max_s (all-reduce not hidden by the slowest replica's last backward
                + optimizer step) + the iteration's fixed cost.

The Prediction's stages carry the slowest replica's figures, so its time terms add up as in
cost.py. Memory counts the most micro-batches any replica holds in flight. The partition, when not
given, is the exact search's at even shares (with that many micro-batches): a heuristic, said so
where plan reports shares.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from amp_tui.core.costmodel.cost import Candidate
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.costmodel.terms import shares as share_terms


def replicas_differ(layout) -> bool:
    """Whether the replicas of some stage of this layout run on different node groups' GPUs."""
    ranks = np.arange(layout.pp * layout.dp * layout.tp).reshape(layout.pp, layout.dp, layout.tp)
    group = layout.node_group[layout.rank_node[ranks]]
    return bool((group != group[:, :1, :]).any())


class ReplicaTimes:
    """Per replica per stage of one candidate: the layer-time prefix sums on the replica's GPUs."""

    def __init__(self, candidate: Candidate):
        c = self.candidate = candidate
        cost, layout = c.cost, c.layout
        nodes = cost._nodes[layout.order]
        ranks = np.arange(layout.pp * layout.dp * layout.tp).reshape(layout.pp, layout.dp, layout.tp)
        group = nodes.rank_group[ranks]                                     # (pp, dp, tp x cp)
        self.groups = [[tuple(sorted(set(group[s, r].tolist()))) for r in range(layout.dp)]
                       for s in range(layout.pp)]
        (spb, latency), cp_links = nodes.block_links(ranks, c.cp)          # (pp, dp): own tp and cp rings
        hardware = c.stage_hardware
        self.rows = [[cost.stage_times(self.groups[s][r], float(spb[s, r]), c.tp, c.mbs, float(latency[s, r]),
                                       hardware[s][3], (float(cp_links[0][s, r]), float(cp_links[1][s, r])))
                      for r in range(layout.dp)] for s in range(layout.pp)]

    def differ(self) -> bool:
        """Whether some stage's replicas run on different GPU types (else shares cannot help)."""
        return any(len(set(row)) > 1 for row in self.groups)

    def terms(self, partition: tuple[int, ...]) -> dict:
        """Per replica: compute, its tensor-parallel part and busy time per stage; bottleneck, fill."""
        c = self.candidate
        base = c._terms(partition)
        starts, ends = base["starts"], base["ends"]
        compute = np.array([[row[r][2][j] - row[r][2][i] for row, i, j in zip(self.rows, starts, ends)]
                            for r in range(c.dp)])                          # (dp, pp)
        def part(k: int) -> np.ndarray:      # a stage_times part summed over each stage, per replica
            return np.array([[float(row[r][k][i:j].sum()) for row, i, j in zip(self.rows, starts, ends)]
                             for r in range(c.dp)])

        tp_part = part(1)
        busy = compute + base["comm"] + c.micro_batch_overhead
        cuts = float(base["comm"].sum()) / 2.0
        fill = (compute.sum(axis=1) + cuts + c.pp * c.micro_batch_overhead) / c.knobs.virtual_stages
        return {"base": base, "compute": compute, "tp_part": tp_part, "busy": busy,
                "shard_part": part(3), "host_part": part(4), "latency_part": part(5),
                "bottleneck": busy.max(axis=1), "fill": fill}


def predict_with_shares(candidate: Candidate, partition: tuple[int, ...], shares: tuple[int, ...],
                        times: ReplicaTimes | None = None) -> Prediction:
    """The prediction of `candidate` with replica r taking shares[r] samples per iteration."""
    c = candidate
    counts = tuple(n // c.mbs for n in shares)
    times = times or ReplicaTimes(c)
    c.num_micro_batches = max(counts)            # memory: the most micro-batches any replica holds
    uniform = c.predict(partition)
    t = times.terms(partition)
    crit, pipeline = share_terms.slowest(counts, t["bottleneck"].tolist(), t["fill"].tolist())
    compute, busy = t["compute"][crit], t["busy"][crit]
    base = t["base"]
    params = c.param_prefix[base["ends"]] - c.param_prefix[base["starts"]]
    allreduce = c.exposed_allreduce(c.dp_coef * params + c.last_bucket_latency, compute, c.last_bucket_latency)
    gpus = c.cost.gpus
    stages = []
    for s, st in enumerate(uniform.stages):
        groups = times.groups[s][crit]
        slowest, source = c.cost.stage_pace(groups, c.tp, c.mbs, st.first_layer, st.last_layer + 1)
        stages.append(replace(st, gpu=gpus[slowest].name, time_source=source, gpu_types=tuple(dict.fromkeys(gpus[g].name for g in groups)),
                              compute_s=float(compute[s]), tp_comm_s=float(t["tp_part"][crit][s]),
                              shard_comm_s=float(t["shard_part"][crit][s]), host_s=float(t["host_part"][crit][s]),
                              tp_latency_s=float(t["latency_part"][crit][s]),
                              stage_time_s=float(busy[s]), dp_allreduce_s=float(allreduce[s])))
    n = counts[crit]
    steady = (n - 1) * float(busy.max())
    fill = float(t["fill"][crit])
    tail = max(st.dp_allreduce_s + st.optimizer_step_s for st in stages)
    iteration = steady + fill + tail + uniform.iteration_overhead_s
    replicas = [share_terms.replica_time(k, m, f) for k, m, f in zip(counts, t["bottleneck"], t["fill"])]
    gbs = c.cost.training.global_batch_size
    return replace(
        uniform, strategy=replace(uniform.strategy, batch_shares=tuple(shares)), num_micro_batches=n,
        iteration_time_s=iteration, samples_per_s=gbs / iteration, steady_state_s=steady, fill_drain_s=fill,
        dp_and_optimizer_s=tail, dp_allreduce_s=max(st.dp_allreduce_s for st in stages),
        bubble_fraction=max(0.0, (pipeline - n * float(busy.max())) / pipeline) if pipeline > 0 else 0.0,
        stages=tuple(stages), replica_times_s=tuple(float(x) for x in replicas))


def best_shares(candidate: Candidate, partition: tuple[int, ...], times: ReplicaTimes | None = None
                ) -> tuple[int, ...]:
    """Samples per replica minimising the slowest replica's time for this partition, in whole
    micro-batches (terms/shares.best_counts: exact over integer counts)."""
    c = candidate
    times = times or ReplicaTimes(c)
    t = times.terms(partition)
    total = c.cost.training.global_batch_size // c.mbs
    counts = share_terms.best_counts(total, t["bottleneck"].tolist(), t["fill"].tolist())
    return tuple(n * c.mbs for n in counts)
