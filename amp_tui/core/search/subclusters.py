"""Leave nodes idle: search the parts of the cluster (how many nodes of each group are used) that can
hold the best strategy, and map what they find back onto the whole cluster.

More hardware can only help when the planner may leave some of it idle: a slow node can drag a stage
down, and one node more can make the GPU count divide badly. A part is a count of used nodes per node
group; nodes of a group are identical, so which of them sit idle does not matter (a group's used
nodes are its first ones), and parts that only swap the counts of identical groups are searched once
(part_rows.py lists them).

Every part gets a lower bound on the iteration time of any strategy on it (part_bounds.py): a quick
one for all, the full one as the search reaches them; a part whose GPUs cannot hold one copy of the
weights, gradients and optimizer state is dropped. Then, an anytime search:

  - the seeds first: the cluster's natural sub-clusters (the whole cluster, every node group but
    one, the fastest groups together, each group alone: part_rows.natural_parts), each searched
    on its own (its own N-th best as its limit, so what it finds depends on that sub-cluster
    alone) until it holds a strategy and has spent SEED_WORK, whatever the budget; a seed whose
    bound cannot beat the best found is skipped (it could not have given anything better). The
    cluster without each group is a seed, so a cluster with one group more starts from at least
    what that cluster's own seeds give.
  - then one best-first queue over every part: the part or candidate with the lowest bound is
    settled next (a part's full bound; its search's families, from part_bounds's bound per (tp,
    pp, dp, micro-batch size); their candidates; their partition solves, PartSearch in
    search.py), with the N-th best found over every part as the limit. It stops when the lowest
    bound left cannot beat the N-th best: the top N over every part are exact.
  - the work budget (work.py) stops it short of that the same way on any machine: the best found
    is returned with the lowest bound left (`IdleSearch.gap`: the best found is at most that far
    above the optimum). A wall-clock deadline is the safety net behind it, and the result says
    which of the two cut the search.

The search over parts interleaves the parts' own searches, so the gap shrinks from the lowest bound
up whichever part it is in: no part is searched to the end while another's open bound is lower.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.parts import part_scenario, to_whole
from amp_tui.core.costmodel.pricing import priced
from amp_tui.core.search import work as units
from amp_tui.core.search.bounds.part_bounds import part_bounds
from amp_tui.core.search.deadline import Clock, OutOfTime, now
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.orders import NodeOrders
from amp_tui.core.search.part_rows import natural_parts, part_rows
from amp_tui.core.search.results import SearchResult, SearchStats
from amp_tui.core.search.search import EAGER_CANDIDATES, PartSearch, enumerate_candidates, whole_details
from amp_tui.core.search.work import OutOfWork, Work
from amp_tui.core.spec.knobs import knob_choices
from amp_tui.core.spec.scenario import Scenario

SEED_WORK = 20_000.0    # work units a seed's search takes (with at least one strategy found, if any fits)
TIGHTEN_CHUNK = 4096    # parts given the full bound at once (between them, a deadline keeps what is done)
SEED_SHARE = 0.4        # of the progress bar: the seeds; the other parts share the rest
GAP_WORK = 300_000.0    # work units to give the full bound to the parts a work budget left with a quick one
GAP_TARGET = 0.01       # the search proves this gap first (everything below the best / (1 + it)), then exactness
INF = math.inf


@dataclass(frozen=True)
class IdleSearch:
    """How the parts of the cluster were searched."""
    parts: int                  # distinct parts with a strategy that might fit (and within budget)
    searched: int               # parts whose strategies were searched
    exact: bool                 # False: a limit was reached; see note and gap
    gap: float | None = None    # not exact: the best found is at most this fraction above the optimum
    note: str | None = None
    out_of_time: bool = False   # a limit (the work budget or the wall clock) cut it short (gap and note say how far)
    overran_s: float = 0.0      # how long past its deadline it searched for a first strategy (a hard deadline)
    cut_by: str | None = None   # what cut it short: "work" (the same on every machine), "time" (the wall clock)
    work: float = 0.0           # work units spent (work.py)
    seeds: int = 0              # natural sub-clusters searched before the rest

    def to_dict(self) -> dict:
        return {"parts": self.parts, "searched": self.searched, "exact": self.exact, "gap": self.gap,
                "note": self.note, "out_of_time": self.out_of_time, "overran_s": self.overran_s,
                "cut_by": self.cut_by, "work": round(self.work), "seeds": self.seeds}


def _prices(scenario: Scenario, rows: np.ndarray) -> np.ndarray:
    """Dollars per hour of each part's nodes; nan where a used group has no price."""
    price = np.array([np.nan if g.price_per_hour is None else g.price_per_hour for g in scenario.cluster.nodes])
    unknown = np.isnan(price)
    return np.where((rows[:, unknown] > 0).any(axis=1), np.nan, rows @ np.where(unknown, 0.0, price))


