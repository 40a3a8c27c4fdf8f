"""Search the strategy space: every (tp, pp, dp, micro-batch size, node-group order) with its exact
best partition, ranked by predicted iteration time.

Candidates are visited best-first by a lower bound on their iteration time; once the bound of the
next candidate cannot beat the N-th best strategy found, the rest are pruned. The bound and the
partition search are exact, so pruning never drops a strategy that belongs in the top N.

PartSearch holds one cluster's search step by step, so that the search over the parts of a cluster
(subclusters.py) can interleave many, always stepping the one with the lowest bound; search() runs
one to the end.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import Candidate, CostModel
from amp_tui.core.costmodel.prediction import Prediction, over_capacity
from amp_tui.core.costmodel.pricing import priced
from amp_tui.core.search import work as units
from amp_tui.core.search.bounds.floors import REFINE_BATCH, REFINE_MIN_LAYERS, memory_shortfall, time_floors
from amp_tui.core.search.bounds.order_floors import expand_family, family_entries, order_free_floors
from amp_tui.core.search.deadline import Clock, OutOfTime, now
from amp_tui.core.search.orders import NodeOrders, node_orders
from amp_tui.core.search.partition.dp import INF
from amp_tui.core.search.partition.memory import even_split_memory, partitions_fit
from amp_tui.core.search.partition.tables import SegmentTables
from amp_tui.core.search.partition.walk import quick_partition, solve
from amp_tui.core.search.results import Infeasible, SearchResult, SearchStats
from amp_tui.core.search.space import divisors, enumerate_candidates, tp_degrees
from amp_tui.core.spec.knobs import knob_choices
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import even_partition

__all__ = ["Infeasible", "PartSearch", "SearchResult", "SearchStats", "divisors", "enumerate_candidates",
           "search", "tp_degrees"]

PREPARATION = 0.2  # share of the progress bar for enumerating and bounding candidates
ALL_ORDERS = (-1,)  # a family entry's order that stands for every order (PartSearch.prepare_families)
EAGER_CANDIDATES = 400  # a part of at most this many candidates is searched from all of them (cheaper
                        # than family by family: their bounds come in vectorised batches)


class PartSearch:
    """One cluster's best-first search, a step at a time.

    prepare() enumerates the candidates and gives each its cheap bound; head is the lowest bound of
    what is left unsettled; step(cutoff) settles or refines the entry with the lowest bound (its
    refined bound, a family's orders, a prune or a partition solve), with the limit the smaller
    of its own N-th best and `cutoff` (a caller's N-th best elsewhere); result() lists what it
    found. `poll` is the cancellation check polled inside every loop (it raises OutOfTime past a
    deadline, OutOfWork past a work budget, or returns True for the user's cancel); `charge`
    receives the work of each step (work.py)."""

    def __init__(self, scenario: Scenario, *, top: int, poll: Callable[[], bool], details: bool = True,
                 charge: Callable[[float], None] | None = None, report: Callable[[float], None] | None = None):
        self.scenario, self.top, self.details = scenario, top, details
        self.poll = poll
        self.charge = charge or (lambda amount: None)
        self.report = report or (lambda fraction: None)
        self.best: list[tuple[float, tuple, tuple[int, ...], Candidate]] = []   # max-heap by -J of the top N
        self.prepared = False
        self.queue: list[tuple] = []
        self.families: list[tuple] = []
        self.baseline: tuple[float, tuple, Candidate] | None = None
        self.evaluated = self.solves = 0
        self.pruned: list[Candidate] = []
        self.pruned_unlisted = 0     # candidates of the orders left out ruled out by bounds
        self.expanding = False       # a family has been expanded: both queues in order of bound
        self.at_hand = INF           # the bound of the entry being settled (a cut leaves it unsettled)
        self.finds = 0               # strategies that entered the top N (a caller merging them sees news)
        self.guessed: set[tuple] = set()     # candidates whose quick partition is in hand (before any solve)
        self.counted: set[tuple] = set()     # candidates counted in `evaluated`
        # (tp, pp, dp, micro-batch size), limit -> a finer bound of a family of every order (a part's
        # search started from part_bounds's cheap ones, prepare_families), or None
        self.family_floor: Callable[[tuple[int, int, int, int], float], float] | None = None

    def cancel(self) -> bool:
        return self.poll()

    def prepare(self) -> None:
        """Every candidate with its cheap bound, in the queues (idempotent)."""
        if self.prepared:
            return
        scenario, cancel = self.scenario, self.cancel
        self.rank = tuple(range(len(scenario.cluster.nodes)))
        self.orders = orders = node_orders(scenario)
        # One cost model per combination of training techniques; a key's last entry says which.
        self.costs = costs = [CostModel(scenario, knobs) for knobs in knob_choices(scenario.training, scenario.model)]
        self.keys = keys = [(*key, k) for k, cost in enumerate(costs)
                            for key in enumerate_candidates(scenario, orders, cost.knobs)]
        sizes: dict[tuple[int, int], list[int]] = {}   # micro-batch sizes per tp, computed in one pass each
        for tp, _, _, mbs, _, k in keys:
            sizes.setdefault((k, tp), []).append(mbs)
        for group in range(len(scenario.cluster.nodes)):
            for (k, tp), micro_batch_sizes in sizes.items():
                if cancel():
                    raise Cancelled
                costs[k].prepare_layer_times(group, tp, micro_batch_sizes)
        layers = scenario.model.num_layers
        self.no_fit: list[tuple[Candidate, str | None]] = []     # no partition fits: why, if known
        fitting = []
        for index, key in enumerate(keys):
            if cancel():
                raise Cancelled
            if index % 64 == 0:
                self.report(PREPARATION * index / len(keys))
            candidate = costs[key[5]].candidate(*key[:5])
            self.charge(units.CANDIDATE)
            shortfall = memory_shortfall(candidate)
            if shortfall:
                self.no_fit.append((candidate, shortfall))
                continue
            fitting.append((key, candidate))
        # Every candidate gets the cheap floor now; the refined one (memory caps, core layers, the
        # exposed all-reduce) only when it reaches the head of the queue still below the limit, a
        # few at a time, and goes back in line with it.
        floors = time_floors([candidate for _, candidate in fitting], cancel, refine=False)
        self.charge(sum(units.FLOOR + units.FLOOR_CELL * c.pp * layers for _, c in fitting))
        self.queue = [(floor, key, False, candidate) for floor, (key, candidate) in zip(floors, fitting)]
        # Orders listed but not enumerated: one entry per (tp, pp, dp, micro-batch size) family, at
        # its bound over every order, without a candidate, in a queue of their own; the family's
        # orders are enumerated when it reaches the head still below the limit, and all pruned at
        # once otherwise. The first family waits until no listed order's candidate is left below
        # the limit: building and bounding its hundreds of orders costs as much as a hundred
        # solves, and the limit the listed orders set prunes them (on the six-type cluster the
        # optimum is a listed order: found at 0.6 s of CPU instead of 2.3 s, after two families'
        # expansions). From then on, lowest bound first across both queues: a family expanded
        # early lowers the limit for the others'.
        self.families = family_entries(costs, keys, cancel) if orders.rest else []
        self.charge(len(self.families) * (units.FAMILY + units.FAMILY_LAYER * layers))
        heapq.heapify(self.queue)
        heapq.heapify(self.families)
        self.count = len(keys) + len(self.families) * len(orders.rest)     # candidates, every order's
        self.listed = set(orders.orders)
        self.settled = len(self.no_fit)        # candidates settled (to report progress)
        self.prepared = True

    def prepare_families(self, bounds: dict[tuple[int, int, int, int], float]) -> None:
        """Start from a bound per (tp, pp, dp, micro-batch size) family instead of every candidate
        (`bounds`: part_bounds's for this part; a family left out is at the limit or above it, or
        cannot fit): a family is expanded into its candidates only when it reaches the head below
        the limit, so a part whose families all lie above it costs one vectorised bound, not a
        thousand candidates. Only without details (no infeasible list, no baseline) and with one
        combination of training techniques (the bounds are that cost model's)."""
        if self.prepared:
            return
        scenario = self.scenario
        self.rank = tuple(range(len(scenario.cluster.nodes)))
        self.orders = orders = node_orders(scenario)
        self.costs = [CostModel(scenario)]
        valid = {key[:4] for key in enumerate_candidates(scenario, NodeOrders((self.rank,), True), self.costs[0].knobs)}
        self.keys, self.no_fit, self.queue = [], [], []
        self.families = [(floor, (*family, ALL_ORDERS, 0), False, None) for family, floor in bounds.items()
                         if family in valid]
        heapq.heapify(self.families)
        self.expanding = True
        self.count = len(self.families) * (len(orders.orders) + len(orders.rest))
        self.listed = set(orders.orders)
        self.settled = 0
        self.prepared = True

    @property
    def head(self) -> float:
        """The lowest bound of the candidates left unsettled (INF: none left)."""
        return min(self.queue[0][0] if self.queue else INF, self.families[0][0] if self.families else INF)

    def nth_best(self) -> float:
        return -self.best[0][0] if len(self.best) >= self.top else INF

    def limit(self, cutoff: float = INF) -> float:
        return min(self.nth_best(), cutoff)

    def done(self, cutoff: float = INF, loose: float = INF) -> bool:
        """Whether nothing left could enter the top N (the rest is pruned on the way out), or,
        with `loose`, nothing left lies below it."""
        return self.head >= min(self.limit(cutoff), loose)

    def step(self, cutoff: float = INF, loose: float = INF) -> None:
        """Settle (or refine the bound of) the entry with the lowest bound, see the class. With
        `loose` below the limit (a caller proving a gap first), partitions are searched only below
        it: a candidate none of whose partitions is goes back in line at it, to be searched again
        if the search goes on past it; nothing is dropped that the limit alone would keep."""
        queue, families, cancel = self.queue, self.families, self.cancel
        costs, orders = self.costs, self.orders
        if cancel():
            raise Cancelled
        limit = self.limit(cutoff)
        tight = min(limit, loose)
        # (with nothing to beat yet, a candidate in hand is solved before more families are
        # expanded: a first strategy sets the limit that prunes them)
        family = bool(families) and (not queue or families[0][0] < queue[0][0] and tight < INF
                                     and (self.expanding or queue[0][0] >= tight))
        floor, key, refined, candidate = heapq.heappop(families if family else queue)
        self.at_hand = floor
        if key[4] == ALL_ORDERS:    # a family of every order (prepare_families)
            if not refined and floor < limit and self.family_floor is not None:
                finer = self.family_floor(key[:4], limit)       # its full bound, back in line
                self.charge(units.PART_FAMILY)
                heapq.heappush(families, (max(floor, finer), key, True, None))
            else:
                self._expand(floor, key, limit)
            self.at_hand = INF
            return
        if not key[4]:              # a family of the orders left out
            if not refined and floor < limit:   # its bound with the pipeline's ends placed, back in line
                (finer,) = order_free_floors(costs[key[5]], [key[:4]], cancel, ends=True)
                self.charge(units.FAMILY + units.FAMILY_LAYER * self.scenario.model.num_layers)
                heapq.heappush(families, (max(floor, finer), key, True, None))
            else:
                more = expand_family(costs[key[5]], key, orders.rest, floor, cancel, limit) if floor < limit else []
                if floor < limit:
                    self.charge(len(orders.rest) * (units.CANDIDATE + self._refine_units(key[1])))
                self.expanding = self.expanding or floor < limit
                self.pruned_unlisted += len(orders.rest) - len(more)      # (by the bound, or short of memory)
                self.settled += len(orders.rest) - len(more)
                for item in more:
                    heapq.heappush(queue, item)
            self.at_hand = INF
            return
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
            finer = time_floors([c for _, _, c in batch], cancel, limit=limit)
            self.charge(sum(self._refine_units(c.pp) for _, _, c in batch))
            for (old, k, c), new in zip(batch, finer):
                heapq.heappush(queue, (max(old, new), k, True, c))
            for item in aside:
                heapq.heappush(queue, item)
            self.at_hand = INF
            return
        if len(self.best) < self.top and key not in self.guessed:
            # a strategy in hand before any solve (a quick partition), so that a limit prunes
            # from the start; the candidate goes back in line to be solved
            self.guessed.add(key)
            quick = quick_partition(candidate)
            self.charge(units.QUICK + units.QUICK_STAGE * candidate.pp)
            if quick is not None:           # (a partition evaluated: counted as a solve's is)
                self._count(key)
                self._keep(quick[0], key, quick[1], candidate)
            heapq.heappush(queue, (floor, key, refined, candidate))
            self.at_hand = INF
            return
        self.report(PREPARATION + (1 - PREPARATION) * self.settled / max(self.count, 1))
        self.settled += 1
        if self.details and key[4] == self.rank and (self.baseline is None or floor < self.baseline[0]):
            # could be the best uniform one
            uniform, _, over = candidate.quick_evaluate(even_partition(candidate.num_layers, candidate.pp))
            if over <= 0 and (self.baseline is None or (uniform, key) < self.baseline[:2]):
                self.baseline = (uniform, key, candidate)
        listed = key[4] in self.listed     # (the infeasible list covers the orders searched in full)
        if floor >= limit:
            if key in self.counted:         # (evaluated already: a quick partition, a solve below a loose limit)
                pass
            elif listed:
                self.pruned.append(candidate)
            else:
                self.pruned_unlisted += 1
            self.at_hand = INF
            return
        tables = SegmentTables(candidate)
        result = solve(tables, tight, cancel)
        self.charge(units.solve_units(result.solves, tables.__dict__.get("cells", 0)))
        self._count(key)
        self.solves += result.solves
        if not result.fits:
            if listed:
                self.no_fit.append((candidate, None))
        elif result.partition is not None:
            self._keep(result.iteration_time_s, key, result.partition, candidate)
        elif tight < limit:         # none below the loose limit: back in line at it
            heapq.heappush(queue, (tight, key, True, candidate))
            self.settled -= 1
        self.at_hand = INF

    def _count(self, key: tuple) -> None:
        """Candidate `key` evaluated (once, however many times its partitions are searched)."""
        if key not in self.counted:
            self.counted.add(key)
            self.evaluated += 1

    def _keep(self, time_s: float, key: tuple, partition: tuple[int, ...], candidate: Candidate) -> None:
        """A strategy of candidate `key` into the top N: in place of the candidate's own (a quick
        partition before its solve) where it is better, else where it beats the N-th."""
        negated = _negate(key)
        entry = (-time_s, negated, partition, candidate)
        for index, item in enumerate(self.best):
            if item[1] == negated:
                if time_s < -item[0]:
                    self.best[index] = entry
                    heapq.heapify(self.best)
                    self.finds += 1
                return
        if len(self.best) < self.top:
            heapq.heappush(self.best, entry)
            self.finds += 1
        elif heapq.heappushpop(self.best, entry) is not entry:
            self.finds += 1

    def _expand(self, floor: float, key: tuple, limit: float) -> None:
        """A family of every order: its listed orders' candidates into the queue (each at the larger
        of its bound and the family's), the other orders as a family of their own; or, at the limit
        or above it, all pruned."""
        tp, pp, dp, mbs, _, k = key
        orders = self.orders
        listed = orders.orders if pp > 1 or dp > 1 else orders.orders[:1]
        rest = orders.rest if pp > 1 or dp > 1 else ()
        if floor >= limit:
            self.pruned_unlisted += len(listed) + len(rest)
            self.settled += len(listed) + len(rest)
            return
        more = expand_family(self.costs[k], key, listed, floor, self.cancel, limit)
        self.charge(len(listed) * (units.CANDIDATE + self._refine_units(pp)))
        self.keys += [item[1] for item in more]
        self.pruned_unlisted += len(listed) - len(more)
        self.settled += len(listed) - len(more)
        for item in more:
            heapq.heappush(self.queue, item)
        if rest:
            heapq.heappush(self.families, (floor, (tp, pp, dp, mbs, (), k), False, None))

    def _refine_units(self, pp: int) -> float:
        return units.REFINE + units.REFINE_CELL * pp * self.scenario.model.num_layers

    def run(self, cutoff: float = INF) -> None:
        """Step until nothing left could enter the top N (then prune what is left)."""
        while self.queue or self.families:
            self.step(cutoff)

    def open_floor(self, cutoff: float = INF) -> float:
        """Cut short: a lower bound on every candidate left unsettled (INF: none could enter the
        top N, so the ranking is exact all the same)."""
        floor = min(self.at_hand, self.head)
        return INF if floor >= self.limit(cutoff) else floor

    def found(self) -> list[tuple[float, tuple, tuple[int, ...], Candidate]]:
        """(time, key, partition, candidate) of the top N found, best first."""
        return [(-item[0], _negate(item[1]), item[2], item[3])
                for item in sorted(self.best, key=lambda item: (-item[0], _negate(item[1])))]

    def orders_floor(self, cutoff: float = INF, cancel: Callable[[], bool] | None = None) -> float:
        """Where too many node orders exist to list (no family of the others is enumerated): a
        lower bound on every order left out whose family could still enter the top N (INF: none)."""
        orders = self.orders
        floor = math.inf
        if not orders.complete and not orders.rest:
            limit = self.limit(cutoff)
            for value, *_ in family_entries(self.costs, self.keys, cancel or (lambda: False)):
                if value < limit:
                    floor = min(floor, value)
        return floor

    def result(self, started: float, open_floor: float = INF, cutoff: float = INF,
               user_poll: Callable[[], bool] | None = None,
               poll: Callable[[], bool] | None = None, orders: bool = True) -> SearchResult:
        """The search's result (cut short: `open_floor` bounds what it left unsettled). What is
        left is bounded work that only `user_poll` stops, but the check whether pruned candidates
        fit, which `poll` may cut (then the infeasible list holds those met so far). Without
        `orders`, the orders left out are not bounded (orders_floor)."""
        scenario = self.scenario
        cancel = user_poll or (lambda: False)
        orders_floor = self.orders_floor(cutoff, cancel) if orders else math.inf
        no_fit = list(self.no_fit)
        # Whether a pruned candidate fits decides only whether it is listed as infeasible, so that
        # the list does not depend on `top` (out of time: the infeasible list holds those met so far).
        if self.details and open_floor == INF:
            try:
                no_fit += [(candidate, None) for candidate, fits
                           in zip(self.pruned, partitions_fit(self.pruned, poll or cancel)) if not fits]
            except OutOfTime:
                pass
        infeasible = _infeasible(no_fit, cancel) if self.details else []
        strategies = []
        for _, _, partition, candidate in self.found():
            if cancel():
                raise Cancelled
            strategies.append(priced(scenario, candidate.predict(partition)))
        # The partition solve's time and the prediction's sum the same terms in another order, so
        # near-ties may differ in the last bits: list in the order of the times reported (stable:
        # exact ties keep the search's order).
        strategies.sort(key=lambda prediction: prediction.iteration_time_s)
        baseline_prediction = None
        if self.baseline is not None:
            candidate = self.baseline[2]
            baseline_prediction = priced(scenario, candidate.predict(even_partition(candidate.num_layers, candidate.pp)))
        stats = SearchStats(candidates=self.count, pruned=len(self.pruned) + self.pruned_unlisted,
                            evaluated=self.evaluated, infeasible=len(infeasible), solves=self.solves,
                            node_orders=len(self.orders.orders) + len(self.orders.rest),
                            all_node_orders=self.orders.complete or bool(self.orders.rest),
                            search_time_s=now() - started, orders_floor=float(orders_floor),
                            open_floor=float(open_floor))
        infeasible.sort(key=lambda entry: (entry.strategy.tp, entry.strategy.pp, entry.strategy.micro_batch_size,
                                           entry.strategy.placement or ()))
        return SearchResult(scenario, tuple(strategies), tuple(infeasible), baseline_prediction, stats)


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
    clock = Clock(should_cancel=should_cancel, deadline=deadline, hard_deadline=hard_deadline)
    part = PartSearch(scenario, top=top or scenario.search.top, poll=clock.poll, details=details, report=progress)
    open_floor = INF
    part.prepare()
    try:
        while part.queue or part.families:
            part.step(cutoff)
            clock.found = clock.found or bool(part.best)
    except OutOfTime:
        open_floor = part.open_floor(cutoff)
    if progress:
        progress(1.0)
    return part.result(started, open_floor, cutoff, clock.user_poll, clock.poll)


def whole_details(scenario: Scenario, poll: Callable[[], bool], user_poll: Callable[[], bool],
                  costs: list[CostModel] | None = None) -> tuple[tuple[Infeasible, ...], Prediction | None, int]:
    """What a search with details lists whatever way it went: the candidates (in the orders searched
    in full) no partition fits, and the best even split in rank order that fits (the baseline),
    and how many candidates there are. Bounded work, but `poll` may cut it where a deadline has
    passed (OutOfTime): then the lists hold what was found by then; `user_poll` (the user's cancel)
    alone stops what is left.
    `costs`: the search's cost models, one per combination of techniques (their layouts are
    reused)."""
    orders = node_orders(scenario)
    rank = tuple(range(len(scenario.cluster.nodes)))
    no_fit: list[tuple[Candidate, str | None]] = []
    rest: list[Candidate] = []
    uniform: list[tuple[tuple, Candidate]] = []
    count = 0
    baseline: tuple[float, tuple, Candidate] | None = None
    try:
        for k, knobs in enumerate(knob_choices(scenario.training, scenario.model)):
            cost = costs[k] if costs is not None and k < len(costs) else CostModel(scenario, knobs)
            keys = enumerate_candidates(scenario, orders, knobs)
            families = {key[:4] for key in keys if key[1] > 1 or key[2] > 1} if orders.rest else ()
            count += len(keys) + len(families) * len(orders.rest)
            for key in keys:
                if poll():
                    raise Cancelled
                candidate = cost.candidate(*key)
                why = memory_shortfall(candidate)
                if why:
                    no_fit.append((candidate, why))
                    continue
                rest.append(candidate)
                if key[4] == rank:
                    uniform.append(((*key, k), candidate))
        # The best even split: lowest cheap bound first, until that bound reaches the best found.
        floors = time_floors([candidate for _, candidate in uniform], poll, refine=False)
        for floor, (key, candidate) in sorted(zip(floors, uniform), key=lambda item: (item[0], item[1][0])):
            if baseline is not None and floor >= baseline[0]:
                break
            time_s, _, over = candidate.quick_evaluate(even_partition(candidate.num_layers, candidate.pp))
            if over <= 0 and (baseline is None or (time_s, key) < baseline[:2]):
                baseline = (time_s, key, candidate)
        no_fit += [(candidate, None) for candidate, fits in zip(rest, partitions_fit(rest, poll)) if not fits]
    except OutOfTime:
        pass
    infeasible = _infeasible(no_fit, user_poll)
    infeasible.sort(key=lambda entry: (entry.strategy.tp, entry.strategy.pp, entry.strategy.micro_batch_size,
                                       entry.strategy.placement or ()))
    prediction = None
    if baseline is not None:
        candidate = baseline[2]
        prediction = priced(scenario, candidate.predict(even_partition(candidate.num_layers, candidate.pp)))
    return tuple(infeasible), prediction, count


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
