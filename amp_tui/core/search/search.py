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
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import Candidate, CostModel
from amp_tui.core.costmodel.prediction import Prediction, over_capacity
from amp_tui.core.costmodel.pricing import priced
from amp_tui.core.search.bounds.floors import REFINE_BATCH, REFINE_MIN_LAYERS, memory_shortfall, time_floors
from amp_tui.core.search.bounds.order_floors import expand_family, family_entries, order_free_floors
from amp_tui.core.search.deadline import Clock, OutOfTime, now
from amp_tui.core.search.orders import NodeOrders, node_orders
from amp_tui.core.search.partition.dp import INF
from amp_tui.core.search.partition.memory import even_split_memory, partitions_fit
from amp_tui.core.search.partition.tables import SegmentTables
from amp_tui.core.search.partition.walk import solve
from amp_tui.core.spec.knobs import Knobs, default_knobs, knob_choices
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy, even_partition


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
    # Stopped at its deadline: a lower bound on every candidate it left unsettled (inf: none of
    # them could enter the top N, so the ranking is exact all the same).
    open_floor: float = math.inf

    @property
    def exact(self) -> bool:
        """Whether the ranking is the best over every node order and every candidate."""
        return (self.all_node_orders or self.orders_floor == math.inf) and self.open_floor == math.inf

    @property
    def out_of_time(self) -> bool:
        """Whether the deadline cut the search short of proving its top N."""
        return self.open_floor < math.inf

    def orders_gap(self, best: float | None) -> float | None:
        """Not exact: the most the best found (`best` seconds) can be above the optimum, over the
        orders left out and the candidates left unsettled."""
        if self.exact or best is None:
            return None
        floor = min(self.open_floor, math.inf if self.all_node_orders else self.orders_floor)
        return max(best / floor - 1.0, 0.0) if floor > 0 else math.inf

    def to_dict(self) -> dict:
        return {"candidates": self.candidates, "pruned": self.pruned, "evaluated": self.evaluated,
                "infeasible": self.infeasible, "solves": self.solves, "node_orders": self.node_orders,
                "all_node_orders": self.all_node_orders, "exact": self.exact,
                "orders_floor": None if self.all_node_orders or self.orders_floor == math.inf else self.orders_floor,
                "out_of_time": self.out_of_time, "open_floor": self.open_floor if self.out_of_time else None,
                "search_time_s": self.search_time_s}


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
    techniques (default: the training section's), over `orders` (by default every order
    node_orders(scenario) lists, those the search enumerates family by family too). One pipeline
    stage with one replica has a single order: rank order.
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
    if orders is None:
        listed = node_orders(scenario)
        orders = NodeOrders(listed.orders + listed.rest, listed.complete or bool(listed.rest))
    orders = orders.orders
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


