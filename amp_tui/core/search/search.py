"""Search the strategy space: every (tp, pp, dp, micro-batch size, node-group order) with its exact
best partition, ranked by predicted iteration time.

Candidates are visited best-first by a lower bound on their iteration time; once the bound of the
next candidate cannot beat the N-th best strategy found, the rest are pruned. The bound and the
partition search are exact, so pruning never drops a strategy that belongs in the top N.
"""

from __future__ import annotations

import functools
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.costmodel.cost import DP_BUCKET_BYTES, Candidate, CostModel
from amp_tui.core.costmodel.prediction import Prediction, over_capacity
from amp_tui.core.base.errors import Cancelled
from amp_tui.core.spec.knobs import Knobs, default_knobs, knob_choices
from amp_tui.core.costmodel.memory import optimizer_traffic_per_param
from amp_tui.core.search.orders import NodeOrders, node_orders
from amp_tui.core.search.partition import solve
from amp_tui.core.search.tables import SegmentTables
from amp_tui.core.search.segment_dp import INF
from amp_tui.core.search.segment_memory import even_split_memory, partitions_fit
from amp_tui.core.costmodel.pricing import priced
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy, even_partition
from amp_tui.core.base.units import format_bytes


@dataclass(frozen=True)
class Infeasible:
    strategy: Strategy
    reason: str

    def to_dict(self) -> dict:
        return {**self.strategy.to_dict(), "reason": self.reason}


@dataclass(frozen=True)
class SearchStats:
    candidates: int       # (tp, pp, dp, micro-batch size, placement) combinations
    pruned: int           # skipped: a lower bound proved them out of the top N
    evaluated: int        # partition search run
    infeasible: int       # no partition fits in memory (pruned or not)
    solves: int           # partition solves: DPs, plus one per one- or two-stage enumeration
    node_orders: int      # orders of node groups along the pipeline
    all_node_orders: bool  # False: too many distinct orders; rank order and by GPU speed only
    search_time_s: float
    # Not every order searched: a lower bound on every candidate of an order left out (inf: none
    # can beat the N-th best found, so the ranking is exact all the same).
    orders_floor: float = math.inf

    @property
    def exact(self) -> bool:
        """Whether the ranking is the best over every node order."""
        return self.all_node_orders or self.orders_floor == math.inf

    def orders_gap(self, best: float | None) -> float | None:
        """Not exact: the most the best found (`best` seconds) can be above the optimum."""
        if self.exact or best is None:
            return None
        return max(best / self.orders_floor - 1.0, 0.0)

    def to_dict(self) -> dict:
        return {"candidates": self.candidates, "pruned": self.pruned, "evaluated": self.evaluated,
                "infeasible": self.infeasible, "solves": self.solves, "node_orders": self.node_orders,
                "all_node_orders": self.all_node_orders, "exact": self.exact,
                "orders_floor": None if self.exact else self.orders_floor, "search_time_s": self.search_time_s}


@dataclass(frozen=True)
class SearchResult:
    scenario: Scenario
    strategies: tuple[Prediction, ...]     # feasible, best first
    infeasible: tuple[Infeasible, ...]
    baseline: Prediction | None            # best even split in rank order
    stats: SearchStats

    @property
    def speedup_vs_baseline(self) -> float | None:
        if not self.strategies or self.baseline is None:
            return None
        return self.baseline.iteration_time_s / self.strategies[0].iteration_time_s

    def to_dict(self, top: int | None = None) -> dict:
        """Everything, with the best `top` strategies (default: all that were ranked)."""
        return {
            "scenario": self.scenario.name,
            "search_time_s": self.stats.search_time_s,
            "candidates": self.stats.candidates,
            "statistics": self.stats.to_dict(),
            "strategies": [{"rank": i + 1, **p.to_dict()} for i, p in enumerate(self.strategies[:top])],
            "infeasible": [entry.to_dict() for entry in self.infeasible],
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup_vs_baseline": self.speedup_vs_baseline,
        }


PREPARATION = 0.2  # share of the progress bar for enumerating and bounding candidates
FLOOR_BATCH = 64   # candidates bounded in one vectorised pass, between cancellation polls (fewer when deeper)
REFINE_BATCH = 16  # candidates at the head of the queue given the refined bound together
REFINE_MIN_LAYERS = 64   # ... on models this deep (on shallower ones the partition solve is cheaper)
COUPLED_RANGES = 6       # ranges of the bottleneck over which the coupled floor bounds the tail (_coupled_floors)
BISECTIONS = 20          # halvings of the interval holding that tail (_held_tails)


