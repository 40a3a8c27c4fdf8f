"""Lower bounds that hold for every node order at once: one floor per (tp, pp, dp, micro-batch
size) family bounds all its orders, so a cluster of many node groups is pruned family by family,
and only the families that might win are expanded into their orders (expand_family).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import DP_BUCKET_BYTES, Candidate, CostModel
from amp_tui.core.costmodel.memory import least_reserve, optimizer_traffic_per_param
from amp_tui.core.search.bounds.floors import (
    FLOOR_BATCH,
    REFINE_MIN_LAYERS,
    layer_thresholds,
    memory_shortfall,
    one_layer_each,
    pipeline_floors,
    time_floors,
    whole_layers_floor,
)


def _orders_can_hold(candidate: Candidate, roomiest: np.ndarray) -> bool:
    """Whether some node order might fit the model in memory, with `candidate` any order's
    candidate of its (tp, pp, dp, micro-batch size) (their memory terms do not depend on the
    order) and `roomiest` the node groups by usable GPU memory, most first. A stage's capacity is
    its smallest GPU's, so no more stages have at least the k-th roomiest group's than the k
    roomiest groups' GPUs make up; a stage holds at most the layers whose state and activations
    (with the fewest micro-batches any stage keeps in flight) and the least transient peak fit
    there, the smallest first; the stages must hold every layer between them."""
    per_stage = candidate.layout.tp * candidate.dp
    act_prefix, peak, in_flight = candidate.memory_arrays
    need = np.cumsum(np.sort(np.diff(candidate.state_prefix) + float(in_flight.min()) * np.diff(act_prefix)))
    groups = candidate.cost.scenario.cluster.nodes
    training = candidate.cost.training
    room = np.array([groups[g].gpu.usable_memory_bytes - least_reserve(training, groups[g].gpu) for g in roomiest]) \
        - float(peak.min())
    held = (need[None, :] <= room[:, None]).sum(axis=1)                    # layers per group's stage
    gpus = np.array([groups[g].gpus_per_node * groups[g].count for g in roomiest])
    stages = np.minimum(np.cumsum(gpus) // per_stage, candidate.pp)
    return int((held * np.diff(stages, prepend=0)).sum()) >= candidate.num_layers


def order_free_floors(cost: CostModel, families: list[tuple[int, int, int, int]],
                       cancel: Callable[[], bool], ends: bool = False) -> list[float]:
    """Per (tp, pp, dp, micro-batch size), a lower bound on the iteration time of every node order
    (the bound of time_floors, relaxed to hold whatever the order): every group serves a stage
    (all GPUs are used); no tensor-parallel link on a group's GPUs is faster than that group's
    fastest link (its intra-node one when the rings cannot leave a node), so b and the slow-downs
    are taken there; no more stages can be served by the k
    least slowed-down groups alone than their GPUs make up, so each stage's slow-down is at least
    the one of the sorted multiset that this count allows (the pipeline floor only falls as
    slow-downs fall); the bottleneck holds whole core layers and every stage a layer of its own
    (whole_layers_floor, one_layer_each, on that multiset); each stage sends across at least one
    boundary, the cheapest cut over the fastest link, or, with whole nodes per stage, over its
    groups' network interfaces (_node_cuts, paired with the slow-downs); the optimizer step and the all-reduce as
    _order_free_tails bounds them, both ways as time_floors counts them (added whole, or with
    backward hiding part of the all-reduce); the memory caps are left out. A family no order can
    fit in memory (_orders_can_hold) gets inf. With `ends` (dearer: a pass per way of placing
    the pipeline's two ends), interior stages send across both their boundaries."""
    from amp_tui.core.costmodel.placement import Nodes

    scenario = cost.scenario
    groups = scenario.cluster.nodes
    nodes = Nodes(scenario.cluster, tuple(range(len(groups))), cost.params)
    fastest_link = 1.0 / max(float(nodes.intra.max()), float(nodes.inter.max()))
    # A tensor-parallel ring holding a group's GPU runs inside its node or leaves it through its
    # network interface: its slowest link is no faster than the faster of the group's two. Unless
    # it may cross nodes, it stays inside one node (tp x cp divides every node's GPU count, and
    # ranks fill whole nodes), on that node's own link.
    intra = np.array([float(nodes.intra[nodes.node_group == g].max()) for g in range(len(groups))])
    inter = np.array([float(nodes.inter[nodes.node_group == g].max()) for g in range(len(groups))])
    any_link, own_node = 1.0 / np.maximum(intra, inter), 1.0 / intra
    per_node = np.array([group.gpus_per_node for group in groups])
    least_latency = min(float(nodes.intra_latency.min()), float(nodes.inter_latency.min()))
    node_link, node_latency = _node_cuts(nodes, len(groups))
    hop_latency = (float(nodes.intra_latency.min()), float(nodes.inter_latency.min()))
    least_output = float(cost._output[:-1].min()) if len(cost._output) > 1 else 0.0
    gpus = np.array([group.gpus_per_node * group.count for group in groups])
    kinds = [layer.kind for layer in cost.model.layers]
    common = max(dict.fromkeys(kinds), key=kinds.count)
    out = []
    roomiest = np.argsort([-group.gpu.usable_memory_bytes for group in groups], kind="stable")
    for tp, pp, dp, mbs in families:
        if cancel():
            raise Cancelled
        any_order = cost.candidate(tp, pp, dp, mbs, tuple(range(len(groups))))
        if not _orders_can_hold(any_order, roomiest):
            out.append(math.inf)
            continue
        inside = not scenario.search.allow_cross_node_tp and not (per_node % (tp * cost.knobs.cp)).any()
        spb = (own_node if inside else any_link) * cost.tp_exposed if tp * cost.knobs.cp > 1 else np.zeros(len(groups))
        times = np.array([cost.bound_times(g, tp, mbs, spb[g]) for g in range(len(groups))])
        fastest = times.min(axis=0)
        busy = fastest > 0
        core = np.array([kind == common for kind in kinds]) & busy
        per_stage = tp * cost.knobs.cp * dp
        B = scenario.training.global_batch_size // (dp * mbs)
        v = cost.knobs.virtual_stages
        k = np.arange(1, len(fastest) + 1)
        m_floor = float((np.ceil(k / pp) * np.sort(fastest)[::-1]).max())
        # every stage sends across one boundary at least, each at least the cheapest cut (as
        # Candidate.cut_cost prices it: each of the tp x cp ranks sends its share) over the
        # fastest link, or, with whole nodes per stage, over its groups' interfaces (_node_cuts)
        unit = 2.0 * v * mbs / (cost.knobs.cp * tp) * least_output
        whole_nodes = pp > 1 and len(set(per_node.tolist())) == 1 and per_stage % int(per_node[0]) == 0
        cuts = unit * node_link + 2.0 * v * node_latency if whole_nodes else \
            np.full(len(groups), unit * fastest_link + 2.0 * v * least_latency if pp > 1 else 0.0)
        variants = []
        for mask, work, other in ((busy, float(fastest.sum()), 0.0),
                                  (core, float(fastest[core].sum()), float(fastest[~core].sum()))):
            if not mask.any():
                continue
            slowdown = (times[:, mask] / fastest[mask]).min(axis=1)
            ascending = np.argsort(slowdown, kind="stable")
            stages = np.diff(np.minimum(np.cumsum(gpus[ascending]) // per_stage, pp), prepend=0)
            rho = np.repeat(slowdown[ascending], stages)
            # the cheapest cut of the group and of every group after it in this order (see _node_cuts)
            sends = np.repeat(np.minimum.accumulate(cuts[ascending][::-1])[::-1], stages)
            if mask is busy:    # (the core slow-down says nothing of the other layers)
                m_floor = max(m_floor, float(one_layer_each(rho[None, :], np.sort(fastest)[None, :])[0]))
            variants.append((rho, sends, stages, work, other))
        # With whole nodes per stage, interior stages send across both their boundaries: per
        # variant, the sends of every choice of the pipeline's two ends.
        choices = [[np.where(np.isin(np.arange(pp), pair), sends, 2.0 * sends) for pair in _end_choices(stages)]
                   if whole_nodes and ends else [] for _, sends, stages, _, _ in variants]
        choices = [rows or [variant[1]] for rows, variant in zip(choices, variants)]
        whole = None
        if core.any():      # whole core layers, each at least its slow-down x its fastest time
            stage_times = variants[-1][0][:, None] * np.sort(fastest[core])[None, :]
            whole = whole_layers_floor(layer_thresholds(
                np.broadcast_to(stage_times, (len(choices[-1]), *stage_times.shape)), np.array(choices[-1])))
            m_floor = max(m_floor, float(whole.min()))
        tail, full_tail, hidden = _order_free_tails(any_order, gpus, inter, inside, int(per_node.max()),
                                                    hop_latency)
        tails = [(B - 1, tail)] + ([(B - 1 - hidden, full_tail)] if 0 < hidden <= B - 1 else [])
        rows = [(i, j, variants[i][0], sends, variants[i][3],
                 max(m_floor, float(whole[j])) if whole is not None and i == len(variants) - 1 else m_floor,
                 steps, end)
                for i in range(len(variants)) for j, sends in enumerate(choices[i]) for steps, end in tails]
        if not rows:        # (no layer takes any time)
            out.append(tail)
            continue
        floors = pipeline_floors(np.array([row[2] for row in rows]), np.array([row[3] for row in rows]),
                                  np.array([row[4] for row in rows]), np.array([row[5] for row in rows]),
                                  np.array([v * row[6] + 1.0 for row in rows])) / v
        # the fill: every boundary's cut, that of a stage sending (all but the last), so at least
        # the pp - 1 least single sends
        fill = max(float(np.sort(sends)[:pp - 1].sum()) for _, sends, _, _, _ in variants) / v
        # An order's ends are one choice per variant: per choice, the strongest over the tails;
        # per variant, the least over its choices; the strongest variant.
        per_choice: dict[tuple[int, int], float] = {}
        for floor, row in zip(floors, rows):
            value = float(floor) + fill + variants[row[0]][4] / v + row[7]     # (the other layers, as in time_floors)
            per_choice[row[:2]] = max(per_choice.get(row[:2], -math.inf), value)
        out.append(max(min(value for (i, _), value in per_choice.items() if i == variant)
                       for variant in range(len(variants))))
    return out


def _end_choices(stages: np.ndarray) -> list[list[int]]:
    """The ways the pipeline's two ends (two distinct stages) can fall in a multiset given in
    blocks of `stages` equal entries: a pair of entries per pair of blocks (entries of one block
    are interchangeable)."""
    if stages.sum() <= 2:
        return []
    starts = np.cumsum(stages) - stages
    blocks = [b for b in range(len(stages)) if stages[b]]
    return [[int(starts[a]), int(starts[b] + (a == b))] for i, a in enumerate(blocks) for b in blocks[i:]
            if a != b or stages[a] >= 2]


def _node_cuts(nodes, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node group g, (seconds per byte, latency) that bound every pipeline send of a stage
    holding g's GPUs from below, when every stage holds whole nodes (all nodes alike, their GPU
    count dividing a stage's): a send then always leaves its node, each node of a stage sends (or,
    the last stage's, receives) one flow per GPU across its boundary, so a flow from or to a node
    of g gets at most min(its interface / its GPUs, one flow's share), and pays at least g's
    crossing latency. A stage's cheapest cut is at least its groups' largest, so at least the
    group whose slow-down sets the stage's rho (in order_free_floors's order): the multiset of
    (rho, sends) pairs there, sends taken as the least of the group's and every later group's
    (a stage's group lies at or after its multiset entry's), is below every order's stages."""
    per_group = [nodes.node_group == g for g in range(count)]
    share = np.array([float(np.max(np.minimum(nodes.inter[on] / nodes.gpus_per_node[on], nodes.inter_flow[on])))
                      for on in per_group])
    return 1.0 / share, np.array([float(nodes.inter_latency[on].min()) for on in per_group])


def _order_free_tails(candidate: Candidate, gpus: np.ndarray, inter: np.ndarray, inside: bool,
                      per_node: int, hop_latency: tuple[float, float]) -> tuple[float, float, float]:
    """(the tail floor, the all-reduce's full tail, the share of compute that hides it) of
    time_floors, relaxed to hold for every node order (`candidate`: any order's, for what does
    not depend on the order; `gpus`, `inter`: per node group, its GPUs and its network link;
    `hop_latency`: the least intra-node and crossing hop latencies of the cluster).

    A stage's tail coefficient e_s is its optimizer step's (traffic / its slowest memory) plus,
    for a plain data-parallel all-reduce, its gradient bytes x (seconds per byte reduced + one
    bucket's latency per bucket bytes). The seconds per byte are at least 2 (N - 1) / N x the
    slowest flow of the ring, over N >= ceil(dp / ceil(GPUs per node / t)) nodes (t = tp x cp:
    ranks of one ring lie t apart). With N >= 2 every node the rings visit sends one crossing
    flow per ring, and with tensor parallelism inside nodes each node of the stage holds a whole
    tensor-parallel group, so all t rings: the flow gets at most 1 / t of the node's link. So
    e_s >= e(g) for every group g serving the stage, and, as for the slow-downs, no more stages
    have e at most the k-th best e(g) than the k best groups' GPUs make up: sum_s 1 / e_s is at
    most that sorted multiset's. A bucket's latency is at least _allreduce_latency_floor's; it
    is also the least per-stage constant of the full tail (the last bucket's)."""
    layout_tp = candidate.layout.tp
    per_stage = layout_tp * candidate.dp
    overhead = candidate.iteration_overhead
    memory_bandwidth = np.array([group.gpu.memory_bandwidth for group in candidate.cost.scenario.cluster.nodes])
    optimizer = optimizer_traffic_per_param(candidate.cost.training, candidate.shard_group,
                                            candidate.knobs.zero_stage) / memory_bandwidth
    spanned = -(-candidate.dp // -(-per_node // layout_tp))
    plain = candidate.knobs.zero_stage < 3 and not candidate.hsdp and spanned > 1
    ring = 2.0 * (spanned - 1) / spanned * (layout_tp if inside else 1) / inter if plain else 0.0
    bucket = _allreduce_latency_floor(candidate.dp, spanned, *hop_latency) if plain else 0.0
    full = candidate.state.reduced * (ring + bucket / DP_BUCKET_BYTES) + optimizer
    params = float(candidate.param_prefix[-1])

    def spread(coef: np.ndarray) -> float:
        """params / the largest sum_s 1 / e_s the stages can have."""
        if not np.all(coef > 0):
            return 0.0
        best_first = np.argsort(coef, kind="stable")
        stages = np.minimum(np.cumsum(gpus[best_first]) // per_stage, candidate.pp)
        return params / float((np.diff(stages, prepend=0) / coef[best_first]).sum())

    hidden = float(candidate.hidden_share)
    return (spread(optimizer) + overhead if hidden else spread(full) + bucket + overhead,
            spread(full) + bucket + overhead, hidden)


def _allreduce_latency_floor(n: int, spanned: int, intra: float, inter: float) -> float:
    """A floor on placement.Nodes.allreduce_latency for a ring of n ranks over at least `spanned`
    (>= 2) nodes, whatever the nodes (`intra`, `inter`: the least hop latencies of each kind). The
    ring crosses between nodes N times, spanned <= N <= n (a node's ranks lie together along it),
    and its other n - N hops stay inside nodes: the ring's price, 2 (n - 1) x the mean hop, is at
    least 2 (n - 1) ((n - N) intra + N inter) / n, and the tree's, 2 ((n / N - 1) x the slowest
    intra-node hop + ceil(log2 N) x the slowest crossing), at least the same with these least
    latencies; the least over N of the cheaper of the two."""
    crossings = np.arange(spanned, n + 1, dtype=np.float64)
    ring = 2.0 * (n - 1) * ((n - crossings) * intra + crossings * inter) / n
    tree = 2.0 * ((n / crossings - 1.0) * intra + np.ceil(np.log2(crossings)) * inter)
    return float(np.minimum(ring, tree).min()) * (1.0 - 1e-12) if len(crossings) else 0.0


def family_entries(costs: list[CostModel], keys: list[tuple], cancel: Callable[[], bool]) -> list[tuple]:
    """Per (tp, pp, dp, micro-batch size, cost model) family among `keys` with more than one stage
    or replica (the others have a single order), a queue entry (its bound over every node order,
    its key with an empty order, False, None)."""
    families: dict[int, dict[tuple[int, int, int, int], None]] = {}
    for tp, pp, dp, mbs, _, k in keys:
        if pp > 1 or dp > 1:
            families.setdefault(k, {})[(tp, pp, dp, mbs)] = None
    out = []
    for k, members in families.items():
        for family, floor in zip(members, order_free_floors(costs[k], list(members), cancel)):
            out.append((floor, (*family, (), k), False, None))
    return out


def expand_family(cost: CostModel, key: tuple, orders: tuple[tuple[int, ...], ...], floor: float,
                   cancel: Callable[[], bool], limit: float) -> list[tuple]:
    """Queue entries for a family's candidates over `orders` (`key`: the family's, `floor`: its
    bound over every order): those that might fit in memory, each at the larger of its own bound
    and the family's (`limit`: the search's, as time_floors takes it)."""
    tp, pp, dp, mbs, _, k = key
    # Below the family's bound their cheap bounds say little (the family's is the same relaxation
    # over every order): on deep models, straight to the refined bound. A few at a time, between
    # cancellation polls (FLOOR_BATCH: time_floors's own batch, its vectorised passes the fewer);
    # the entries hold no candidate (the search rebuilds those it reaches).
    refine = cost.model.num_layers >= REFINE_MIN_LAYERS
    out = []
    for start in range(0, len(orders), FLOOR_BATCH):
        fitting = []
        for order in orders[start:start + FLOOR_BATCH]:
            if cancel():        # (an order's first layout places its stages' ranks not met before)
                raise Cancelled
            candidate = cost.candidate(tp, pp, dp, mbs, order)
            if not memory_shortfall(candidate):
                fitting.append(candidate)
        floors = time_floors(fitting, cancel, refine=refine, limit=limit)
        out += [(max(own, floor), (tp, pp, dp, mbs, candidate.layout.order, k), refine, None)
                for own, candidate in zip(floors, fitting)]
    return out