class _Parts:
    """The parts' rows, bounds and searches, and the best found over all of them."""

    def __init__(self, scenario: Scenario, objective: Objective, top: int, rows: np.ndarray, cost: CostModel,
                 poll: Callable[[], bool], charge: Callable[[float], None]):
        self.scenario, self.objective, self.top, self.rows, self.cost = scenario, objective, top, rows, cost
        self.poll, self.charge = poll, charge
        self.whole = tuple(g.count for g in scenario.cluster.nodes)
        self.searches: dict[int, PartSearch] = {}
        self.finds: dict[int, int] = {}
        # (weighted time, time, part's nodes fewest idle first, part, tie key, partition, candidate)
        self.ranked: list[tuple] = []
        self.plain = (cost.knobs.cp == 1 and cost.knobs.virtual_stages == 1
                      and knob_choices(scenario.training, scenario.model) == [cost.knobs])
        where = {tuple(row): i for i, row in enumerate(rows.tolist())} if len(rows) <= 4096 else None
        self._where = where

    def find(self, counts: tuple[int, ...]) -> int | None:
        rows = self.rows
        if self._where is not None:
            return self._where.get(counts)
        hits = np.flatnonzero(rows[:, 0] == counts[0])    # narrowed group by group: a full
        for g in range(1, len(counts)):                     # comparison took 30 ms on 65,000 parts
            hits = hits[rows[hits, g] == counts[g]]
        return int(hits[0]) if len(hits) else None

    def cutoff(self) -> float:
        """The N-th best found, weighted (inf while fewer are known)."""
        return self.ranked[self.top - 1][0] if len(self.ranked) >= self.top else INF

    def best(self) -> float:
        return self.ranked[0][0] if self.ranked else INF

    def open(self, i: int, weight: float, limit: float, details: bool,
             report: Callable[[float], None] | None = None) -> PartSearch:
        """Part i's search, prepared: every candidate (with details, or several combinations of
        techniques), else its families at their bounds below `limit`."""
        counts = tuple(self.rows[i].tolist())
        part, _ = part_scenario(self.scenario, counts)
        search = PartSearch(part, top=self.top, poll=self.poll, details=details, charge=self.charge, report=report)
        self.searches[i] = search
        self.finds[i] = 0
        # (a small part from every candidate: about its rank order's candidates x its kinds' orders)
        kinds = len({g.hardware_key() for g in part.cluster.nodes})
        small = len(enumerate_candidates(part, NodeOrders((tuple(range(len(part.cluster.nodes))),), True))) \
            * math.factorial(kinds) <= EAGER_CANDIDATES
        if details or not self.plain or small:
            search.prepare()
        else:
            families: list[dict] = [{}]
            row = self.rows[[i]]
            part_bounds(self.scenario, row, self.cost, limit=limit, should_cancel=self.poll, families=families,
                        fine=False)
            self.charge(units.PART_FAMILIES)
            search.prepare_families(families[0])

            def family_floor(family: tuple[int, int, int, int], limit: float) -> float:
                tp, pp, dp, mbs = family
                found: list[dict] = [{}]
                part_bounds(self.scenario, row, self.cost, limit=limit, should_cancel=self.poll, families=found,
                            only=(tp, dp, mbs))
                return found[0].get(family, limit)     # (not listed: at the limit or above it)

            search.family_floor = family_floor
        return search

    def merge(self, i: int, weight: float) -> bool:
        """Part i's top N into the ranking over every part; whether the best changed."""
        search = self.searches[i]
        if search.finds == self.finds[i]:
            return False
        self.finds[i] = search.finds
        before = self.ranked[0][:5] if self.ranked else None
        counts = tuple(self.rows[i].tolist())
        idle = sum(w - c for w, c in zip(self.whole, counts))
        self.ranked = [item for item in self.ranked if item[3] != i]
        self.ranked += [(weight * time_s, time_s, idle, i, key, partition, candidate)
                        for time_s, key, partition, candidate in search.found()]
        self.ranked.sort(key=lambda item: item[:5])
        del self.ranked[self.top:]
        return (self.ranked[0][:5] if self.ranked else None) != before

    def predictions(self) -> list:
        """The ranking over every part, as predictions on the whole cluster, best first."""
        out = []
        for _, _, _, i, _, partition, candidate in self.ranked:
            counts = tuple(self.rows[i].tolist())
            kept = tuple(g for g, n in enumerate(counts) if n)
            part = self.searches[i].scenario
            out.append(to_whole(self.scenario, counts, kept, priced(part, candidate.predict(partition))))
        return self.objective.rank(out)