@functools.lru_cache(maxsize=256)
def divisors(n: int, up_to: int | None = None) -> tuple[int, ...]:
    """The divisors of n (those up to `up_to`), ascending; by trial division up to sqrt(n), or up to
    `up_to` when that is smaller, so that a batch of 10^12 costs no more than a GPU count."""
    if up_to is not None and up_to * up_to < n:
        return tuple(d for d in range(1, up_to + 1) if n % d == 0)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(d for d in sorted(set(small + [n // d for d in small])) if up_to is None or d <= up_to)


def tp_degrees(scenario: Scenario) -> list[int]:
    """Divisors of GPUs per node (common to every group), or of the GPU count across nodes."""
    cluster = scenario.cluster
    if scenario.search.allow_cross_node_tp:
        options = divisors(cluster.num_gpus)
    else:
        options = divisors(math.gcd(*(group.gpus_per_node for group in cluster.nodes)))
    heads = scenario.model.shape.get("num_heads")
    return [tp for tp in options if not heads or heads % tp == 0]


def enumerate_candidates(scenario: Scenario, orders: NodeOrders | None = None, knobs: Knobs | None = None
                         ) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
    """Every (tp, pp, dp, micro-batch size, node-group order) to search with these training
    techniques (default: the training section's), over `orders` (by default
    node_orders(scenario)). One pipeline stage with one replica has a single order: rank order.
    Context parallelism takes its share of the GPUs (tp x cp x pp x dp); combinations a
    technique cannot change are left out (sequence parallelism without tensor parallelism,
    interleaving without a pipeline to interleave). Expert parallelism takes its ep GPUs from
    the dp x cp ranks (ep divides dp x cp), hybrid sharding its groups from the dp ranks (the
    shard group divides dp and is smaller)."""
    knobs = knobs or default_knobs(scenario.training)
    n = scenario.cluster.num_gpus
    layers = scenario.model.num_layers
    gbs = scenario.training.global_batch_size
    cp, v = knobs.cp, knobs.virtual_stages
    out = []
    if n % cp or (cp > 1 and scenario.model.sequence_length % (2 * cp)):
        return out
    orders = (orders or node_orders(scenario)).orders
    for tp in tp_degrees(scenario):
        if (n // cp) % tp or (knobs.sequence_parallel and tp == 1) or tp * cp > _largest_node(scenario, tp):
            continue
        for pp in divisors(n // (tp * cp)):
            if pp * v > layers:
                break
            if v > 1 and pp == 1:
                continue
            dp = n // (tp * cp * pp)
            if gbs % dp or (dp * cp) % knobs.ep or (knobs.hsdp_shard and (dp % knobs.hsdp_shard or
                                                                          knobs.hsdp_shard >= dp)):
                continue
            for mbs in divisors(gbs // dp, up_to=scenario.search.max_micro_batch_size):
                if v > 1 and (gbs // (dp * mbs)) % pp:   # Megatron: micro-batches a multiple of pp
                    continue
                for order in (orders if pp > 1 or dp > 1 else orders[:1]):
                    out.append((tp, pp, dp, mbs, order))
    return out


def _largest_node(scenario: Scenario, tp: int) -> int:
    """Context-parallel rings stay inside a node with tensor parallelism unless tp may span nodes."""
    if scenario.search.allow_cross_node_tp:
        return scenario.cluster.num_gpus
    return math.gcd(*(group.gpus_per_node for group in scenario.cluster.nodes))


def _memory_shortfall(candidate: Candidate) -> str | None:
    """Why no partition can fit, from two necessary conditions, or None if both hold.

    The fullest stage holds at least an even share of the weights, gradients and optimizer state
    (or the largest layer's). And stage s, holding its in-flight micro-batches' activations, has room
    for at most (capacity_s - reserve) / in_flight_s bytes per micro-batch of them, so the stages
    together must have room for every layer's activations plus the state.
    """
    cost = candidate.cost
    reserve = cost.training.runtime_reserve_bytes
    state_sum, state_max, capacity_max, room, in_flight_max = _memory_totals(candidate)
    state = max(state_sum / candidate.pp, state_max)
    if state + reserve > capacity_max:
        return f"weights, gradients and optimizer state need at least {format_bytes(state)} per GPU"
    act_prefix, _, _ = candidate.memory_arrays
    need = float(act_prefix[-1]) + state_sum / in_flight_max
    if need > room:
        return (f"activations of micro-batch {candidate.mbs} and the state need {format_bytes(need)} of room "
                f"per micro-batch in flight; the stages have {format_bytes(room)}")
    return None


def _memory_totals(candidate: Candidate) -> tuple[float, float, float, float, float]:
    """(all state bytes, the largest layer's, the largest stage capacity, the stages' room per
    micro-batch in flight, the most micro-batches in flight), each cached as far as it is shared."""
    cost, layout = candidate.cost, candidate.layout
    cache = cost.floor_cache
    state_key = ("state", candidate.tp, candidate.dp, candidate.pp)
    if state_key not in cache:
        # per GPU and layer (the memory terms' count: 1/ep of each MoE layer's experts, their state
        # sharded over the expert data-parallel group)
        state = np.diff(candidate.state_prefix)
        cache[state_key] = (float(state.sum()), float(state.max()))
    in_flight = candidate.memory_arrays[2]
    room_key = ("room", layout.tp, layout.pp, layout.dp, layout.order, in_flight.tobytes())
    if room_key not in cache:
        capacity = layout.stage_capacity
        room = np.sum((capacity - cost.training.runtime_reserve_bytes) / in_flight)
        cache[room_key] = (float(capacity.max()), float(room), float(in_flight.max()))
    return cache[state_key] + cache[room_key]


def _time_floors(candidates: list[Candidate], cancel: Callable[[], bool], refine: bool = True,
                 limit: float | None = None) -> list[float]:
    """A lower bound on each candidate's iteration time over every partition (terms as in cost.py).

    With b_l a layer's time on the fastest GPU serving the pipeline, rho_s the least slow-down of
    stage s's GPUs against b, and f_s the cheapest sends on either side of stage s, a stage's busy
    time is tau_s >= C_s + f_s with C_s >= rho_s x (its share of sum b). Then
      (B - 1) max tau + sum C >= min over M of (B - 1) M + S(M), where S(M) fills stages fastest
        first, each up to C_s = M - f_s, until all of sum b is placed (a fractional relaxation),
        and M >= ceil(k / pp) x (k-th largest b) since k layers that slow must share pp stages,
        M >= _one_layer_each (every stage holds a layer) and, refined, M >= _whole_layers_floor
        (no stage holds part of a layer, on its own GPUs' times) and M >= the cheapest layer each
        stage must hold (_lone_layers);
      fill adds the cheapest cut at every boundary; tail >= all parameters / sum_s (1 / e_coef_s).
    Candidates with the same pp are solved together, up to FLOOR_BATCH at a time (8 FLOOR_BATCH
    stages: their arrays grow with pp, e.g. (pp, L) layer times per candidate); `cancel` is
    polled between batches. Without `refine`, only this bound (cheaper); with it, the strongest
    of the variants in pipeline_floor below and the exposed all-reduce; with a `limit` too (the
    search's), and without interleaving, the bound that couples the bottleneck with the tail
    (_coupled_floors: whole layers, so a low bottleneck leaves the slow stages many layers to
    all-reduce) where the others are still below it. That one costs about a millisecond per
    batch: it pays where a family's orders are bounded (_expand_family, hundreds of candidates
    whose solves it saves), not in the search queue's few at a time.
    """
    floors = [0.0] * len(candidates)
    by_pp: dict[int, list[int]] = {}
    for index, candidate in enumerate(candidates):
        by_pp.setdefault(candidate.pp, []).append(index)
    size = {pp: max(1, min(FLOOR_BATCH, 8 * FLOOR_BATCH // pp)) for pp in by_pp}
    batches = [(pp, members[i:i + size[pp]]) for pp, members in by_pp.items()
               for i in range(0, len(members), size[pp])]
    for pp, members in batches:
        if cancel():
            raise Cancelled
        group = [candidates[index] for index in members]
        layout_terms = [_layout_floor_terms(c) for c in group]
        times = [_fastest_times(c, terms[2]) for c, terms in zip(group, layout_terms)]
        slowdown = np.array([t[1] for t in times])                       # (n, node groups)
        descending = np.array([t[3] for t in times])                     # (n, L)
        work = np.array([t[2] for t in times])
        mbs = np.array([c.mbs for c in group], dtype=np.float64)
        cheapest_cut = (np.array([t[0][0] for t in layout_terms]).reshape(len(group), pp - 1) * mbs[:, None]
                        + np.array([t[0][1] for t in layout_terms]).reshape(len(group), pp - 1))
        tail = np.array([t[1] for t in layout_terms])
        serves = np.array([c.layout.serves for c in group])             # (n, pp, node groups)
        rho = np.where(serves, slowdown[:, None, :], 0.0).max(axis=2)
        sends = np.zeros((len(group), pp))
        sends[:, :-1] += cheapest_cut
        sends[:, 1:] += cheapest_cut
        k = np.arange(1, descending.shape[1] + 1)
        m_floor = np.maximum((np.ceil(k / pp)[None, :] * descending).max(axis=1),
                             _one_layer_each(rho, descending[:, ::-1]))
        if refine:      # on the stage's own GPUs (the slowest serving type's, its tp link included)
            if cancel():        # (the refined terms take tens of ms on 1,000 layers)
                raise Cancelled
            core = group[0].cost.floor_cache["core layers"]
            stage_times = np.array([c.stage_layer_times[0] for c in group])               # (n, pp, L)
            thresholds = _layer_thresholds(stage_times[:, :, core], sends + _end_layers(stage_times, core))
            if cancel():
                raise Cancelled
            m_floor = np.maximum.reduce([m_floor, _whole_layers_floor(thresholds),
                                         (sends + _lone_layers(stage_times)).max(axis=1)])
        B = np.array([c.num_micro_batches for c in group], dtype=np.float64)
        v = np.array([c.knobs.virtual_stages for c in group], dtype=np.float64)
        core_rho = np.where(serves, np.array([t[4] for t in times])[:, None, :], 0.0).max(axis=2)
        other = np.array([t[5] for t in times])
        core_work = work - other
        plain = v == 1
        caps = np.array([_stage_caps(c, t[3]) for c, t in zip(group, times)]) if refine and plain.any() else None
        if refine and cancel():
            raise Cancelled

        def pipeline_floor(steps: np.ndarray) -> np.ndarray:
            """min over M of steps x M + S(M) / v, the strongest of the variants below."""
            # With v interleaved chunks the fill and drain count 1/v: steps M + S / v is
            # ((v steps + 1 - 1) M + S) / v, the same problem with more micro-batches.
            out = _pipeline_floors(rho, sends, work, m_floor, v * steps + 1) / v
            if not refine:
                return out
            # The same with the least slow-down over the core layers only (the most common kind,
            # e.g. transformer blocks; an embedding may run nearly as fast on a slow GPU): a
            # stage's C_s is at least rho'_s x (its share of sum b less the other layers' b, E),
            # so the stages must absorb work - E at the pace rho'; the other layers' time (at least
            # E) adds to the stages' sum wherever they lie.
            out = np.maximum(out, (_pipeline_floors(core_rho, sends, core_work, m_floor, v * steps + 1) + other) / v)
            # Memory caps the layers a stage can hold (a slow GPU with little memory often holds
            # fewer layers than its speed would give it, and the others must take the rest): with
            # interleaving a stage's layers are spread over its chunks, so only without it.
            if caps is not None and (caps < work[:, None] * (1 - 1e-9)).any():     # else no cap binds
                capped = np.maximum(_capped_floors(rho, sends, work, caps, steps + 1),
                                    _capped_floors(core_rho, sends, core_work, caps, steps + 1) + other)
                out = np.where(plain, np.maximum(out, capped), out)
            return out

        base = pipeline_floor(B - 1)
        pipeline = base + tail
        # Where backward hides part of the all-reduce, E_s >= e_s P_s + latency - h C_s with
        # C_s <= max tau = M: the tail is at least all parameters / sum_s (1 / e_s) less h M, so
        # the steady state counts B - 1 - h bottlenecks and the full tail is added (while B - 1 >= h).
        exposed = [_exposed_tail_terms(c) for c in group] if refine else [(0.0, 0.0)] * len(group)
        hidden = np.array([t[0] for t in exposed])
        steps = B - 1 - hidden
        hidden_base = base
        if refine and (hidden > 0).any() and (steps >= 0).any():
            if cancel():
                raise Cancelled
            full_tail = np.array([t[1] for t in exposed])
            hidden_base = pipeline_floor(np.maximum(steps, 0.0))
            pipeline = np.where((hidden > 0) & (steps >= 0), np.maximum(pipeline, hidden_base + full_tail), pipeline)
        if refine and limit is not None and (reach := plain & (pipeline + cheapest_cut.sum(axis=1) / v < limit)).any():
            rows = np.flatnonzero(reach)
            # Its ranges' pipeline floors: the core layers' variant from each range's bottleneck up
            # (on the benchmarks the one that binds there; the others are in hidden_base).
            coupled = _coupled_floors(
                lambda moves, lowest, at: _pipeline_floors(core_rho[rows[at]], sends[rows[at]], core_work[rows[at]],
                                                           lowest, moves + 1) + other[rows[at]],
                hidden_base[rows], [group[i] for i in rows], thresholds[rows], core, m_floor[rows], steps[rows])
            pipeline[rows] = np.maximum(pipeline[rows], coupled)
        for index, value in zip(members, pipeline + cheapest_cut.sum(axis=1) / v):
            floors[index] = float(value)
    return floors


def _pipeline_floors(rho: np.ndarray, sends: np.ndarray, work: np.ndarray, m_floor: np.ndarray,
                     B: np.ndarray) -> np.ndarray:
    """Per row (candidate), min over M of (B - 1) M + S(M) (see _time_floors). S is convex and
    piecewise linear in M, so the minimum sits at the smallest allowed M or where one more stage
    (in order of speed) fills up. Arrays: rho, sends (n, pp); work, m_floor, B (n,)."""
    n, pp = rho.shape
    order = np.argsort(rho, axis=1, kind="stable")
    rho = np.take_along_axis(rho, order, axis=1)
    sends = np.take_along_axis(sends, order, axis=1)
    inverse = np.cumsum(1.0 / rho, axis=1)          # work the first k stages absorb per unit of M
    offset = np.cumsum(sends / rho, axis=1)         # ... less what their sends take
    lowest = np.maximum.reduce([m_floor, sends.max(axis=1), (work + offset[:, -1]) / inverse[:, -1]])
    m = np.concatenate([lowest[:, None], (work[:, None] + offset) / inverse], axis=1)   # (n, pp + 1)
    # Stages filled to M before the rest fits: the first k whose capacity m inverse_k - offset_k
    # reaches the work, by a binary search per M (capacity grows with k where M is above every
    # stage's sends, i.e. at M >= lowest, the only M kept): O(n pp log pp) work and O(n pp)
    # memory, not (n, pp + 1, pp) arrays (134 MB for 64 candidates of 512 stages).
    rows = np.arange(n)[:, None]
    full, high = np.zeros(m.shape, dtype=np.int64), np.full(m.shape, pp)
    while (full < high).any():
        middle = np.minimum((full + high) // 2, pp - 1)
        short = m * inverse[rows, middle] - offset[rows, middle] < work[:, None]
        searching = full < high
        full, high = np.where(searching & short, middle + 1, full), np.where(searching & ~short, middle, high)
    last = np.maximum(full - 1, 0)
    placed = np.where(full > 0, m * inverse[rows, last] - offset[rows, last], 0.0)
    filled = np.where(full > 0, full * m - np.take_along_axis(np.cumsum(sends, axis=1), last, axis=1), 0.0)
    next_rho = np.take_along_axis(rho, np.minimum(full, pp - 1), axis=1)
    rest = np.where(full < pp, (work[:, None] - placed) * next_rho, 0.0)
    total = (B[:, None] - 1) * m + filled + np.maximum(rest, 0.0)
    return np.where(m >= lowest[:, None], total, np.inf).min(axis=1)


def _layer_thresholds(core_times: np.ndarray, sends: np.ndarray) -> np.ndarray:
    """(n, pp, C): per row and stage, the least busy time at which it holds k + 1 of the C layers
    of the most common kind (the core layers, e.g. transformer blocks; `core_times`: (n, pp, C),
    each stage's time for each of them, or a lower bound on it), `sends` (n, pp): what the stage
    is busy with whatever it holds (its cheapest sends) plus its k + 1 cheapest core layers,
    wherever they lie. Ascending along the last axis."""
    return np.cumsum(np.sort(core_times, axis=2), axis=2) + sends[:, :, None]


def _whole_layers_floor(thresholds: np.ndarray) -> np.ndarray:
    """Per row, a floor on the bottleneck's busy time that counts whole core layers
    (`thresholds`: _layer_thresholds's): with every stage busy at most M, stage s holds at most
    K_s(M) of them, the count of its thresholds at or below M. The stages hold all C core layers
    between them, so sum_s K_s(M) >= C: M is at least the C-th smallest of the thresholds over
    every stage. Contiguity, memory and the other layers are relaxed; what it keeps that the
    fractional floors lose is that a stage cannot hold part of a layer."""
    count = thresholds.shape[2]
    if not count:
        return np.zeros(len(thresholds))
    return np.partition(thresholds.reshape(len(thresholds), -1), count - 1, axis=1)[:, count - 1]


def _end_layers(stage_times: np.ndarray, core: np.ndarray) -> np.ndarray:
    """Per row and stage, the time of the layers it holds in every partition that are not core
    layers: the first stage holds the first layer, the last stage the last (`stage_times`: (n, pp,
    L), each stage's time for each layer; `core`: (L,), which layers are core). Added to a stage's
    sends, _whole_layers_floor's thresholds still bound the stage's busy time from below."""
    out = np.zeros(stage_times.shape[:2])
    last = stage_times.shape[2] - 1
    if not core[0]:
        out[:, 0] += stage_times[:, 0, 0]
    if last > 0 and not core[last]:
        out[:, -1] += stage_times[:, -1, last]
    return out


def _lone_layers(stage_times: np.ndarray) -> np.ndarray:
    """Per row and stage, the least time of a layer it holds in every partition (`stage_times`:
    (n, pp, L), each stage's time for each layer): the first stage holds the first layer, the last
    stage the last, and stage s, with s stages before it and pp - 1 - s after it, each holding a
    layer, holds one of layers s ... L - pp + s. A slow GPU in the middle of the pipeline bounds
    the bottleneck by its cheapest core layer, where _one_layer_each may give it the embedding."""
    n, pp, layers = stage_times.shape
    stages = np.arange(pp)[:, None]
    if 2 * (pp - 1) < layers:   # every window holds layers pp - 1 ... L - pp, and s ... pp - 2, L - pp + 1 ... L - pp + s
        edges = np.arange(pp - 1)[None, :]
        out = np.minimum.reduce([stage_times[:, :, pp - 1:layers - pp + 1].min(axis=2),
                                 np.where(edges >= stages, stage_times[:, :, :pp - 1], np.inf).min(axis=2, initial=np.inf),
                                 np.where(edges < stages, stage_times[:, :, layers - pp + 1:], np.inf).min(axis=2, initial=np.inf)])
    else:
        out = stage_times[:, stages, stages + np.arange(layers - pp + 1)[None, :]].min(axis=2)
    out[:, 0] = np.maximum(out[:, 0], stage_times[:, 0, 0])
    out[:, -1] = np.maximum(out[:, -1], stage_times[:, -1, -1])
    return out


def _one_layer_each(rho: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Per row, a floor on the bottleneck stage's compute: every stage holds a layer of its own,
    and a stage at slow-down rho takes at least rho x that layer's fastest time, so the bottleneck
    is at least the least, over the ways of giving each stage a distinct layer, of the largest
    rho x b; the slowest stage with the cheapest layer, the next with the next, and so on, gives
    that least (exchanging two stages' layers never lowers the larger product). Arrays: rho
    (n, pp), the stages' slow-downs; ascending (n, L), the layers' fastest times, ascending."""
    count = min(rho.shape[1], ascending.shape[1])
    slowest_first = -np.sort(-rho, axis=1)[:, :count]
    return (slowest_first * ascending[:, :count]).max(axis=1) if count else np.zeros(len(rho))


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
    room = np.array([groups[g].gpu.usable_memory_bytes for g in roomiest]) \
        - candidate.cost.training.runtime_reserve_bytes - float(peak.min())
    held = (need[None, :] <= room[:, None]).sum(axis=1)                    # layers per group's stage
    gpus = np.array([groups[g].gpus_per_node * groups[g].count for g in roomiest])
    stages = np.minimum(np.cumsum(gpus) // per_stage, candidate.pp)
    return int((held * np.diff(stages, prepend=0)).sum()) >= candidate.num_layers


def _order_free_floors(cost: CostModel, families: list[tuple[int, int, int, int]],
                       cancel: Callable[[], bool], ends: bool = False) -> list[float]:
    """Per (tp, pp, dp, micro-batch size), a lower bound on the iteration time of every node order
    (the bound of _time_floors, relaxed to hold whatever the order): every group serves a stage
    (all GPUs are used); no tensor-parallel link on a group's GPUs is faster than that group's
    fastest link (its intra-node one when the rings cannot leave a node), so b and the slow-downs
    are taken there; no more stages can be served by the k
    least slowed-down groups alone than their GPUs make up, so each stage's slow-down is at least
    the one of the sorted multiset that this count allows (the pipeline floor only falls as
    slow-downs fall); the bottleneck holds whole core layers and every stage a layer of its own
    (_whole_layers_floor, _one_layer_each, on that multiset); each stage sends across at least one
    boundary, the cheapest cut over the fastest link, or, with whole nodes per stage, over its
    groups' network interfaces (_node_cuts, paired with the slow-downs); the optimizer step and the all-reduce as
    _order_free_tails bounds them, both ways as _time_floors counts them (added whole, or with
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
        times = np.array([compute + tp_bytes * spb[g] for g, (compute, tp_bytes) in
                          enumerate(cost.layer_times(g, tp, mbs) for g in range(len(groups)))])
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
                m_floor = max(m_floor, float(_one_layer_each(rho[None, :], np.sort(fastest)[None, :])[0]))
            variants.append((rho, sends, stages, work, other))
        # With whole nodes per stage, interior stages send across both their boundaries: per
        # variant, the sends of every choice of the pipeline's two ends.
        choices = [[np.where(np.isin(np.arange(pp), pair), sends, 2.0 * sends) for pair in _end_choices(stages)]
                   if whole_nodes and ends else [] for _, sends, stages, _, _ in variants]
        choices = [rows or [variant[1]] for rows, variant in zip(choices, variants)]
        whole = None
        if core.any():      # whole core layers, each at least its slow-down x its fastest time
            stage_times = variants[-1][0][:, None] * np.sort(fastest[core])[None, :]
            whole = _whole_layers_floor(_layer_thresholds(
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
        floors = _pipeline_floors(np.array([row[2] for row in rows]), np.array([row[3] for row in rows]),
                                  np.array([row[4] for row in rows]), np.array([row[5] for row in rows]),
                                  np.array([v * row[6] + 1.0 for row in rows])) / v
        # the fill: every boundary's cut, that of a stage sending (all but the last), so at least
        # the pp - 1 least single sends
        fill = max(float(np.sort(sends)[:pp - 1].sum()) for _, sends, _, _, _ in variants) / v
        # An order's ends are one choice per variant: per choice, the strongest over the tails;
        # per variant, the least over its choices; the strongest variant.
        per_choice: dict[tuple[int, int], float] = {}
        for floor, row in zip(floors, rows):
            value = float(floor) + fill + variants[row[0]][4] / v + row[7]     # (the other layers, as in _time_floors)
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
    group whose slow-down sets the stage's rho (in _order_free_floors's order): the multiset of
    (rho, sends) pairs there, sends taken as the least of the group's and every later group's
    (a stage's group lies at or after its multiset entry's), is below every order's stages."""
    per_group = [nodes.node_group == g for g in range(count)]
    share = np.array([float(np.max(np.minimum(nodes.inter[on] / nodes.gpus_per_node[on], nodes.inter_flow[on])))
                      for on in per_group])
    return 1.0 / share, np.array([float(nodes.inter_latency[on].min()) for on in per_group])


def _order_free_tails(candidate: Candidate, gpus: np.ndarray, inter: np.ndarray, inside: bool,
                      per_node: int, hop_latency: tuple[float, float]) -> tuple[float, float, float]:
    """(the tail floor, the all-reduce's full tail, the share of compute that hides it) of
    _time_floors, relaxed to hold for every node order (`candidate`: any order's, for what does
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
    full = candidate.state.weights * (ring + bucket / DP_BUCKET_BYTES) + optimizer
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


def _family_entries(costs: list[CostModel], keys: list[tuple], cancel: Callable[[], bool]) -> list[tuple]:
    """Per (tp, pp, dp, micro-batch size, cost model) family among `keys` with more than one stage
    or replica (the others have a single order), a queue entry (its bound over every node order,
    its key with an empty order, False, None)."""
    families: dict[int, dict[tuple[int, int, int, int], None]] = {}
    for tp, pp, dp, mbs, _, k in keys:
        if pp > 1 or dp > 1:
            families.setdefault(k, {})[(tp, pp, dp, mbs)] = None
    out = []
    for k, members in families.items():
        for family, floor in zip(members, _order_free_floors(costs[k], list(members), cancel)):
            out.append((floor, (*family, (), k), False, None))
    return out


def _expand_family(cost: CostModel, key: tuple, orders: tuple[tuple[int, ...], ...], floor: float,
                   cancel: Callable[[], bool], limit: float) -> list[tuple]:
    """Queue entries for a family's candidates over `orders` (`key`: the family's, `floor`: its
    bound over every order): those that might fit in memory, each at the larger of its own bound
    and the family's (`limit`: the search's, as _time_floors takes it)."""
    tp, pp, dp, mbs, _, k = key
    # Below the family's bound their cheap bounds say little (the family's is the same relaxation
    # over every order): on deep models, straight to the refined bound. A few at a time, between
    # cancellation polls (FLOOR_BATCH: _time_floors's own batch, its vectorised passes the fewer);
    # the entries hold no candidate (the search rebuilds those it reaches).
    refine = cost.model.num_layers >= REFINE_MIN_LAYERS
    out = []
    for start in range(0, len(orders), FLOOR_BATCH):
        fitting = []
        for order in orders[start:start + FLOOR_BATCH]:
            if cancel():        # (an order's first layout places its stages' ranks not met before)
                raise Cancelled
            candidate = cost.candidate(tp, pp, dp, mbs, order)
            if not _memory_shortfall(candidate):
                fitting.append(candidate)
        floors = _time_floors(fitting, cancel, refine=refine, limit=limit)
        out += [(max(own, floor), (tp, pp, dp, mbs, candidate.layout.order, k), refine, None)
                for own, candidate in zip(floors, fitting)]
    return out


def _stage_caps(candidate: Candidate, descending: np.ndarray) -> np.ndarray:
    """Per stage, the most work (in the fastest serving GPU's layer times) any partition can give
    it without overfilling its memory: at most the k largest layer times (`descending`: the
    fastest serving GPU's layer times, largest first), k its _stage_layer_caps."""
    return np.concatenate([[0.0], np.cumsum(descending)])[_stage_layer_caps(candidate)]


def _stage_layer_caps(candidate: Candidate) -> np.ndarray:
    """Per stage, the most layers any partition can give it without overfilling its memory: a
    stage holding k layers holds at least the k with the least memory there (weights, gradients,
    optimizer state and activations in flight; the transient peak is at least the smallest
    layer's), so k is at most the count of those that fit."""
    layout = candidate.layout
    key = ("caps", candidate.tp, candidate.pp, candidate.dp, candidate.mbs, candidate.num_micro_batches,
           layout.stage_capacity.tobytes())
    cache = candidate.cost.floor_cache
    if key not in cache:
        act_prefix, peak, in_flight = candidate.memory_arrays
        room = layout.stage_capacity - candidate.cost.training.runtime_reserve_bytes - float(peak.min())
        state = _memory_totals(candidate)[0]
        if state + float(in_flight.max()) * float(act_prefix[-1]) <= float(room.min()):
            cache[key] = np.full(candidate.pp, candidate.num_layers)     # every stage holds every layer
        else:
            params = np.diff(candidate.state_prefix)        # (L,) state bytes per layer
            acts = np.diff(act_prefix)
            need = np.sort(params[None, :] + in_flight[:, None] * acts[None, :], axis=1)     # (pp, L)
            cache[key] = (np.cumsum(need, axis=1) <= room[:, None]).sum(axis=1)
    return cache[key]


def _coupled_floors(pipeline_floor: Callable, base: np.ndarray, candidates: list[Candidate], thresholds: np.ndarray,
                    core: np.ndarray, lowest: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per candidate (without interleaving), a floor on steps x M + fill + the tail that couples
    the bottleneck M with the tail: a low M caps the core layers the fast stages can hold, so the
    slow ones must take the rest, and their parameters' all-reduce and optimizer step.

    With every stage busy at most M, stage s holds at most K_s(M) core layers, the count of its
    `thresholds` (_layer_thresholds's, the end layers it always holds, _end_layers, among its
    sends) at or below M, and at most its memory's count (_stage_layer_caps). Holding n of them,
    its tail is at least c_s + e_s x (its end layers' parameters and the n fewest of a core
    layer's), c_s its constant (the last bucket's latency and the iteration's fixed cost). The
    stages hold all C core layers, so the largest tail is at least the least E at which
    sum_s min(K_s(M), #{n: c_s + e_s P(n) <= E}) reaches C (_held_tails; inf if the stages
    cannot hold C), and at least max c_s. K only changes at the thresholds: over M in
    [t_i, t_i+1) the tail is at least E(K(t_i)) and the pipeline at least pipeline_floor(steps,
    t_i); the floor is the least over the first COUPLED_RANGES - 1 ranges from `lowest` (the
    bottleneck's floor) and the rest, M >= t, with the memory counts alone. Where backward hides
    up to h x C_s <= h M of the all-reduce, `steps` is B - 1 - h as in _time_floors (no floor, -inf,
    where it is negative) and e the all-reduce's and the optimizer's coefficients together.
    `pipeline_floor(steps, lowest, rows)` bounds steps x M + S(M) over M >= lowest for those
    rows, and `base` over M >= `lowest` (a variant for any M, as the memory caps', may be in it,
    so each range takes the larger). Arrays: `thresholds` (n, pp, C), the others (n,)."""
    n, pp, count = thresholds.shape
    if not count:
        return np.full(n, -np.inf)
    # The R - 1 least thresholds above `lowest` are among each stage's next R - 1 ones.
    below = (thresholds <= lowest[:, None, None]).sum(axis=2)                                     # (n, pp)
    padded = np.concatenate([thresholds, np.full((n, pp, COUPLED_RANGES - 1), np.inf)], axis=2)
    after = np.take_along_axis(padded, below[:, :, None] + np.arange(COUPLED_RANGES - 1), axis=2)  # (n, pp, R - 1)
    flat = after.reshape(n, -1)
    if flat.shape[1] > COUPLED_RANGES - 1:
        flat = np.partition(flat, COUPLED_RANGES - 2, axis=1)[:, :COUPLED_RANGES - 1]
    starts = np.concatenate([lowest[:, None], np.sort(flat, axis=1)], axis=1)                      # (n, R)
    ranges, exists = starts.shape[1], np.isfinite(starts)
    memory = np.array([_stage_layer_caps(c) for c in candidates])                                  # (n, pp)
    held = below[:, None, :] + (after[:, None, :, :] <= starts[:, :-1, None, None]).sum(axis=3)   # (n, R - 1, pp)
    held = np.minimum(np.concatenate([held, memory[:, None, :]], axis=1), memory[:, None, :])      # (n, R, pp)
    layer_params = candidates[0].cost._params              # per layer; a GPU holds 1 / tp of them (param_prefix)
    tp = np.array([c.tp for c in candidates], dtype=np.float64)
    per_gpu = layer_params[None, None, :] / tp[:, None, None]
    end_params = _end_layers(np.broadcast_to(per_gpu, (n, pp, len(layer_params))), core)      # (n, pp)
    core_params = np.cumsum(np.sort(layer_params[core]))
    fixed = np.array([c.last_bucket_latency + c.iteration_overhead for c in candidates])           # (n, pp)
    coef = np.array([c.e_coef for c in candidates])
    tails = _held_tails(held, fixed + coef * end_params, coef / tp[:, None], core_params)            # (n, R)
    pipelines = pipeline_floor(np.repeat(np.maximum(steps, 0.0), ranges), np.where(exists, starts, lowest[:, None]).ravel(),
                               np.repeat(np.arange(n), ranges)).reshape(n, ranges)
    pipelines = np.where(exists, np.maximum(pipelines, base[:, None]), np.inf)   # (no range: fewer thresholds)
    return np.where(steps >= 0, (pipelines + tails).min(axis=1), -np.inf)


def _held_tails(held: np.ndarray, const: np.ndarray, coef: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Per row and column, a floor on max_s (const_s + coef_s x P_s) when the stages hold the C
    core layers between them, stage s at most held[., ., s] of them, and P_s >= params[n - 1]
    with n of them (`params`: (C,), ascending): the least E at which
    sum_s min(held_s, #{k: const_s + coef_s params[k - 1] <= E}) reaches C (each stage's count
    rises with E), by bisection (the lower end of the last interval, a hair lower against
    rounding), and at least max_s const_s; inf where the stages cannot hold C. Arrays: held
    (n, R, pp); const, coef (n, pp)."""
    n, ranges, pp = held.shape
    count = len(params)
    low = np.broadcast_to(const.max(axis=1)[:, None], (n, ranges)).copy()
    top = const[:, None, :] + coef[:, None, :] * params[np.clip(held - 1, 0, count - 1)]
    high = np.maximum(np.where(held > 0, top, -np.inf).max(axis=2), low)
    enough = held.sum(axis=2) >= count

    # The values tried are at least max_s const_s, so a stage with coef 0 holds any count there.
    positive = coef > 0
    inverse = (np.where(positive, 1.0 / np.where(positive, coef, 1.0), 0.0))[:, None, :]
    free = np.where(positive, 0.0, np.inf)[:, None, :]
    shift = const[:, None, :]

    def holding(value: np.ndarray) -> np.ndarray:
        """(n, R): sum_s min(held_s, #{k: const_s + coef_s params[k - 1] <= value})."""
        room = (value[:, :, None] - shift) * inverse + free
        return np.minimum(np.searchsorted(params, room, side="right"), held).sum(axis=2)

    done = holding(low) >= count
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        reach = holding(middle) >= count
        low, high = np.where(reach | done, low, middle), np.where(reach & ~done, middle, high)
    return np.where(enough, low * (1.0 - 1e-12), np.inf)


def _capped_floors(rho: np.ndarray, sends: np.ndarray, work: np.ndarray, caps: np.ndarray,
                   B: np.ndarray) -> np.ndarray:
    """Per row, a lower bound on (B - 1) M + S with each stage's work also capped by memory
    (`caps`, see _stage_caps): M is at least the least bottleneck at which the stages can take
    all the work, sum_s min((M - f_s) / rho_s, cap_s) >= work, and S at least the cheapest fill
    of the work into the caps, fastest stages first; inf where the caps cannot hold the work."""
    n, pp = rho.shape
    need = work * (1.0 - 1e-9)          # rounding must not make the bound overshoot
    fits = caps.sum(axis=1) >= need
    # g(M) = sum_s min((M - f_s)+ / rho_s, cap_s) is piecewise linear and rising, with kinks at
    # M = f_s and M = f_s + rho_s cap_s: find the kink where it first reaches the work and go back
    # along the segment before it.
    kinks = np.sort(np.concatenate([sends, sends + rho * caps], axis=1), axis=1)       # (n, 2 pp)
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.minimum(np.maximum(kinks[:, :, None] - sends[:, None, :], 0.0) / rho[:, None, :],
                           caps[:, None, :]).sum(axis=2)                                # (n, 2 pp)
    at = np.minimum(np.argmax(reach >= need[:, None], axis=1), kinks.shape[1] - 1)
    before = np.maximum(at - 1, 0)
    pick = lambda a, i: np.take_along_axis(a, i[:, None], axis=1)[:, 0]                 # noqa: E731
    m0, m1, g0, g1 = pick(kinks, before), pick(kinks, at), pick(reach, before), pick(reach, at)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(g1 > g0, (m1 - m0) / (g1 - g0), 0.0)
    lo = np.where((at > 0) & (g0 < need), m0 + (need - g0) * slope, m1) * (1.0 - 1e-12)
    order = np.argsort(rho, axis=1, kind="stable")
    rho_sorted = np.take_along_axis(rho, order, axis=1)
    caps_sorted = np.take_along_axis(caps, order, axis=1)
    before = np.cumsum(caps_sorted, axis=1) - caps_sorted
    placed = np.clip(need[:, None] - before, 0.0, caps_sorted)
    fill = (placed * rho_sorted).sum(axis=1)
    return np.where(fits, (B - 1) * lo + fill, np.inf)


def _layout_floor_terms(candidate: Candidate) -> tuple[tuple[np.ndarray, np.ndarray], float, float]:
    """((cheapest send per boundary per sample of micro-batch, latency left out; that latency),
    all-reduce floor, fastest tensor-parallel link's seconds per byte): they depend on the layout
    alone, so candidates differing only in micro-batch size share them. (Scaling the latency
    with the micro-batch too overstated the floor of a larger micro-batch.)"""
    layout = candidate.layout
    key = ("layout", layout.tp, layout.pp, layout.dp, layout.order)
    cache = candidate.cost.floor_cache
    if key not in cache:
        # the bytes part scales with the micro-batch, the per-message latency does not
        unit_cut, latency = np.zeros(0), np.zeros(0)
        if layout.pp > 1:
            latency = candidate.cut_latency
            unit_cut = (candidate.cheapest_cut - latency) / candidate.mbs
        cache[key] = ((unit_cut, latency), candidate.tail_floor, float(layout.stage_tp_seconds_per_byte.min()))
    return cache[key]


def _exposed_tail_terms(candidate: Candidate) -> tuple[float, float]:
    """(the share of a stage's compute that hides its all-reduce, the all-reduce floor were none
    of it hidden): per layout, as _layout_floor_terms."""
    layout = candidate.layout
    key = ("exposed tail", layout.tp, layout.pp, layout.dp, layout.order)
    cache = candidate.cost.floor_cache
    if key not in cache:
        coef = candidate.e_coef
        full_tail = (float(candidate.param_prefix[-1]) / float(np.sum(1.0 / coef)) if np.all(coef > 0) else 0.0) \
            + float(candidate.last_bucket_latency.min()) + candidate.iteration_overhead
        cache[key] = (float(candidate.hidden_share), full_tail)
    return cache[key]


def _fastest_times(candidate: Candidate, spb: float
                   ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray, float]:
    """Per layer, the fastest serving GPU's time; per node group, its least slow-down against
    that (0 if it serves no stage); their sum; the times in descending order; per node group, its
    least slow-down over the core layers (those of the most common kind), and the sum of the
    other layers' fastest times. Shared by every
    candidate with the same tp, micro-batch, serving groups and tensor-parallel link (`spb`, the
    fastest one's s/byte)."""
    cost, layout = candidate.cost, candidate.layout
    key = (candidate.tp, candidate.mbs, layout.serving_groups, spb)
    cache = cost.floor_cache
    if key not in cache:
        times = []
        for g in layout.serving_groups:
            compute, tp_bytes = cost.layer_times(g, candidate.tp, candidate.mbs)
            times.append(compute + tp_bytes * spb * cost.tp_exposed)
        times = np.array(times)
        fastest = times.min(axis=0)
        busy = fastest > 0
        slowdown = np.zeros(len(cost.gpus))    # per node group; 0 where the group serves no stage
        slowdown[list(layout.serving_groups)] = (times[:, busy] / fastest[busy]).min(axis=1) if busy.any() else 1.0
        if "core layers" not in cache:
            kinds = [layer.kind for layer in cost.model.layers]
            common = max(dict.fromkeys(kinds), key=kinds.count)
            cache["core layers"] = np.array([kind == common for kind in kinds])
        core = cache["core layers"] & busy
        core_slowdown = np.zeros(len(cost.gpus))
        core_slowdown[list(layout.serving_groups)] = (times[:, core] / fastest[core]).min(axis=1) if core.any() else 1.0
        rest = float(fastest[~core].sum()) if core.any() else float(fastest.sum())
        cache[key] = (fastest, slowdown, float(fastest.sum()), np.sort(fastest)[::-1], core_slowdown, rest)
    return cache[key]


def search(scenario: Scenario, *, top: int | None = None,
           should_cancel: Callable[[], bool] | None = None,
           progress: Callable[[float], None] | None = None, cutoff: float = INF,
           details: bool = True) -> SearchResult:
    """Rank strategies for `scenario`. `should_cancel` is polled often; when it turns true the search
    raises Cancelled. `progress` receives a rising fraction from 0 to 1: the first fifth while
    candidates are enumerated and bounded, the rest as they are settled (evaluated or pruned).
    Strategies predicted at `cutoff` seconds or more are left out (a caller that already holds
    better ones elsewhere, e.g. on another part of the cluster). Without `details`, the infeasible
    list and the baseline are left empty (faster)."""
    started = time.perf_counter()
    top = top or scenario.search.top
    cancel = should_cancel or (lambda: False)
    report = progress or (lambda fraction: None)
    rank = tuple(range(len(scenario.cluster.nodes)))
    orders = node_orders(scenario)
    # One cost model per combination of training techniques; a key's last entry says which.
    costs = [CostModel(scenario, knobs) for knobs in knob_choices(scenario.training, scenario.model)]
    keys = [(*key, k) for k, cost in enumerate(costs)
            for key in enumerate_candidates(scenario, orders, cost.knobs)]
    sizes: dict[tuple[int, int], list[int]] = {}   # micro-batch sizes per tp, computed in one pass each
    for tp, _, _, mbs, _, k in keys:
        sizes.setdefault((k, tp), []).append(mbs)
    for group in range(len(scenario.cluster.nodes)):
        for (k, tp), micro_batch_sizes in sizes.items():
            if cancel():
                raise Cancelled
            costs[k].prepare_layer_times(group, tp, micro_batch_sizes)

    no_fit: list[tuple[Candidate, str | None]] = []     # no partition fits: why, if known
    fitting = []
    for index, key in enumerate(keys):
        if cancel():
            raise Cancelled
        if index % 64 == 0:
            report(PREPARATION * index / len(keys))
        candidate = costs[key[5]].candidate(*key[:5])
        shortfall = _memory_shortfall(candidate)
        if shortfall:
            no_fit.append((candidate, shortfall))
            continue
        fitting.append((key, candidate))
    # Every candidate gets the cheap floor now; the refined one (memory caps, core layers, the
    # exposed all-reduce) only when it reaches the head of the queue still below the limit, a few
    # at a time, and goes back in line with it.
    floors = _time_floors([candidate for _, candidate in fitting], cancel, refine=False)
    queue = [(floor, key, False, candidate) for floor, (key, candidate) in zip(floors, fitting)]
    # Orders listed but not enumerated: one entry per (tp, pp, dp, micro-batch size) family, at its
    # bound over every order, without a candidate; the family's orders are enumerated when it
    # reaches the head of the queue still below the limit, and all pruned at once otherwise.
    families = _family_entries(costs, keys, cancel) if orders.rest else []
    queue += families
    heapq.heapify(queue)
    count = len(keys) + len(families) * len(orders.rest)     # candidates, every order's
    seeds = set(orders.orders)

    best: list[tuple[float, tuple, tuple[int, ...], Candidate]] = []  # max-heap by -J of the top N
    baseline: tuple[float, tuple, Candidate] | None = None
    evaluated = solves = 0
    pruned: list[Candidate] = []
    pruned_unlisted = 0          # candidates of the orders left out ruled out by bounds
    settled = len(no_fit)        # candidates settled (to report progress)
    while queue:
        if cancel():
            raise Cancelled
        limit = min(-best[0][0] if len(best) >= top else INF, cutoff)
        floor, key, refined, candidate = heapq.heappop(queue)
        if not key[4]:              # a family of the orders left out
            if not refined and floor < limit:   # its bound with the pipeline's ends placed, back in line
                (finer,) = _order_free_floors(costs[key[5]], [key[:4]], cancel, ends=True)
                heapq.heappush(queue, (max(floor, finer), key, True, None))
                continue
            more = _expand_family(costs[key[5]], key, orders.rest, floor, cancel, limit) if floor < limit else []
            pruned_unlisted += len(orders.rest) - len(more)      # (by the bound, or short of memory)
            settled += len(orders.rest) - len(more)
            for item in more:
                heapq.heappush(queue, item)
            continue
        if candidate is None:       # one of its candidates (rebuilt: hundreds queued would hold their arrays)
            candidate = costs[key[5]].candidate(*key[:5])
        # (with no limit yet it is solved whatever its bound; on shallow models a solve costs less
        # than refining the bound)
        if not refined and floor < limit < INF and candidate.num_layers >= REFINE_MIN_LAYERS:
            batch, aside = [(floor, key, candidate)], []
            while queue and len(batch) < REFINE_BATCH:
                item = heapq.heappop(queue)
                if not item[2] and item[0] < limit and item[3] is not None:
                    batch.append((item[0], item[1], item[3]))
                else:
                    aside.append(item)
            finer = _time_floors([c for _, _, c in batch], cancel)
            for (old, k, c), new in zip(batch, finer):
                heapq.heappush(queue, (max(old, new), k, True, c))
            for item in aside:
                heapq.heappush(queue, item)
            continue
        report(PREPARATION + (1 - PREPARATION) * settled / max(count, 1))
        settled += 1
        if details and key[4] == rank and (baseline is None or floor < baseline[0]):   # could be the best uniform one
            uniform, _, over = candidate.quick_evaluate(even_partition(candidate.num_layers, candidate.pp))
            if over <= 0 and (baseline is None or (uniform, key) < baseline[:2]):
                baseline = (uniform, key, candidate)
        listed = key[4] in seeds     # (the infeasible list covers the orders searched in full)
        if floor >= limit:
            if listed:
                pruned.append(candidate)
            else:
                pruned_unlisted += 1
            continue
        tables = SegmentTables(candidate)
        result = solve(tables, limit, cancel)
        evaluated += 1
        solves += result.solves
        if not result.fits:
            if listed:
                no_fit.append((candidate, None))
        elif result.partition is not None:
            entry = (-result.iteration_time_s, _negate(key), result.partition, candidate)
            if len(best) < top:
                heapq.heappush(best, entry)
            else:
                heapq.heappushpop(best, entry)
    orders_floor = math.inf
    if not orders.complete and not orders.rest:     # the orders left out: is any family within reach?
        limit = min(-best[0][0] if len(best) >= top else INF, cutoff)
        for floor, *_ in _family_entries(costs, keys, cancel):
            if floor < limit:
                orders_floor = min(orders_floor, floor)
    # Whether a pruned candidate fits decides only whether it is listed as infeasible, so that the
    # list does not depend on `top`.
    if details:
        no_fit += [(candidate, None) for candidate, fits in zip(pruned, partitions_fit(pruned, cancel)) if not fits]
    infeasible = _infeasible(no_fit, cancel) if details else []
    report(1.0)

    ranked = sorted(best, key=lambda item: (-item[0], _negate(item[1])))
    strategies = []
    for _, _, partition, candidate in ranked:
        if cancel():
            raise Cancelled
        strategies.append(priced(scenario, candidate.predict(partition)))
    # The partition solve's time and the prediction's sum the same terms in another order, so
    # near-ties may differ in the last bits: list in the order of the times reported (stable:
    # exact ties keep the search's order).
    strategies.sort(key=lambda prediction: prediction.iteration_time_s)
    baseline_prediction = None
    if baseline is not None:
        candidate = baseline[2]
        baseline_prediction = priced(scenario, candidate.predict(even_partition(candidate.num_layers, candidate.pp)))
    stats = SearchStats(candidates=count, pruned=len(pruned) + pruned_unlisted,
                        evaluated=evaluated, infeasible=len(infeasible), solves=solves,
                        node_orders=len(orders.orders) + len(orders.rest),
                        all_node_orders=orders.complete or bool(orders.rest),
                        search_time_s=time.perf_counter() - started, orders_floor=float(orders_floor))
    infeasible.sort(key=lambda entry: (entry.strategy.tp, entry.strategy.pp, entry.strategy.micro_batch_size,
                                       entry.strategy.placement or ()))
    return SearchResult(scenario, tuple(strategies), tuple(infeasible), baseline_prediction, stats)


def _infeasible(no_fit: list[tuple[Candidate, str | None]], cancel: Callable[[], bool]) -> list[Infeasible]:
    """Candidates no partition fits, each with why (a necessary condition it fails, if one did)
    and its even split's most overfull stage, by how much."""
    if not no_fit:
        return []
    need, capacity = even_split_memory([candidate for candidate, _ in no_fit], cancel)
    out = []
    for index, ((candidate, why), need_row, capacity_row) in enumerate(zip(no_fit, need, capacity)):
        if index % 64 == 63 and cancel():
            raise Cancelled
        even = even_partition(candidate.num_layers, candidate.pp)
        stage = int(np.argmax(need_row - capacity_row))
        first = sum(even[:stage])
        gpus = candidate.cost.gpus
        gpu = "+".join(dict.fromkeys(gpus[g].name for g in candidate.layout.stage_groups[stage]))
        worst = over_capacity(stage, first, first + even[stage] - 1, gpu, float(need_row[stage]),
                              float(capacity_row[stage]))
        out.append(Infeasible(candidate.strategy(even), f"no partition fits{f': {why}' if why else ''}; "
                                                        f"with an even split {worst}"))
    return out


def _negate(key: tuple) -> tuple:
    """Keys sort ascending on ties; the heap pops its largest, so store ties negated (and back)."""
    tp, pp, dp, mbs, order, k = key
    return (-tp, -pp, -dp, -mbs, tuple(-g - 1 for g in order), -k)