def search(scenario: Scenario, *, top: int | None = None,
           should_cancel: Callable[[], bool] | None = None,
           progress: Callable[[float], None] | None = None, cutoff: float = INF,
           details: bool = True, deadline: float | None = None,
           hard_deadline: float | None = None) -> SearchResult:
    """Rank strategies for `scenario`. `should_cancel` is polled often; when it turns true the search
    raises Cancelled. `progress` receives a rising fraction from 0 to 1: the first fifth while
    candidates are enumerated and bounded, the rest as they are settled (evaluated or pruned).
    Strategies predicted at `cutoff` seconds or more are left out (a caller that already holds
    better ones elsewhere, e.g. on another part of the cluster). Without `details`, the infeasible
    list and the baseline are left empty (faster).

    `deadline` (a deadline.now() time) is polled with `should_cancel`: past it while candidates
    are settled, the search returns what it found, with the lowest bound of those left unsettled
    (SearchStats.open_floor, the proven gap); past it before, it raises OutOfTime (nothing found).
    With a later `hard_deadline`, `deadline` stops it only once it has found a strategy."""
    started = now()
    top = top or scenario.search.top
    clock = Clock(should_cancel=should_cancel, deadline=deadline if hard_deadline is None else hard_deadline)
    soft = INF if deadline is None or hard_deadline is None else deadline
    best: list[tuple[float, tuple, tuple[int, ...], Candidate]] = []  # max-heap by -J of the top N

    def cancel() -> bool:
        if best and now() > soft:
            raise OutOfTime
        return clock.poll()
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
        shortfall = memory_shortfall(candidate)
        if shortfall:
            no_fit.append((candidate, shortfall))
            continue
        fitting.append((key, candidate))
    # Every candidate gets the cheap floor now; the refined one (memory caps, core layers, the
    # exposed all-reduce) only when it reaches the head of the queue still below the limit, a few
    # at a time, and goes back in line with it.
    floors = time_floors([candidate for _, candidate in fitting], cancel, refine=False)
    queue = [(floor, key, False, candidate) for floor, (key, candidate) in zip(floors, fitting)]
    # Orders listed but not enumerated: one entry per (tp, pp, dp, micro-batch size) family, at its
    # bound over every order, without a candidate, in a queue of their own; the family's orders are
    # enumerated when it reaches the head still below the limit, and all pruned at once otherwise.
    # The first family waits until no listed order's candidate is left below the limit: building
    # and bounding its hundreds of orders costs as much as a hundred solves, and the limit the
    # listed orders set prunes them (on the six-type cluster the optimum is a listed order: found
    # at 0.6 s of CPU instead of 2.3 s, after two families' expansions). From then on, lowest
    # bound first across both queues: a family expanded early lowers the limit for the others'.
    families = family_entries(costs, keys, cancel) if orders.rest else []
    heapq.heapify(queue)
    heapq.heapify(families)
    count = len(keys) + len(families) * len(orders.rest)     # candidates, every order's
    seeds = set(orders.orders)

    baseline: tuple[float, tuple, Candidate] | None = None
    evaluated = solves = 0
    pruned: list[Candidate] = []
    pruned_unlisted = 0          # candidates of the orders left out ruled out by bounds
    settled = len(no_fit)        # candidates settled (to report progress)
    # Past the deadline, the candidate at hand and those queued are left unsettled: the least of its
    # bound and the queues' heads bounds them all.
    floor = INF
    open_floor = INF
    expanding = False            # a family has been expanded: both queues in order of bound
    try:
        while queue or families:
            if cancel():
                raise Cancelled
            limit = min(-best[0][0] if len(best) >= top else INF, cutoff)
            family = bool(families) and (not queue or families[0][0] < queue[0][0]
                                         and (expanding or queue[0][0] >= limit))
            floor, key, refined, candidate = heapq.heappop(families if family else queue)
            if not key[4]:              # a family of the orders left out
                if not refined and floor < limit:   # its bound with the pipeline's ends placed, back in line
                    (finer,) = order_free_floors(costs[key[5]], [key[:4]], cancel, ends=True)
                    heapq.heappush(families, (max(floor, finer), key, True, None))
                    continue
                more = expand_family(costs[key[5]], key, orders.rest, floor, cancel, limit) if floor < limit else []
                expanding = expanding or floor < limit
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
                finer = time_floors([c for _, _, c in batch], cancel)
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
    except OutOfTime:
        open_floor = min(floor, queue[0][0] if queue else INF, families[0][0] if families else INF)
        if open_floor >= min(-best[0][0] if len(best) >= top else INF, cutoff):
            open_floor = INF      # none of them could enter the top N: exact all the same
    cancel = clock.user_poll     # what is left is bounded work: only the user stops it
    orders_floor = math.inf
    if not orders.complete and not orders.rest:     # the orders left out: is any family within reach?
        limit = min(-best[0][0] if len(best) >= top else INF, cutoff)
        for floor, *_ in family_entries(costs, keys, cancel):
            if floor < limit:
                orders_floor = min(orders_floor, floor)
    # Whether a pruned candidate fits decides only whether it is listed as infeasible, so that the
    # list does not depend on `top` (out of time: the infeasible list holds those met so far).
    if details and open_floor == INF:
        try:
            no_fit += [(candidate, None) for candidate, fits in zip(pruned, partitions_fit(pruned, clock.poll))
                       if not fits]
        except OutOfTime:
            pass
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
                        search_time_s=now() - started, orders_floor=float(orders_floor),
                        open_floor=float(open_floor))
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