def search_parts(scenario: Scenario, objective: Objective | None = None, *, top: int | None = None,
                 should_cancel: Callable[[], bool] | None = None,
                 progress: Callable[[float], None] | None = None,
                 deadline: float | None = None, hard_deadline: float | None = None,
                 work: float | None = None,
                 improved: Callable[[SearchResult], None] | None = None) -> tuple[SearchResult, IdleSearch]:
    """The best `top` strategies by `objective` over every part of the cluster (only the whole
    cluster with search.use_all_gpus). Infeasible candidates and the baseline are the whole
    cluster's.

    `work` (work units, work.py; None: no budget) bounds everything after the seeds: past it the
    best found is returned with the proven gap (IdleSearch.gap) over what was left unsearched, at
    the same step on any machine. `deadline` (a deadline.now() time) bounds all of it, the
    seeds too, as a safety net (IdleSearch.cut_by says which cut it). With a later
    `hard_deadline`, the deadline holds only once a strategy has been found: until then the
    search goes on to the hard one (IdleSearch.overran_s says how long past the deadline it went).
    `improved` receives the ranking so far whenever the best found improves."""
    started = now()
    objective = objective or Objective()
    objective.check(scenario)
    top = top or scenario.search.top
    bar = [0.0]

    def report(fraction: float) -> None:
        bar[0] = max(bar[0], min(fraction, 1.0))
        if progress:
            progress(bar[0])

    clock = Clock(should_cancel=should_cancel, deadline=deadline, hard_deadline=hard_deadline)
    budget = Work(work)
    user_cancel = clock.user_cancel
    checking = [False]      # the budget binds after the seeds

    def poll() -> bool:
        if clock.poll():
            return True
        if checking[0]:
            budget.check()
        return False

    groups = scenario.cluster.nodes
    whole = tuple(g.count for g in groups)
    if scenario.search.use_all_gpus:
        rows, left_out = np.array([whole], dtype=np.int64), None
    else:
        rows, left_out = part_rows(scenario)
    natural = [whole] if scenario.search.use_all_gpus else natural_parts(scenario)
    known = {tuple(row) for row in rows.tolist()} if len(rows) <= 4096 else None
    missing = [p for p in natural if (known is not None and p not in known)
               or (known is None and not ((rows == np.array(p)).all(axis=1)).any())]
    if missing:         # (only where the vectors were cut short: every natural part is searched)
        rows = np.concatenate([rows, np.array(missing, dtype=np.int64)])
    if user_cancel():
        raise Cancelled
    cost = CostModel(scenario)
    try:
        quick = part_bounds(scenario, rows, cost, quick=True, should_cancel=poll)
    except OutOfTime:
        return _nothing_in_time(scenario, started, len(rows), 0.0 if clock.hard == clock.deadline
                                else now() - clock.deadline)
    budget.charge(units.PART_QUICK * len(rows))
    prices = _prices(scenario, rows)
    keep = np.isfinite(quick) & objective.within_budget(prices)
    rows, quick, prices = rows[keep], quick[keep], prices[keep]
    weights = objective.weights(prices)
    weighted = weights * quick            # per part: the objective's weight x its bound, so far
    tight = np.zeros(len(rows), dtype=bool)     # the full bound computed ...
    reached = np.full(len(rows), INF)           # ... up to this (weighted) limit: at it or above, it may be short of its full value
    parts = _Parts(scenario, objective, top, rows, cost, poll, budget.charge)
    seeds = [i for i in dict.fromkeys(parts.find(p) for p in natural) if i is not None]
    whole_index = parts.find(whole)
    first_found_s: list[float] = []

    def tighten(indices: np.ndarray, again: bool = False) -> None:
        """The full bound of these parts (where the quick one leaves them below the N-th best); with
        `again`, of those whose bound was computed to a lower limit than the N-th best's now."""
        cutoff = parts.cutoff()
        # Fewer than N found: a bound need not go past the best found to show that a part is no
        # better (the gap stated is the best's), and without a limit it costs 15x more.
        reach = cutoff if len(parts.ranked) >= top or not parts.ranked else parts.best()
        indices = indices[(tight[indices] & (weighted[indices] >= reached[indices]) & (reached[indices] < reach))
                          if again else ~tight[indices]]
        if not len(indices):
            return
        with np.errstate(divide="ignore"):     # (a part of free nodes weighs nothing)
            limit = reach / weights[indices]
        full = part_bounds(scenario, rows[indices], cost, limit=limit, should_cancel=poll)
        budget.charge(units.PART_CALL + units.PART_FULL * len(indices))
        weighted[indices] = np.maximum(weighted[indices], weights[indices] * full)
        tight[indices] = True
        reached[indices] = reach

    def limits(weight: float, proving: bool) -> tuple[float, float]:
        """A part's (limit, loose limit), unweighted: the N-th best over every part, and while
        `proving`, the best / (1 + GAP_TARGET) (a part of free nodes weighs nothing)."""
        with np.errstate(divide="ignore"):
            limit = parts.cutoff() / weight
            loose = parts.best() / (1.0 + GAP_TARGET) / weight if proving else INF
        return limit, loose

    def note_found(i: int) -> None:
        if parts.merge(i, float(weights[i])) and improved:
            improved(_snapshot(scenario, parts, started))
        if parts.ranked and not clock.found:
            clock.found = True
            first_found_s.append(now())

    # -- the seeds ----------------------------------------------------------------------------------
    open_floor = INF         # weighted: a lower bound on what a cut left unsettled
    cut: str | None = None
    seeded = 0
    next_untried = 0
    try:
        ordered = ([whole_index] if whole_index in seeds else []) + sorted(
            (i for i in seeds if i != whole_index), key=lambda i: (weighted[i], i))
        for n, i in enumerate(ordered):
            if n == 1:      # the others' full bounds, as far as the best found (cheaper than in full)
                tighten(np.array(ordered[1:]))
            if weighted[i] >= parts.best():     # it could not have given anything better
                continue
            spent = budget.spent
            search = parts.open(i, float(weights[i]), INF, details=False,
                                report=lambda f, n=n: report(SEED_SHARE * (n + f) / len(ordered)))
            seeded += 1
            while search.queue or search.families:
                if search.done():
                    break
                search.step()
                note_found(i)
                if search.best and budget.spent - spent >= SEED_WORK:
                    break
        report(SEED_SHARE)
        # -- the seeds resumed, the most promising first (the least best found), each to its end:
        # a cluster with a group more resumes the cluster without it as that cluster's own search
        # resumes itself, with the same budget (the seeds' work is not counted against it) -----------
        checking[0] = True
        budget.budget = None if work is None else budget.spent + work
        promising = sorted((i for i, s in parts.searches.items() if s.best),
                           key=lambda i: (float(weights[i]) * min(-item[0] for item in parts.searches[i].best), i))
        for i in promising:
            search = parts.searches[i]
            weight = float(weights[i])
            while True:
                limit, loose = limits(weight, False)     # (to its end: as the sub-cluster's own search)
                if search.done(limit, loose):
                    break
                search.step(limit, loose)
                note_found(i)
        # -- every part, lowest bound first: below the best / (1 + GAP_TARGET) first (the gap
        # proven), then below the N-th best (the ranking exact) ---------------------------------------
        # the parts opened (at their search's lowest bound) and those with a full bound not yet
        # opened, by bound; those with a quick bound only wait in order of it (`untried`) and get
        # the full bound a chunk at a time as the queue reaches them
        heap = [(float(weights[i]) * s.head, i) for i, s in parts.searches.items()]
        heap += [(float(weighted[i]), i) for i in seeds if i not in parts.searches]
        heapq.heapify(heap)
        untried = [i for i in np.argsort(weighted, kind="stable").tolist() if i not in parts.searches]
        phase_spent = budget.spent
        lowest: float | None = None
        proving = True           # the first phase: below the loose limit only
        while True:
            if user_cancel():
                raise Cancelled
            cutoff = parts.cutoff()
            edge = min(cutoff, parts.best() / (1.0 + GAP_TARGET)) if proving else cutoff
            while next_untried < len(untried) and (tight[untried[next_untried]]
                                                   or untried[next_untried] in parts.searches):
                next_untried += 1
            waiting = float(weighted[untried[next_untried]]) if next_untried < len(untried) else INF
            if waiting < (heap[0][0] if heap else INF):
                if waiting >= edge:
                    if proving:
                        proving = False
                        continue
                    break
                chunk = np.array([j for j in untried[next_untried:next_untried + TIGHTEN_CHUNK]
                                  if not tight[j] and j not in parts.searches])
                tighten(chunk)
                for j in chunk.tolist():
                    heapq.heappush(heap, (float(weighted[j]), j))
                continue
            if not heap or heap[0][0] >= edge:
                if proving:
                    proving = False
                    continue
                break
            value, i = heapq.heappop(heap)
            if i not in parts.searches and value >= reached[i]:     # its bound stopped at a lower limit
                # (every part waiting so is bounded again at once: one by one, a part_bounds call
                # each, they cost more than the bound; a top N filled late left thousands so)
                stale = [j for _, j in heap if j not in parts.searches and weighted[j] >= reached[j]]
                tighten(np.array([i] + stale[:TIGHTEN_CHUNK], dtype=np.int64), again=True)
                heap = [(float(weighted[j]) if j not in parts.searches else v, j) for v, j in heap]
                heapq.heapify(heap)
                if reached[i] > value or weighted[i] > value:
                    heapq.heappush(heap, (float(weighted[i]), i))
                    continue
            # the bar: the budget spent, or how far the lowest bound has risen towards the N-th best
            lowest = value if lowest is None else lowest
            spent = (budget.spent - phase_spent) / budget.budget if budget.budget else 0.0
            risen = (value - lowest) / (cutoff - lowest) if lowest < value < cutoff < INF else 0.0
            report(SEED_SHARE + (1.0 - SEED_SHARE) * min(max(spent, risen), 0.999))
            weight = float(weights[i])
            limit, loose = limits(weight, proving)
            if i not in parts.searches:
                search = parts.open(i, weight, limit, details=False)
            else:
                search = parts.searches[i]
                if search.done(limit, loose):
                    if not search.done(limit):      # (below the N-th best: the second phase's)
                        heapq.heappush(heap, (weight * search.head, i))
                    continue
                search.step(limit, loose)
                note_found(i)
            heapq.heappush(heap, (weight * search.head, i))
    except OutOfTime as stop:
        cut = "work" if isinstance(stop, OutOfWork) else "time"
        if cut == "work" and parts.ranked:
            # the parts below the best with a quick bound only get the full one, lowest first, for
            # a gap that says something (GAP_WORK more at most, and the clock still holds)
            checking[0] = False
            try:
                extra = budget.spent + GAP_WORK
                waiting = [i for i in np.argsort(weighted, kind="stable").tolist()
                           if not tight[i] and i not in parts.searches and weighted[i] < parts.best()]
                for start in range(0, len(waiting), TIGHTEN_CHUNK):
                    if budget.spent >= extra:
                        break
                    tighten(np.array(waiting[start:start + TIGHTEN_CHUNK]))
            except OutOfTime:
                pass
        # what was left: every part's lowest bound (a search's lowest open one, the entry it was
        # settling included; a part being bounded or opened, its bound before)
        open_floor = _lowest_open(parts, weights, weighted)
        if open_floor >= parts.cutoff():
            open_floor = INF
    report(1.0)
    return _finish(scenario, objective, parts, weights, left_out, open_floor, cut, budget, clock, started,
                   deadline, first_found_s, seeded)


