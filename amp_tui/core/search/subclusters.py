"""Leave nodes idle: search the parts of the cluster (how many nodes of each group are used) that can
hold the best strategy, and map what they find back onto the whole cluster.

More hardware can only help when the planner may leave some of it idle: a slow node can drag a stage
down, and one node more can make the GPU count divide badly. A part is a count of used nodes per node
group; nodes of a group are identical, so which of them sit idle does not matter (a group's used
nodes are its first ones), and parts that only swap the counts of identical groups are searched once.

Every part gets a lower bound on the iteration time of any strategy on it (part_bounds.py); a part
whose GPUs cannot hold one copy of the weights, gradients and optimizer state is dropped.

The whole cluster is searched first, then the cluster without each one node group (so that adding a
node group never makes the best plan found slower; lowest bound first, each unless its bound cannot
beat the N-th best found), then the other parts in increasing order of
bound (the objective's weight x bound for --objective cost), each with `search(..., cutoff=)` so
that nothing slower than the N-th best found so far is solved. The enumeration stops when the next
bound cannot beat the N-th best: then the result is exact.

Three limits keep it fast, and the result says when one was reached (then it is a heuristic with a
stated gap): beyond MAX_PARTS node-count vectors only counts near 0 and near each group's size are
tried; and after MAX_SEARCHES parts searched (on a cluster of more than SMALL_PARTS parts: a small
cluster's take milliseconds each, and all of them are searched), or TIME_LIMIT_S seconds (the first searches above
always complete), the best found is returned with the bound of the best part not searched: the best
found is at most best / that bound - 1 above the optimum (`IdleSearch.gap`). The time limit makes a
large search's result depend on the machine's speed, never silently.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.parts import part_scenario, to_whole
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.search.bounds.part_bounds import part_bounds
from amp_tui.core.search.deadline import Clock, OutOfTime, now
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import SearchResult, SearchStats, search
from amp_tui.core.spec.scenario import Scenario

MAX_PARTS = 200_000     # node-count vectors bounded in full
MAX_SEARCHES = 32       # parts searched before settling for the best found and a stated gap ...
SMALL_PARTS = 256       # ... on a cluster of more parts than this
TIME_LIMIT_S = 3.0      # ... or once this long has passed (the whole cluster's search always completes)
TIGHTEN_CHUNK = 4096    # parts given the full bound at once (between them, a deadline keeps what is done)
WHOLE_TIME_SHARE = 0.7  # of a deadline's time, the most the whole cluster's search may take
WHOLE_SHARE = 0.4       # of the progress bar: the whole cluster's search; the other parts share the rest


@dataclass(frozen=True)
class IdleSearch:
    """How the parts of the cluster were searched."""
    parts: int                  # distinct parts with a strategy that might fit (and within budget)
    searched: int               # parts whose strategies were searched
    exact: bool                 # False: a limit was reached; see note and gap
    gap: float | None = None    # not exact: the best found is at most this fraction above the optimum
    note: str | None = None
    out_of_time: bool = False   # the time limit cut it short (gap and note say how far)
    overran_s: float = 0.0      # how long past its deadline it searched for a first strategy (a hard deadline)

    def to_dict(self) -> dict:
        return {"parts": self.parts, "searched": self.searched, "exact": self.exact, "gap": self.gap,
                "note": self.note, "out_of_time": self.out_of_time, "overran_s": self.overran_s}


# -- bounds -----------------------------------------------------------------------------------------

def _vectors(scenario: Scenario) -> tuple[np.ndarray, bool]:
    """Node-count vectors (rows) to consider, and whether they are all of them. Groups with equal
    hardware, price and size are interchangeable: their counts are listed non-increasing, once."""
    groups = scenario.cluster.nodes
    classes: dict[tuple, list[int]] = {}
    for g, group in enumerate(groups):
        classes.setdefault((group.hardware_key(), group.price_per_hour, group.count), []).append(g)
    members = list(classes.values())
    sizes = [groups[m[0]].count for m in members]

    def how_many(options: list[list[int]]) -> int:
        return math.prod(math.comb(len(o) + len(m) - 1, len(m)) for o, m in zip(options, members))

    options = [list(range(c + 1)) for c in sizes]
    complete = how_many(options) <= MAX_PARTS
    if not complete:
        options = [sorted({0, c}) for c in sizes]
        for k in itertools.count(1):      # counts within k of 0 or of the group's size
            wider = [sorted({*range(min(k, c) + 1), *range(max(c - k, 0), c + 1)}) for c in sizes]
            if wider == options or how_many(wider) > MAX_PARTS:
                break
            options = wider
    per_class = [np.array(list(itertools.combinations_with_replacement(sorted(o, reverse=True), len(m))),
                          dtype=np.int64) for o, m in zip(options, members)]
    pick = np.indices([len(p) for p in per_class]).reshape(len(per_class), -1).T     # (rows, classes)
    rows = np.zeros((len(pick), len(groups)), dtype=np.int64)
    for c, (m, p) in enumerate(zip(members, per_class)):
        rows[:, m] = p[pick[:, c]]
    return rows[rows.sum(axis=1) > 0], complete


def _prices(scenario: Scenario, rows: np.ndarray) -> np.ndarray:
    """Dollars per hour of each part's nodes; nan where a used group has no price."""
    price = np.array([np.nan if g.price_per_hour is None else g.price_per_hour for g in scenario.cluster.nodes])
    unknown = np.isnan(price)
    return np.where((rows[:, unknown] > 0).any(axis=1), np.nan, rows @ np.where(unknown, 0.0, price))


