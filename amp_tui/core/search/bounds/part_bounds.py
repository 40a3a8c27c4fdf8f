"""Lower bounds on the iteration time of any strategy on a part of the cluster (subclusters.py).

Every part gets a lower bound on the iteration time of any strategy on it (`part_bounds`). With v_lg
layer l's time per micro-batch on GPU type g at tensor-parallel degree tp (compute, plus its
tensor-parallel bytes over the fastest link such a ring can have), V_g = sum_l v_lg, and
a_l = min_g v_lg / V_g over the part's types, A = sum_l a_l: a stage holding layers S and GPUs of
type g runs at least sum_S v_lg >= V_g sum_S a_l per micro-batch (the slowest type sets its pace).
With the types sorted fastest first, at most floor(GPUs of the k fastest types / (tp x dp)) stages
hold no slower type, so the stages' total speed is at most sum_k (new stages at type k) / V_k and
the bottleneck stage takes M >= A / that speed, and M >= ceil(k / pp) x the k-th slowest layer
(on its fastest type), since k such layers share pp stages, and M >= the least bottleneck at which
those stages hold every core layer (of the most common kind) whole, a stage of type g at most the
most whose times on g fit in M (_whole_core_layers_floor: with few layers per stage, counting them
fractionally put parts of 1,024 GPUs 8% below their best). Then, with B micro-batches,
    iteration >= max((B - 1) M + fill, B M),   fill >= max(sum_l min_g v_lg, A x V of the fastest stage),
and, sharper (_filled_pipeline), iteration >= min over M' >= M of (B - 1) (M' + f) + S(M') + fixed:
S(M') the least compute of the stages filled fastest first up to M' each, f the cheapest send and
per-micro-batch overhead every stage pays (a send over the network where the stages fill whole
nodes, _send_floors), fixed the fill's sends and overheads and the iteration's;
plus the tail: the optimizer step and the gradient all-reduce (over the fewest nodes its ring can
span, at each group's share of its network link), the parameters spread over the stages as their
classes allow (_tail_floors), counted whole where nothing hides the all-reduce (DeepSpeed) and
with B - 1 - h steady steps where backward hides up to h x a stage's compute; and coupled with the
bottleneck (_coupled_part_floors: below the next whole-layer thresholds the slow stages must hold
the layers the fast ones cannot, with their all-reduce). All minimised over every (tp, dp,
micro-batch size) the part's GPU count admits (tests: each part's bound against brute force). Counting the GPUs
fractionally instead gives a quick bound, B M >= global batch / micro-batch x tp x A / sum_g (GPUs
of type g / V_g), whatever dp: it rules most parts out before the full bound is computed. A part
whose GPUs cannot hold one copy of the weights, gradients and optimizer state is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import CostModel, backward_overlap
from amp_tui.core.costmodel.memory import (
    least_reserve,
    optimizer_traffic_per_param,
    state_bytes_per_param,
)
from amp_tui.core.costmodel.placement import Nodes
from amp_tui.core.search.space import divisors
from amp_tui.core.spec.knobs import knob_choices
from amp_tui.core.spec.scenario import Scenario


def _tp_options(scenario: Scenario, totals: np.ndarray) -> list[int]:
    """Tensor-parallel degrees some part may use (`totals`: the parts' GPU counts)."""
    heads = scenario.model.shape.get("num_heads")
    if scenario.search.allow_cross_node_tp:
        options = sorted({d for n in totals.tolist() for d in divisors(n)})
    else:
        options = sorted({d for group in scenario.cluster.nodes for d in divisors(group.gpus_per_node)})
    return [tp for tp in options if not heads or heads % tp == 0]


def part_bounds(scenario: Scenario, rows: np.ndarray, cost: CostModel | None = None, *,
                quick: bool = False, limit: np.ndarray | float = math.inf,
                should_cancel: Callable[[], bool] | None = None,
                families: list[dict] | None = None) -> np.ndarray:
    """Per row of node counts, a lower bound on the iteration time of every strategy on those nodes
    (inf where no strategy can fit or none exists). See the module docstring. `quick`: a weaker
    bound, cheap enough for every part: B M with the stages' GPUs counted fractionally (M >= A x
    tp x dp / R, so B M >= global batch / micro-batch x tp x A / R, whatever dp), or the fill.
    Where the bound reaches `limit` (per row, or one for all) it may be a weaker one that still
    reaches it. `should_cancel` is polled between passes; Cancelled is raised when it turns true.

    With `families` (an empty dict per row), each row's dict receives the bound of every (tp, pp,
    dp, micro-batch size) of the row below its limit (the bottleneck and fill bound alone, the
    cheap part: a family not listed is at the limit or above it, or cannot fit): the bounds a
    part's search starts from (search.PartSearch.prepare_families), whose candidates' own bounds
    are finer. Where the part cannot fit at all, none."""
    cancel = should_cancel or (lambda: False)
    groups = scenario.cluster.nodes
    training = scenario.training
    cost = cost or CostModel(scenario)
    gbs, layers = training.global_batch_size, scenario.model.num_layers
    gpn = np.array([g.gpus_per_node for g in groups], dtype=np.int64)
    gpus = rows * gpn                                   # (parts, groups)
    gpu_counts = gpus.astype(np.float64)   # for products with floats: BLAS's, 6x numpy's integer loop
    totals, total_index = np.unique(gpus.sum(axis=1), return_inverse=True)
    in_subset, subset_index = _subsets(rows > 0)                               # (subsets, groups)
    per_node = [math.gcd(*gpn[row].tolist()) for row in in_subset]
    # Memory: the part's GPUs must hold every parameter's state once (ZeRO-3 across all of them).
    room = np.array([g.gpu.usable_memory_bytes - least_reserve(training, g.gpu) for g in groups])
    fits = gpu_counts @ np.maximum(room, 0.0) >= scenario.model.total_params * training.state_bytes_per_param
    part_room = gpu_counts @ room   # (may be negative)

    # The fastest link a tensor-parallel ring on a group's GPUs can have: inside one of its nodes
    # (any link at all when tensor parallelism may cross nodes). A link's achieved fraction is at
    # most 1 of its catalog figure; a measured one (cluster.network) may pass it.
    fastest = [(max(g.intra_node_bandwidth, f[0]), max(g.inter_node_bandwidth, f[1], f[2]))
               for g in groups for f in [g.link_figures(cost.params)]]
    if scenario.search.allow_cross_node_tp:
        spb = np.full(len(groups), 1.0 / max(max(pair) for pair in fastest))
    else:
        spb = np.array([1.0 / intra for intra, _ in fastest])
    exposed_tp = cost.tp_exposed
    best = np.full(len(rows), np.inf)
    limit = np.broadcast_to(np.asarray(limit, dtype=np.float64), (len(rows),))
    # The pipeline's fill, sends and fixed costs (below), for the cost model's techniques alone:
    # every stage sends across a boundary at least, at the least bytes over the fastest link
    # (_send_floors: over the network when every boundary crosses nodes).
    plain = (cost.knobs.cp == 1 and cost.knobs.virtual_stages == 1
             and knob_choices(training, scenario.model) == [cost.knobs])     # (no `auto` technique)
    # Each stage's state and reserve fit its least GPU memory, so the stages' capacities, at most
    # the part's memory / (tp x dp), hold a replica's state: part's room >= dp x P x (state bytes
    # per parameter at dp), P the parameters less the experts other ranks hold (their state, sharded
    # over fewer ranks, is larger; ZeRO-3 under pipelines larger too). Rules out large dp.
    columns = scenario.model.columns
    replica_params = float((columns["params"] - columns["expert_params"] * (1.0 - 1.0 / cost.knobs.ep)).sum())
    whole = Nodes(scenario.cluster, tuple(range(len(groups))), cost.params)
    output = scenario.model.columns["output_bytes"]
    least_cut = 2.0 * float(output[:-1].min() if len(output) > 1 else 0.0)     # bytes per sample, at tp 1
    overhead, per_micro_batch = cost.params("iteration_overhead_s"), cost.micro_batch_overhead
    # The tail (_tail_floors): the optimizer step and, with plain data parallelism, the gradient
    # all-reduce. Where nothing hides the all-reduce (backward_overlap 0) both add to the bound;
    # where backward hides up to h x its stage's compute (at most the bottleneck's M), the
    # optimizer step adds, or the bound with B - 1 - h steady steps gets both whole (as
    # search.time_floors counts them).
    hidden = backward_overlap(cost)
    counted = plain and cost.knobs.zero_stage < 3 and not cost.knobs.hsdp_shard and cost.knobs.ep == 1
    memory_bandwidth = np.array([g.gpu.memory_bandwidth for g in groups])
    # a crossing flow's bandwidth, at most: its node's link (its 1 / tp share when the tensor-
    # parallel groups stay inside nodes: each node of a stage then holds one rank of each of its
    # tp rings) or one connection's
    inter = np.array([float(whole.inter[whole.node_group == g].max()) for g in range(len(groups))])
    inter_flow = np.array([float(whole.inter_flow[whole.node_group == g].max()) for g in range(len(groups))])
    send_floors = _send_floors(whole, in_subset, gpn, inter, inter_flow)
    all_params = float(scenario.model.columns["params"].sum())
    micro_batch_sizes = [m for m in divisors(gbs) if m <= scenario.search.max_micro_batch_size]
    kinds = [layer.kind for layer in cost.model.layers]
    common = max(dict.fromkeys(kinds), key=kinds.count)
    core = np.array([kind == common for kind in kinds])         # the core layers: the most common kind
    core_params = float(scenario.model.columns["params"][core].min()) if core.any() else 0.0
    ring = np.zeros(len(groups))
    for tp in _tp_options(scenario, totals):
        allowed_tp = np.array([scenario.search.allow_cross_node_tp or n % tp == 0 for n in per_node])[subset_index]
        for g in range(len(groups)):            # every micro-batch size's layer times in one pass
            cost.prepare_layer_times(g, tp, micro_batch_sizes)
        for mbs in micro_batch_sizes:
            if cancel():
                raise Cancelled
            key = ("part layer times", tp, mbs)        # (groups, L), the same for every call
            if key not in cost.floor_cache:
                cost.floor_cache[key] = np.array([cost.bound_times(g, tp, mbs, spb[g] * exposed_tp)
                                                  for g in range(len(groups))])
            v = cost.floor_cache[key]
            V = v.sum(axis=1)
            if cancel():
                raise Cancelled
            fastest_first = np.argsort(V, kind="stable")
            if (V > 0).all():
                a = _subset_min(v / V[:, None], in_subset).sum(axis=1)[subset_index]
            else:       # a GPU type with nothing to compute: no steady-state floor (the fill stays)
                a, V = np.zeros(len(rows)), np.ones(len(groups))
            fastest_layers = _subset_min(v, in_subset)                       # (subsets, L)
            f = fastest_layers.sum(axis=1)[subset_index]
            # the quick bound of this tp and micro-batch size: every dp's bound below is at least
            # it (their stages' speed is at most R / (tp x dp)), so only rows where it lies below
            # the bound so far and the limit need them (where it reaches the limit, it stands)
            coarse = np.where(allowed_tp, np.maximum(gbs / mbs * tp * a / (gpu_counts @ (1.0 / V)), f), np.inf)
            reaches = quick | (coarse >= limit)
            best = np.where(reaches, np.minimum(best, coarse), best)
            if quick:
                continue
            open_rows = ~reaches & ((coarse < best) | (families is not None))
            if not open_rows.any():
                continue
            cumulative = np.cumsum(gpus[:, fastest_first], axis=1)          # GPUs of the k fastest types
            descending = -np.sort(-fastest_layers, axis=1)
            core_order, core_values, core_held = _core_thresholds(v, core)
            core_cumulative = np.cumsum(gpus[:, core_order], axis=1)
            for dp in divisors(gbs // mbs):
                if cancel():
                    raise Cancelled
                ok_total = (totals % (tp * dp) == 0) & (totals // (tp * dp) <= layers)
                fits_dp = (part_room >= dp * replica_params * state_bytes_per_param(training, dp, cost.knobs.zero_stage).total
                           if plain else True)
                rows_ok = np.flatnonzero(ok_total[total_index] & open_rows & fits_dp)
                if not len(rows_ok):
                    continue
                # stages whose GPUs are all among the k fastest types, at most; the j-th fastest
                # stage runs at the pace of the slowest type it holds
                stages = cumulative[rows_ok] // (tp * dp)
                new = stages.copy()             # (np.diff with prepend costs more on a few rows)
                new[:, 1:] -= stages[:, :-1]
                speed = (new / V[fastest_first]).sum(axis=1)
                m = a[rows_ok] / speed                                       # bottleneck floor
                first = np.argmax(stages > 0, axis=1)
                fill = np.maximum(f[rows_ok], a[rows_ok] * V[fastest_first][first])
                B = gbs // (mbs * dp)
                bound = np.maximum((B - 1) * m + fill, B * m)
                # the finer bounds below are higher still, the cheaper first: each only on the
                # rows (`live`) whose bound so far could still fall below the row's bound over the
                # other (tp, dp, micro-batch size) and its limit (`cap`)
                cap = np.minimum(best[rows_ok], limit[rows_ok]) if families is None else limit[rows_ok]
                # (a family's bound for a part's search: this one; its candidates' own bounds are finer)
                live = np.flatnonzero(bound < cap) if families is None else np.zeros(0, dtype=np.int64)
                pp = totals[total_index[rows_ok]] // (tp * dp)
                if not len(live):       # (so do most rows, on most (tp, dp, micro-batch size))
                    best[rows_ok] = np.minimum(best[rows_ok], bound)
                    _record(families, rows_ok, bound, cap, tp, dp, mbs, pp)
                    continue
                m[live] = np.maximum(m[live], _bottleneck_floor(descending, subset_index[rows_ok[live]], pp[live]))
                if len(core_values):
                    m[live] = np.maximum(m[live], _whole_core_layers_floor(
                        core_values, core_held, np.diff(core_cumulative[rows_ok[live]] // (tp * dp), axis=1, prepend=0)))
                bound[live] = np.maximum((B - 1) * m[live] + fill[live], B * m[live])
                if plain:
                    sends = np.where(pp > 1, send_floors(least_cut * mbs / tp, tp * dp, subset_index[rows_ok]), 0.0)
                    tail = full = np.zeros(len(rows_ok))
                    live = live[bound[live] < cap[live]]
                    if not len(live):
                        best[rows_ok] = np.minimum(best[rows_ok], bound)
                        _record(families, rows_ok, bound, cap, tp, dp, mbs, pp)
                        continue
                    pipeline = partial(_pipeline_floor, a[rows_ok], new, V[fastest_first], sends, pp,
                                       per_micro_batch, overhead)       # (rows, steps, lowest)
                    if counted:
                        # the fewest nodes a ring of dp spans: its ranks lie tp apart, at most
                        # ceil(GPUs per node / tp) of them on one node
                        nodes = -(-dp // -(-int(gpn.max()) // tp))
                        flow = np.minimum(inter / (1 if scenario.search.allow_cross_node_tp else tp), inter_flow)
                        ring = 2.0 * (nodes - 1) / nodes / flow if nodes > 1 else np.zeros(len(groups))
                        optimizer = optimizer_traffic_per_param(training, dp, cost.knobs.zero_stage) / memory_bandwidth
                        per_param = state_bytes_per_param(training, dp, cost.knobs.zero_stage).reduced
                        step, full = np.zeros(len(rows_ok)), np.zeros(len(rows_ok))
                        for out, coef in ((step, optimizer), (full, per_param * ring + optimizer)):
                            out[live] = _tail_floors(coef, gpus[rows_ok[live]], tp * dp, pp[live], all_params / tp)
                        tail = step if hidden else full
                    bound += tail
                    live = live[bound[live] < cap[live]]
                    bound[live] = np.maximum(bound[live], pipeline(live, B - 1, m[live]) + tail[live])
                    if counted and 0 < hidden <= B - 1:
                        live = live[bound[live] < cap[live]]
                        bound[live] = np.maximum(bound[live], pipeline(live, B - 1 - hidden, m[live]) + full[live])
                    if counted and hidden <= B - 1 and len(core_values) and ring.any():
                        live = live[bound[live] < cap[live]]
                        bound[live] = np.maximum(bound[live], _coupled_part_floors(
                            partial(pipeline, live), B - 1 - hidden, m[live], core_values, core_held,
                            np.diff(core_cumulative[rows_ok[live]] // (tp * dp), axis=1, prepend=0),
                            per_param * ring + optimizer, gpus[rows_ok[live]], tp * dp, pp[live],
                            core_params / tp, full[live]))
                best[rows_ok] = np.minimum(best[rows_ok], bound)
                _record(families, rows_ok, bound, cap, tp, dp, mbs, pp)
    if families is not None:
        for row in np.flatnonzero(~fits).tolist():
            families[row].clear()
    return np.where(fits, best, np.inf)


def _subsets(used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of `used` (parts x groups, booleans) and each row's index among them: by
    bit masks (one integer per row, fast) up to 62 groups, by packed bytes beyond."""
    groups = used.shape[1]
    if groups <= 62:
        masks, index = np.unique(used @ (1 << np.arange(groups)), return_inverse=True)
        return (masks[:, None] >> np.arange(groups)) & 1 == 1, index
    packed = np.ascontiguousarray(np.packbits(used, axis=1))
    keys = packed.view(np.dtype((np.void, packed.shape[1]))).ravel()
    _, first, index = np.unique(keys, return_index=True, return_inverse=True)
    return used[first], index.ravel()


def _record(families: list[dict] | None, rows: np.ndarray, bound: np.ndarray, cap: np.ndarray, tp: int, dp: int,
            mbs: int, pp: np.ndarray) -> None:
    """Each row's bound of (tp, pp, dp, mbs) into its dict, where below its limit (`cap`)."""
    if families is None:
        return
    for row, value, depth in zip(rows[bound < cap].tolist(), bound[bound < cap].tolist(), pp[bound < cap].tolist()):
        families[row][(tp, depth, dp, mbs)] = value


def _pipeline_floor(work: np.ndarray, new: np.ndarray, pace: np.ndarray, sends: np.ndarray, pp: np.ndarray,
                    per_micro_batch: float, overhead: float, rows: np.ndarray, steps: float,
                    lowest: np.ndarray) -> np.ndarray:
    """For rows `rows` (of `work`, `new`, `sends`, `pp`), the iteration overhead + min over
    M >= `lowest` of steps (M + busy) + S(M) + fixed (_filled_pipeline, with steps + 1 micro-
    batches): every stage's busy time per micro-batch adds at least one boundary's send (`sends`:
    a floor on any boundary's) and the per-micro-batch overhead to its compute, and the fill and
    drain add every boundary's send once and every stage's overhead once."""
    return overhead + _filled_pipeline(work[rows], new[rows], pace, lowest, sends[rows] + per_micro_batch,
                                       (pp[rows] - 1) * sends[rows] + pp[rows] * per_micro_batch, steps + 1)


def _send_floors(whole: Nodes, in_subset: np.ndarray, gpn: np.ndarray, inter: np.ndarray,
                 inter_flow: np.ndarray) -> Callable[[float, int, np.ndarray], np.ndarray]:
    """Per subset of groups (rows of `in_subset`), a floor on a pipeline boundary's send time per
    micro-batch: `floors(unit, per_stage, subset)` for `unit` bytes at least, stages of
    `per_stage` GPUs (tp x dp) and each row's subset.

    Ranks go stage by stage and node by node in placement order (placement.build_layout), so a
    boundary's sends go from rank r to r + per_stage; when per_stage is at least the GPUs of a node
    of every group the part uses, r and r + per_stage lie on different nodes, and every send
    crosses the network: at most at the best link or single connection (`inter`, `inter_flow`:
    per group, the most any of its nodes has) of those groups, with at least the least inter-node
    latency of those groups, each way. Otherwise some boundary may stay inside a node: the
    fastest link of the cluster, the least latency of any link."""
    fastest = 1.0 / max(float(whole.intra.max()), float(whole.inter.max()))
    quickest = 2.0 * min(float(whole.intra_latency.min()), float(whole.inter_latency.min()))
    latency = np.array([float(whole.inter_latency[whole.node_group == g].min()) for g in range(len(gpn))])
    widest = np.array([int(gpn[row].max()) for row in in_subset])
    crossing = 1.0 / np.where(in_subset, np.minimum(inter, inter_flow)[None, :], 0.0).max(axis=1)
    crossing_latency = 2.0 * np.where(in_subset, latency[None, :], np.inf).min(axis=1)

    def floors(unit: float, per_stage: int, subset: np.ndarray) -> np.ndarray:
        across = per_stage >= widest[subset]
        return np.where(across, unit * crossing[subset] + crossing_latency[subset], unit * fastest + quickest)

    return floors


def _tail_floors(coef: np.ndarray, gpus: np.ndarray, per_stage: int, pp: np.ndarray, params: float) -> np.ndarray:
    """Per row (`gpus`: per group, a part's GPUs), a floor on the largest tail of a stage, e_s P_s
    with P_s its parameters per GPU (`params` in all), when each stage's coefficient e_s is at
    least `coef` of every group serving it: max_s e_s P_s >= params / sum_s (1 / e_s), and, as
    for the stages' speed, at most floor(GPUs of the k lowest-coefficient groups / per_stage)
    stages have e_s no higher than the k-th lowest, so sum_s 1 / e_s is at most the sum over
    those counts. 0 where a coefficient is 0 (nothing to bound). (A hair lower, as it can be
    exact: rounding must not put it above the best.)"""
    if not np.all(coef > 0):
        return np.zeros(len(gpus))
    lowest_first = np.argsort(coef, kind="stable")
    stages = np.minimum(np.cumsum(gpus[:, lowest_first], axis=1) // per_stage, pp[:, None])
    return params / (np.diff(stages, axis=1, prepend=0) / coef[lowest_first]).sum(axis=1) * (1.0 - 1e-9)


def _coupled_part_floors(pipeline: Callable, steps: float, m: np.ndarray, values: np.ndarray, held: np.ndarray,
                         new: np.ndarray, coef: np.ndarray, gpus: np.ndarray, per_stage: int, pp: np.ndarray,
                         layer_params: float, spread: np.ndarray) -> np.ndarray:
    """Per row, a floor on steps (M + busy) + S(M) + fixed + max_s e_s P_s that couples the
    bottleneck compute M with the tail: a low M leaves the slow stages many layers (and their
    parameters, whose all-reduce is often the slowest too). `pipeline(steps, lowest)` is that
    pipeline floor over M >= lowest; `m`, the least M; `values`, `held`, `new` as for
    _whole_core_layers_floor; `coef` the tail coefficients per group and `gpus`, `per_stage`,
    `pp` as for _tail_floors; `layer_params`, the fewest parameters per GPU of a core layer;
    `spread`, the tail floor of _tail_floors.

    The holdings K'_k(M) change only at the thresholds: on [m, t1) and [t1, t2) (t1 < t2 the next
    thresholds) they are those at m and at t1, and with M in such a range the tail is at least
    E(K) (_held_tail_floor); beyond t2 it is at least `spread`. So the iteration is at least the
    least of pipeline(m) + E(K(m)), pipeline(t1) + E(K(t1)) and pipeline(t2) + spread."""
    at = np.searchsorted(values, m, side="right")           # index of the first threshold above m
    out = np.full(len(m), np.inf)
    for step in range(3):
        index = at + step                                   # the range starts at m or threshold index - 1
        exists = index <= len(values)
        lowest = np.where(step == 0, m, values[np.clip(index - 1, 0, len(values) - 1)])
        if step < 2:
            room = np.where(index[:, None] > 0, held[:, np.clip(index - 1, 0, len(values) - 1)].T, 0)
            tail = _held_tail_floor(room, new, coef, gpus, per_stage, pp, layer_params, held[0, -1])
        else:
            tail = spread
        out = np.minimum(out, np.where(exists, pipeline(steps, lowest) + tail, np.inf))
    return out


def _held_tail_floor(room: np.ndarray, new: np.ndarray, coef: np.ndarray, gpus: np.ndarray, per_stage: int,
                     pp: np.ndarray, layer_params: float, count: int) -> np.ndarray:
    """Per row, a floor on max_s e_s l_s x `layer_params` when the stages hold `count` core layers
    l_s between them, a stage of compute class k (`new`, as for _whole_core_layers_floor) at most
    room[k] of them (falling with k), and each stage's e_s at least `coef` of its groups (counted
    as in _tail_floors). The stages' capacities sorted (most first) are at most the greedy counts'
    (at most cum_k stages are of the first k classes), and so are the counts floor(E / (e_s p))
    that a tail E allows; sum_s min(capacity_s, allowed_s) is largest with both sorted alike
    (min is supermodular). E is at least the least value where that sum reaches `count` (inf if
    none: no partition has that bottleneck). (A hair lower, against rounding.)"""
    if not (np.all(coef > 0) and layer_params > 0 and len(room)):
        return np.zeros(len(room))
    lowest_first = np.argsort(coef, kind="stable")
    e_new = np.diff(np.minimum(np.cumsum(gpus[:, lowest_first], axis=1) // per_stage, pp[:, None]), axis=1, prepend=0)
    stage = np.arange(int(pp.max()))[None, :, None]          # stages sorted: j-th, class = classes ended by j

    def per_stage_class(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
        """(rows, stages): each sorted stage's value of its class (`fill` past the row's pp)."""
        index = (np.cumsum(counts, axis=1)[:, None, :] <= stage).sum(axis=2)
        return np.take_along_axis(values, index, axis=1)

    capacity = per_stage_class(new, np.concatenate([room, np.zeros((len(room), 1))], axis=1))     # most first
    e = per_stage_class(e_new, np.broadcast_to(np.append(coef[lowest_first], np.inf), (len(room), len(coef) + 1)))
    e = e * layer_params                                                                          # least first
    # the least tail lies among e_s x n (n layers on a stage of coefficient e_s)
    candidates = np.unique(coef[:, None] * layer_params * np.arange(1, count + 1)[None, :])
    low, high = np.zeros(len(room), dtype=np.int64), np.full(len(room), len(candidates) - 1)
    while (low < high).any():
        middle = (low + high) // 2
        allowed = np.floor(candidates[middle][:, None] / e * (1 + 1e-12))
        enough = np.minimum(capacity, allowed).sum(axis=1) >= count
        low, high = np.where(enough, low, middle + 1), np.where(enough, middle, high)
    return np.where(capacity.sum(axis=1) >= count, candidates[low] * (1.0 - 1e-9), np.inf)


def _bottleneck_floor(descending: np.ndarray, subset: np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Per row, M >= ceil(k / pp) x the k-th largest layer time (`descending`: per subset of
    groups, each layer's time on the subset's fastest GPU for it, largest first): k layers at
    least that slow share pp stages, so one of them holds ceil(k / pp)."""
    layers = descending.shape[1]
    pairs, where = np.unique(subset * (layers + 1) + pp, return_inverse=True)
    k = np.arange(1, layers + 1)
    floors = (np.ceil(k[None, :] / (pairs % (layers + 1))[:, None]) * descending[pairs // (layers + 1)]).max(axis=1)
    return floors[where.ravel()]


def _core_thresholds(v: np.ndarray, core: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For _whole_core_layers_floor, from `v` (groups, L), each layer's time per group, and `core`,
    the core layers (of the most common kind): the groups in ascending order of their core layers'
    total time; the thresholds T[k, j], in that order, the least time j + 1 core layers take on
    group k or on any group after it (min over i >= k of the sum of group i's j + 1 cheapest),
    as the distinct values of T ascending and, per group k and value x, #{j: T[k, j] <= x}."""
    times = v[:, core]
    order = np.argsort(times.sum(axis=1), kind="stable")
    thresholds = np.minimum.accumulate(np.cumsum(np.sort(times[order], axis=1), axis=1)[::-1], axis=0)[::-1]
    values = np.unique(thresholds)
    return order, values, np.stack([np.searchsorted(row, values, side="right") for row in thresholds])


def _whole_core_layers_floor(values: np.ndarray, held: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Per row, a floor on the bottleneck stage's compute M from whole core layers (each layer all
    on one stage), with `values` and `held` from _core_thresholds and `new` (rows, groups): the
    stages per group in that order whose GPUs are all of that group or of earlier ones, at most
    (the count of stages of part_bounds, in this order of the groups).

    A stage whose slowest group in this order is k runs each layer at least at its time on k, so
    with compute at most M it holds at most K_k(M) core layers, the most whose cheapest sum on k
    fits in M; K'_k(M) = max over i >= k of K_i(M) = #{j: T[k, j] <= M} = held[k] at M bounds
    that too and falls with k, so the stages hold at most sum_k new_k K'_k(M) core layers
    (filling the earliest groups first, as `new` does, gives the most). That must reach C, the
    core layers: M is at least the least threshold where it does. Contiguity, memory and the
    other layers are relaxed."""
    count = held[0, -1]         # C: at the largest threshold every group holds every core layer
    low, high = np.zeros(len(new), dtype=np.int64), np.full(len(new), len(values) - 1)
    while (low < high).any():       # the first value at which the stages hold every core layer
        middle = (low + high) // 2
        enough = (new * held[:, middle].T).sum(axis=1) >= count
        low, high = np.where(enough, low, middle + 1), np.where(enough, middle, high)
    return values[low]


def _filled_pipeline(work: np.ndarray, new: np.ndarray, pace: np.ndarray, lowest: np.ndarray, busy: np.ndarray,
                     fixed: np.ndarray, B: int) -> np.ndarray:
    """Per row, min over M >= `lowest` of (B - 1) (M + busy) + S(M) + fixed, where S(M) fills
    `work` into the stages fastest first, a stage of class k (`new`: (rows, classes) stages per
    class; `pace`: each class's seconds per unit of work, ascending) taking up to M / pace_k at
    pace_k. M bounds every stage's compute, so for any partition with bottleneck compute M the
    stages' compute sums to at least S(M); `busy` is what every stage's busy time adds to its
    compute at least (the cheapest send, the per-micro-batch overhead), `fixed` what the fill and
    drain add (the cheapest send at every boundary, the overhead at every stage).

    S is convex, decreasing, and linear between the M at which the k fastest classes alone take
    all the work, so the minimum lies at `lowest` or at one of those above it. Classes of equal
    pace fill alike: they are counted as one (many node groups of one GPU type cost one class)."""
    distinct = np.flatnonzero(np.concatenate([[True], np.diff(pace) > 0]))
    if len(distinct) < len(pace):
        new, pace = np.add.reduceat(new, distinct, axis=1), pace[distinct]
    capacity = np.cumsum(new / pace[None, :], axis=1)                     # work per unit of M
    with np.errstate(divide="ignore"):
        kinks = work[:, None] / capacity                                   # (rows, classes); inf: no stage yet
    points = np.maximum(np.concatenate([lowest[:, None], kinks], axis=1), lowest[:, None])     # (rows, P)
    finite = np.isfinite(points)
    points = np.where(finite, points, lowest[:, None])
    cap = new[:, None, :] * points[:, :, None] / pace[None, None, :]       # (rows, P, classes)
    before = np.cumsum(cap, axis=2) - cap
    placed = np.clip(work[:, None, None] - before, 0.0, cap)
    fill = (placed * pace[None, None, :]).sum(axis=2)
    total = (B - 1) * (points + busy[:, None]) + fill + fixed[:, None]
    return total.min(axis=1)


def _subset_min(per_group: np.ndarray, in_subset: np.ndarray) -> np.ndarray:
    """Per subset of groups (rows of `in_subset`), the element-wise minimum of its groups' rows."""
    return np.where(in_subset[:, :, None], per_group[None, :, :], np.inf).min(axis=1)