def _lowest_open(parts: _Parts, weights: np.ndarray, weighted: np.ndarray) -> float:
    """The least weighted bound left open over every part: a prepared search's lowest open one, else
    the part's own bound."""
    waiting = np.ones(len(weighted), dtype=bool)
    lowest = INF
    with np.errstate(divide="ignore"):
        limit = parts.cutoff() / weights
    for i, search in parts.searches.items():
        if search.prepared:
            waiting[i] = False
            lowest = min(lowest, float(weights[i]) * search.open_floor(float(limit[i])))
    return min(lowest, float(weighted[waiting].min()) if waiting.any() else INF)


def _snapshot(scenario: Scenario, parts: _Parts, started: float) -> SearchResult:
    stats = SearchStats(candidates=0, pruned=0, evaluated=0, infeasible=0, solves=0, node_orders=0,
                        all_node_orders=True, search_time_s=now() - started, open_floor=0.0)
    return SearchResult(scenario, tuple(parts.predictions()), (), None, stats)


def _finish(scenario: Scenario, objective: Objective, parts: _Parts, weights: np.ndarray, left_out: str | None,
            open_floor: float, cut: str | None, budget: Work, clock: Clock, started: float,
            deadline: float | None, first_found_s: list[float], seeded: int) -> tuple[SearchResult, IdleSearch]:
    cancel = clock.user_poll
    cutoff = parts.cutoff()
    orders_floor = INF      # weighted: a lower bound on every order left out
    candidates = pruned = evaluated = solves = 0
    all_orders = True
    whole_index = parts.find(parts.whole)
    opened = sum(search.prepared for search in parts.searches.values())
    for i, search in parts.searches.items():
        if not search.prepared:     # (a cut while it was prepared: its bound stands in the gap)
            continue
        weight = float(weights[i])
        with np.errstate(divide="ignore"):
            limit = cutoff / weight
        floor = search.orders_floor(limit, cancel)
        orders_floor = min(orders_floor, weight * floor)
        all_orders &= search.orders.complete or bool(search.orders.rest)
        candidates += search.count
        # (settled: every candidate not solved nor short of memory was ruled out by a bound)
        pruned += (max(search.count - search.evaluated - len(search.no_fit), 0) if open_floor == INF
                   else len(search.pruned) + search.pruned_unlisted)
        evaluated += search.evaluated
        solves += search.solves
    infeasible, baseline = (), None
    if whole_index is not None:     # (whatever way the search went: the same list)
        whole_search = parts.searches.get(whole_index)
        infeasible, baseline, _ = whole_details(part_scenario(scenario, parts.whole)[0], clock.poll, cancel,
                                                whole_search.costs if whole_search and whole_search.prepared else None)
    best = parts.best() if parts.ranked else None
    if best is not None and orders_floor >= cutoff:
        orders_floor = INF      # found since: nothing left out can enter the top N
    exact = left_out is None and orders_floor == INF and open_floor == INF
    gap, notes = None, []
    if left_out:
        notes.append(left_out)
    if open_floor < INF:
        gap = float(max(best / open_floor - 1.0, 0.0)) if best is not None else None
        searched = f"{opened} of the {len(parts.rows)} parts of the cluster searched"
        why = ("within the work budget" if cut == "work" else
               "before the search stopped at the time limit (not at its work budget: a slow or busy machine, so "
               "another run may find more)")
        notes.append(f"{searched} {why}" + (f"; the best found could be at most {gap:.1%} above the optimum"
                                           if gap is not None else "; nothing found in the time allowed"))
    if orders_floor < INF and best is not None:
        orders_gap = float(max(best / orders_floor - 1.0, 0.0))
        gap = max(gap or 0.0, orders_gap)
        notes.append(f"too many orders of the node groups to search all: another order could be at most "
                     f"{orders_gap:.1%} better")
    note = "; ".join(notes) or None
    strategies = tuple(parts.predictions())
    whole_search = parts.searches.get(whole_index)
    whole_orders = whole_search.orders if whole_search is not None and whole_search.prepared else None
    stats = SearchStats(candidates=candidates, pruned=pruned, evaluated=evaluated,
                        infeasible=len(infeasible), solves=solves,
                        node_orders=len(whole_orders.orders) + len(whole_orders.rest) if whole_orders else 0,
                        all_node_orders=all_orders,
                        search_time_s=now() - started,
                        orders_floor=float(orders_floor) if orders_floor < INF else INF,
                        open_floor=float(open_floor))
    result = SearchResult(scenario, strategies, infeasible, baseline, stats)
    # past the deadline with nothing found by it: how far the hard deadline let it go on
    found_s = first_found_s[0] if first_found_s else None
    late = deadline is not None and clock.hard > deadline and (found_s or now()) > deadline
    overran_s = (found_s or now()) - deadline if late else 0.0
    return result, IdleSearch(parts=len(parts.rows), searched=opened, exact=exact, gap=gap, note=note,
                              out_of_time=open_floor < INF, overran_s=overran_s, cut_by=cut if open_floor < INF else None,
                              work=budget.spent, seeds=seeded)


def _nothing_in_time(scenario: Scenario, started: float, parts: int,
                     overran_s: float) -> tuple[SearchResult, IdleSearch]:
    """The deadline (or the hard one, `overran_s` after it) passed before any search began: no
    strategy, and a note that says so."""
    stats = SearchStats(candidates=0, pruned=0, evaluated=0, infeasible=0, solves=0, node_orders=0,
                        all_node_orders=True, search_time_s=now() - started, open_floor=0.0)
    return (SearchResult(scenario, (), (), None, stats),
            IdleSearch(parts=parts, searched=0, exact=False, note="the search stopped at the time limit before any "
                       "part of the cluster was searched: nothing found", out_of_time=True, overran_s=overran_s,
                       cut_by="time"))