# -- the search -------------------------------------------------------------------------------------

def search_parts(scenario: Scenario, objective: Objective | None = None, *, top: int | None = None,
                 should_cancel: Callable[[], bool] | None = None,
                 progress: Callable[[float], None] | None = None,
                 deadline: float | None = None, hard_deadline: float | None = None) -> tuple[SearchResult, IdleSearch]:
    """The best `top` strategies by `objective` over every part of the cluster (only the whole
    cluster with search.use_all_gpus). Infeasible candidates and the baseline are the whole
    cluster's.

    `deadline` (a deadline.now() time) bounds all of it, the whole cluster's search too:
    past it, the best found is returned with the proven gap (IdleSearch.gap) over what was left
    unsearched. Without one, the whole cluster and the seeds are searched in full and the other
    parts for TIME_LIMIT_S. With a later `hard_deadline`, the deadline holds only once a strategy
    has been found: until then the search goes on to the hard one (IdleSearch.overran_s says how
    long past the deadline it went)."""
    started = now()
    objective = objective or Objective()
    objective.check(scenario)
    top = top or scenario.search.top
    report = progress or (lambda fraction: None)
    clock = Clock(should_cancel=should_cancel, deadline=deadline, hard_deadline=hard_deadline)
    # the parts beyond the seeds stop here (TIME_LIMIT_S after the start without a deadline)
    parts_deadline = clock.deadline if deadline is not None else started + TIME_LIMIT_S
    user_cancel = clock.user_cancel

    groups = scenario.cluster.nodes
    whole = tuple(g.count for g in groups)
    if scenario.search.use_all_gpus:
        rows, complete = np.array([whole], dtype=np.int64), True
    else:
        rows, complete = _vectors(scenario)
    if user_cancel():
        raise Cancelled
    cost = CostModel(scenario)
    try:
        quick = part_bounds(scenario, rows, cost, quick=True, should_cancel=clock.poll)
    except OutOfTime:
        return _nothing_in_time(scenario, started, len(rows), 0.0 if clock.hard == clock.deadline
                                else now() - clock.deadline)
    prices = _prices(scenario, rows)
    keep = np.isfinite(quick) & objective.within_budget(prices)
    rows, quick, prices = rows[keep], quick[keep], prices[keep]
    weights = objective.weights(prices)
    weighted = weights * quick            # per part: the objective's weight x its bound, so far
    where = {tuple(row): i for i, row in enumerate(rows.tolist())} if len(rows) <= 4096 else None

    def find(counts: tuple[int, ...]) -> int | None:
        if where is not None:
            return where.get(counts)
        hits = np.flatnonzero(rows[:, 0] == counts[0])    # narrowed group by group: a full
        for g in range(1, len(counts)):                     # comparison took 30 ms on 65,000 parts
            hits = hits[rows[hits, g] == counts[g]]
        return int(hits[0]) if len(hits) else None

    seeds = [whole] + [tuple(0 if h == g else c for h, c in enumerate(whole)) for g in range(len(groups))]
    seeds = [i for i in dict.fromkeys(find(s) for s in seeds) if i is not None]
    if user_cancel():
        raise Cancelled

    ranked: list[tuple[float, Prediction]] = []      # (objective weight x time, prediction), best first
    whole_result: SearchResult | None = None
    searched = candidates = pruned = evaluated = solves = 0
    all_orders = True
    orders_floor = math.inf     # objective weight x a lower bound on every order left out
    open_floor = math.inf       # objective weight x a lower bound on what a search cut short left
    attempted = np.zeros(len(rows), dtype=bool)     # parts whose search was started
    cut_short: list[str] = []   # what a limit cut short, for the note
    first_found_s: float | None = None      # when the first strategy was in hand

    def cutoff() -> float:
        return ranked[top - 1][0] if len(ranked) >= top else math.inf

    def search_part(i: int, until: float | None) -> None:
        """Search part i until the deadline `until` (or the hard deadline while nothing has been
        found anywhere; the part's bound stays open where it stops)."""
        nonlocal whole_result, searched, candidates, pruned, evaluated, solves, all_orders, orders_floor
        nonlocal open_floor, first_found_s
        counts = tuple(rows[i].tolist())
        part, kept = part_scenario(scenario, counts)
        attempted[i] = True
        hard = None if ranked or until is None else clock.hard
        try:
            result = search(part, top=top, should_cancel=user_cancel, cutoff=cutoff() / weights[i],
                            details=counts == whole, deadline=until, hard_deadline=hard,
                            progress=(lambda f: report(WHOLE_SHARE * f)) if counts == whole else None)
        except OutOfTime:           # before it settled anything: the part's bound is all it proved
            open_floor = min(open_floor, float(weighted[i]))
            cut_short.append("the whole cluster's search stopped at the time limit" if counts == whole
                             else "a part's search stopped at the time limit")
            return
        searched += 1
        stats = result.stats
        candidates, pruned, evaluated, solves = (candidates + stats.candidates, pruned + stats.pruned,
                                                 evaluated + stats.evaluated, solves + stats.solves)
        all_orders &= stats.all_node_orders
        orders_floor = min(orders_floor, weights[i] * stats.orders_floor)
        if stats.out_of_time:
            open_floor = min(open_floor, weights[i] * stats.open_floor)
            cut_short.append("the whole cluster's search stopped at the time limit" if counts == whole
                             else "a part's search stopped at the time limit")
        if counts == whole:
            whole_result = result
        for prediction in result.strategies:
            ranked.append((weights[i] * prediction.iteration_time_s, to_whole(scenario, counts, kept, prediction)))
        ranked.sort(key=lambda item: (item[0], objective.key(item[1])))
        del ranked[top:]
        if ranked and not clock.found:
            clock.found, first_found_s = True, now()

    def tighten(indices: np.ndarray, poll: Callable[[], bool]) -> np.ndarray:
        """The full bound of the parts the quick one (or the full one, given the N-th best found so
        far) does not rule out; returns those, lowest bound first. Computed lowest quick bound
        first, TIGHTEN_CHUNK parts at a time: where `poll` raises OutOfTime, the parts bounded so
        far keep their full bound (the gap stated is the least bound left: it shrinks chunk by
        chunk)."""
        indices = indices[weighted[indices] < cutoff()]
        indices = indices[np.argsort(weighted[indices], kind="stable")]
        for start in range(0, len(indices), TIGHTEN_CHUNK):
            chunk = indices[start:start + TIGHTEN_CHUNK]
            # Fewer than N found (a deadline): a bound need not go past the best found to show that a
            # part is no better (the gap stated is the best's), and without a limit it costs 15x more.
            reach = cutoff() if len(ranked) >= top or not ranked else ranked[0][0]
            with np.errstate(divide="ignore"):     # (a part of free nodes weighs nothing)
                limit = reach / weights[chunk]
            tight = part_bounds(scenario, rows[chunk], cost, limit=limit, should_cancel=poll)
            weighted[chunk] = np.maximum(weighted[chunk], weights[chunk] * tight)
        indices = indices[weighted[indices] < cutoff()]
        return indices[np.argsort(weighted[indices], kind="stable")]      # by the bound now held

    # The whole cluster first: its search always completes (but for a deadline), and its N-th best
    # strategy tells which parts need the full bound at all (the quick bound rules out the rest).
    # Then the seeds, then the other parts, each lowest bound first.
    if seeds and tuple(rows[seeds[0]].tolist()) == whole:
        # with a deadline, the full bounds of the other parts get the time the whole cluster's search
        # leaves (without them the gap stated is the quick bounds', often far below the best), unless
        # it has found nothing by then
        search_part(seeds.pop(0), None if deadline is None else started + WHOLE_TIME_SHARE * (deadline - started))
    order: list[int] = []
    try:
        # (without a deadline the full bounds always complete: bounded work, and what makes it exact)
        survivors = tighten(np.flatnonzero(~attempted), clock.poll).tolist()
        first = set(seeds)
        order = [i for i in survivors if i in first] + [i for i in survivors if i not in first]
    except OutOfTime:               # in a full bound: the bounds of the parts so far stand
        pass
    for index, i in enumerate(order):
        seed = i in first
        if weighted[i] >= cutoff():     # each kind comes in order of bound
            if seed:
                continue
            break
        # Parts stop at MAX_SEARCHES or the deadline, whichever comes first: the bar moves with both.
        done = max(index / len(order), (now() - started) / max(parts_deadline - started, 1e-9),
                   searched / MAX_SEARCHES if len(rows) > SMALL_PARTS else 0.0)
        report(WHOLE_SHARE + (1.0 - WHOLE_SHARE) * min(done, 1.0))
        if user_cancel():
            raise Cancelled
        if seed and clock.over():
            break
        if not seed and ((searched >= MAX_SEARCHES and len(rows) > SMALL_PARTS)
                         or (clock.over() if deadline is not None else now() > parts_deadline)):
            break
        search_part(i, deadline if seed else parts_deadline)
    # Every part not searched has its bound (quick, or full where computed); those below the N-th
    # best are what a limit left open.
    if not attempted.all():
        left = float(weighted[~attempted].min())
        if left < cutoff():
            open_floor = min(open_floor, left)
            cut_short.append(f"{searched} of the {len(rows)} parts of the cluster searched"
                             + (f" (at most {MAX_SEARCHES})" if searched >= MAX_SEARCHES else " in the time allowed"))
    report(1.0)

    best = ranked[0][0] if ranked else None
    if best is not None and orders_floor >= cutoff():
        orders_floor = math.inf     # found since: nothing left out can enter the top N
    if open_floor >= cutoff():
        open_floor = math.inf
    exact = complete and orders_floor == math.inf and open_floor == math.inf
    gap, notes = None, []
    if not complete:
        notes.append("too many ways to leave nodes idle: only counts near 0 and near each group's size were tried")
    if open_floor < math.inf:
        gap = float(max(best / open_floor - 1.0, 0.0)) if best is not None else None
        notes.append("; ".join(dict.fromkeys(cut_short))
                     + (f"; the best found could be at most {gap:.1%} above the optimum" if gap is not None
                        else "; nothing found in the time allowed"))
    if orders_floor < math.inf and best is not None:
        orders_gap = float(max(best / orders_floor - 1.0, 0.0))
        gap = max(gap or 0.0, orders_gap)
        notes.append(f"too many orders of the node groups to search all: another order could be at most "
                     f"{orders_gap:.1%} better")
    note = "; ".join(notes) or None
    strategies = tuple(objective.rank(p for _, p in ranked))
    base = whole_result
    stats = SearchStats(candidates=candidates, pruned=pruned, evaluated=evaluated,
                        infeasible=base.stats.infeasible if base else 0, solves=solves,
                        node_orders=base.stats.node_orders if base else 0, all_node_orders=all_orders,
                        search_time_s=now() - started, orders_floor=float(orders_floor),
                        open_floor=float(open_floor))
    result = SearchResult(scenario, strategies, base.infeasible if base else (), base.baseline if base else None, stats)
    # past the deadline with nothing found by it: how far the hard deadline let it go on
    late = deadline is not None and clock.hard > deadline and (first_found_s or now()) > deadline
    overran_s = (first_found_s or now()) - deadline if late else 0.0
    return result, IdleSearch(parts=len(rows), searched=searched, exact=exact, gap=gap, note=note,
                              out_of_time=open_floor < math.inf and clock.expired(), overran_s=overran_s)


def _nothing_in_time(scenario: Scenario, started: float, parts: int,
                     overran_s: float) -> tuple[SearchResult, IdleSearch]:
    """The deadline (or the hard one, `overran_s` after it) passed before any search began: no
    strategy, and a note that says so."""
    stats = SearchStats(candidates=0, pruned=0, evaluated=0, infeasible=0, solves=0, node_orders=0,
                        all_node_orders=True, search_time_s=now() - started, open_floor=0.0)
    return (SearchResult(scenario, (), (), None, stats),
            IdleSearch(parts=parts, searched=0, exact=False, note="the time limit passed before any part of "
                       "the cluster was searched", out_of_time=True, overran_s=overran_s))
