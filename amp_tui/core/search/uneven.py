"""Plan's post-pass over the dimensions the exact search does not enumerate: uneven data-parallel
shares (shares.py) and per-stage tp/dp (stagewise.py). A heuristic, and `plan` says so.

For each of the best `POST_PASS_TOP` strategies the exact search returned (on the nodes it uses):
  - batch shares: when its replicas of some stage run on different GPU types, the exact best whole
    micro-batch counts per replica for its partition (terms/shares.best_counts); kept when the
    prediction beats both the strategy and the same model at even shares;
  - batch shares beyond that top: on the nodes the best strategy uses, with its techniques, in rank
    order and its placement, every (tp, pp, dp, micro-batch) whose replicas of some stage run on
    different GPU types (shallowest pipelines first, at most SHARE_CANDIDATES): the uniform
    model's exact partition, then the exact best shares for it, kept when it beats the best
    strategy and its own even shares;
  - per-stage degrees: on clusters of several GPU types, every split of its pp stages over the runs
    of one GPU type in its placement order (each run's GPUs divided evenly among its stages, one
    (tp, dp) per run; at most POST_PASS_LAYOUTS), with pipeline micro-batches of a half, one and
    two times the strategy's; each with its exact best partition; the fastest that fits is kept
    when it beats the strategy.
Strategies found are ranked with the others by the objective. Not searched: per-stage degrees for
strategies outside that top, shares with another micro-batch size or partition than
the uniform optimum's, stages straddling two GPU types with per-stage degrees. No bound on the gap
to the optimum over these dimensions is claimed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from amp_tui.core.base.errors import Cancelled, SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.costmodel.pricing import priced, used_nodes
from amp_tui.core.search import work as units
from amp_tui.core.search.deadline import Clock, OutOfTime, now
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import SearchResult
from amp_tui.core.search.work import OutOfWork, Work
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.scenario import Scenario

INF = float("inf")

POST_PASS_TOP = 5        # strategies of the exact search's top tried with shares and per-stage degrees
POST_PASS_LAYOUTS = 48   # per-stage degree layouts per strategy
POST_PASS_WORK = 500_000.0   # without a budget: after the best strategy's turn, the pass stops here (and says so)
# Stock Megatron-LM, DeepSpeed and torchtitan express neither uneven shares nor per-stage degrees:
# such a plan is listed only where it beats the best uniform plan by at least this share.
MIN_GAIN = 0.01
SHARE_CANDIDATES = 64    # (tp, pp, dp, micro-batch, order) with mixed replicas tried with shares


@dataclass(frozen=True)
class UnevenSearch:
    strategies: int      # top strategies tried
    shares_tried: int    # of them, with replicas on different GPU types
    layouts_tried: int   # per-stage (tp, dp) layouts x micro-batch sizes evaluated
    found: int           # strategies added to the ranking
    timed_out: bool = False   # a limit reached before every top strategy was tried
    by_work: bool = False     # ... the work budget (the same on every machine), not the time limit

    @property
    def note(self) -> str:
        limit = (", stopped at its work budget" if self.by_work else ", stopped at the time limit") if self.timed_out else ""
        return (f"batch shares and per-stage tp/dp searched heuristically (docs/search.md, Uneven shares): tried on the "
                f"top {self.strategies} strategies ({self.shares_tried} with replicas on different GPU types, "
                f"{self.layouts_tried} per-stage layouts{limit}), {self.found} added; no bound on the gap is claimed")

    def to_dict(self) -> dict:
        return {"strategies": self.strategies, "shares_tried": self.shares_tried,
                "layouts_tried": self.layouts_tried, "found": self.found, "exact": False,
                "timed_out": self.timed_out, "by_work": self.by_work, "note": self.note}


def improve(scenario: Scenario, result: SearchResult, objective: Objective | None = None,
            top: int = POST_PASS_TOP, *, deadline: float | None = None, work: float | None = None,
            should_cancel: Callable[[], bool] | None = None) -> tuple[SearchResult, UnevenSearch]:
    """`result` with the strategies the post-pass found added and the list re-ranked. Past
    `work` (work units, work.py: the same step on every machine) or `deadline` (a
    deadline.now() time, the safety net), both polled inside every loop with
    `should_cancel`, it keeps what it found and says it stopped; without either, the best
    strategy's turn completes and the rest stop after POST_PASS_WORK."""
    objective = objective or Objective()
    found: list[Prediction] = []
    counts = [0, 0]         # shares tried, per-stage layouts tried (kept by the steps a deadline cuts)
    clock = Clock(should_cancel=should_cancel, deadline=deadline)
    budget = Work(work)
    later = Work(work if work is not None or deadline is not None else POST_PASS_WORK)

    def charge(amount: float) -> None:
        budget.charge(amount)
        later.charge(amount)

    def poll_all() -> bool:
        if clock.poll():
            return True
        budget.check()
        return False

    def poll_later() -> bool:
        if poll_all():
            return True
        later.check()
        return False

    tried, timed_out, by_work = [], False, False
    try:
        # Shares beyond the top first: where shares win, they win on other degrees than the
        # uniform best's (pure data parallelism, e.g.), and a partition solve each is cheap.
        if result.strategies:
            found += [p for p in _shares_beyond(scenario, result.strategies[0], poll_all, counts, charge)
                      if objective.admits(p.cost_per_hour_usd)]
        for prediction in result.strategies[:top]:
            poll = poll_later if tried else poll_all
            if poll():
                raise Cancelled
            tried.append(prediction)
            found += [p for p in _improve_one(scenario, prediction, poll, counts, charge)
                      if objective.admits(p.cost_per_hour_usd)]
    except OutOfTime as stop:
        timed_out, by_work = True, isinstance(stop, OutOfWork)
    shares_tried, layouts = counts
    seen = {_key(p) for p in result.strategies}
    unique = []
    for p in found:
        if _key(p) not in seen:
            seen.add(_key(p))
            unique.append(p)
    if result.strategies:
        bar = objective.key(result.strategies[0])[0] * (1.0 - MIN_GAIN)
        unique = [p for p in unique if objective.key(p)[0] <= bar]
    found = unique
    ranked = objective.rank([*result.strategies, *found])[:max(len(result.strategies), 1)]
    added = sum(1 for p in ranked if any(p is f for f in found))
    search = UnevenSearch(len(tried), shares_tried, layouts, added, timed_out, by_work)
    return replace(result, strategies=tuple(ranked)), search


def _key(p: Prediction) -> tuple:
    s = p.strategy
    return (s.tps, s.pp, s.dps, s.micro_batch_size, s.partition, s.placement, s.batch_shares, s.idle)


def _improve_one(scenario: Scenario, prediction: Prediction, poll: Callable[[], bool],
                 tried: list[int], charge: Callable[[float], None] = lambda amount: None) -> list[Prediction]:
    """What shares and per-stage degrees add to one strategy; `tried` counts the shares and the
    per-stage layouts tried (in place: a deadline keeps the count)."""
    from amp_tui.core.costmodel.parts import part_scenario, to_part, to_whole

    strategy = prediction.strategy
    if strategy.per_stage or strategy.batch_shares:
        return []
    counts = used_nodes(scenario, strategy)
    part, kept = part_scenario(scenario, counts)
    local = to_part(strategy, kept)
    knobs = resolve(local, part.training)
    if knobs.ep > 1 or knobs.zero_stage >= 3:
        return []
    cost = CostModel(part, knobs)
    out = []
    shared = _with_shares(cost, local, prediction.iteration_time_s)
    if shared is not None:
        tried[0] += 1
        if shared[0] is not None:
            out.append(shared[0])
    best, _ = _per_stage(part, cost, local, prediction.iteration_time_s, poll, tried, charge)
    if best is not None:
        out.append(best)
    return [priced(scenario, to_whole(scenario, counts, kept, p)) for p in out]


def _with_shares(cost: CostModel, strategy, time_s: float):
    """(the shares prediction if it wins, else None), or None when shares cannot matter."""
    from amp_tui.core.costmodel.shares import ReplicaTimes, best_shares, predict_with_shares

    if strategy.dp < 2:
        return None
    candidate = cost.candidate(strategy.tp, strategy.pp, strategy.dp, strategy.micro_batch_size, strategy.placement)
    times = ReplicaTimes(candidate)
    if not times.differ():
        return None
    shares = best_shares(candidate, strategy.partition, times)
    if len(set(shares)) == 1:
        return (None,)
    even = (cost.training.global_batch_size // strategy.dp,) * strategy.dp
    even_time = predict_with_shares(cost.candidate(strategy.tp, strategy.pp, strategy.dp, strategy.micro_batch_size,
                                                   strategy.placement), strategy.partition, even, times).iteration_time_s
    p = predict_with_shares(candidate, strategy.partition, shares, times)
    if p.fits_memory and p.iteration_time_s < min(time_s, even_time) * (1 - 1e-9):
        return (p,)
    return (None,)


def _per_stage(scenario: Scenario, cost: CostModel, strategy, time_s: float,
               poll: Callable[[], bool] = lambda: False, counts: list[int] | None = None,
               charge: Callable[[float], None] = lambda amount: None) -> tuple[Prediction | None, int]:
    """The best per-stage layout of `strategy` that beats `time_s`, and how many were tried (also
    added to counts[1]); `poll` is the cancellation check, polled inside each partition search."""
    from amp_tui.core.costmodel.stagewise import StageWise, micro_batch_sizes, typed_stage_degrees
    from amp_tui.core.search.partition.walk import best_per_stage_partition
    from amp_tui.core.spec.strategy import varying_degrees
    from amp_tui.core.spec.validity import validate_strategy

    if len({g.gpu.name for g in scenario.cluster.nodes}) < 2 or cost.knobs.virtual_stages > 1:
        return None, 0
    order = strategy.placement
    target = strategy.micro_batch_size * strategy.dp
    best, tried = None, 0
    counts = counts if counts is not None else [0, 0]
    for tps, dps in typed_stage_degrees(scenario, strategy.pp, order, cost.knobs.cp, POST_PASS_LAYOUTS):
        for mbs in micro_batch_sizes(scenario, dps):
            if poll():
                raise Cancelled
            if mbs * max(dps) not in (target // 2, target, target * 2):
                continue
            candidate = replace(strategy, tp=max(tps), dp=max(dps), stage_tp=varying_degrees(tps),
                                stage_dp=varying_degrees(dps),
                                micro_batch_size=mbs, partition=None)
            try:
                validate_strategy(scenario, candidate)
            except SpecError:
                continue
            tried += 1
            counts[1] += 1
            model = StageWise(cost, candidate, order)
            found = best_per_stage_partition(model, min(time_s, best[0] if best else INF) * (1 - 1e-9), poll)
            charge(units.CANDIDATE + units.STAGE_WISE * strategy.pp
                   + units.solve_units(found.solves, model.num_layers * strategy.pp))
            partition = found.partition
            if partition is None:
                continue
            seconds = model.iteration_time(partition)
            if best is None or seconds < best[0]:
                best = (seconds, model, partition)
    return (best[1].predict(best[2]) if best else None), tried


def _shares_beyond(scenario: Scenario, best: Prediction, poll: Callable[[], bool],
                   counts: list[int], charge: Callable[[float], None] = lambda amount: None) -> list[Prediction]:
    """Strategies with batch shares among candidates whose replicas run on different GPU types
    (counts[0] counts those tried, in place; `poll` as for _improve_one)."""
    from amp_tui.core.costmodel.parts import part_scenario, to_part, to_whole
    from amp_tui.core.costmodel.shares import best_shares, predict_with_shares, replicas_differ
    from amp_tui.core.search.orders import NodeOrders
    from amp_tui.core.search.partition.tables import SegmentTables
    from amp_tui.core.search.partition.walk import solve
    from amp_tui.core.search.search import enumerate_candidates

    if best.strategy.per_stage or best.strategy.batch_shares:
        return []
    used = used_nodes(scenario, best.strategy)
    part, kept = part_scenario(scenario, used)
    local = to_part(best.strategy, kept)
    knobs = resolve(local, part.training)
    if knobs.ep > 1 or knobs.zero_stage >= 3 or len({g.gpu.name for g in part.cluster.nodes}) < 2:
        return []
    cost = CostModel(part, knobs)
    orders = tuple(dict.fromkeys([tuple(range(len(part.cluster.nodes))), local.placement]))
    keys = []
    for key in enumerate_candidates(part, NodeOrders(orders, False), knobs):
        if poll():          # (a layout each: 40 ms in all on 1,000 layers)
            raise Cancelled
        charge(units.CANDIDATE)
        if key[2] > 1 and replicas_differ(cost.layout(key[0], key[1], key[2], key[4])):
            keys.append(key)
    keys.sort(key=lambda key: (key[1], -key[3], key))
    out = []
    for tp, pp, dp, mbs, order in keys[:SHARE_CANDIDATES]:
        if poll():
            raise Cancelled
        counts[0] += 1
        candidate = cost.candidate(tp, pp, dp, mbs, order)
        tables = SegmentTables(candidate)
        solved = solve(tables, INF, poll)
        charge(units.solve_units(solved.solves, tables.__dict__.get("cells", 0)))
        partition = solved.partition
        if partition is None:
            continue
        shares = best_shares(candidate, partition)
        if len(set(shares)) == 1:
            continue
        p = predict_with_shares(candidate, partition, shares)
        if not p.fits_memory or p.iteration_time_s >= best.iteration_time_s * (1 - 1e-9):
            continue
        even = (part.training.global_batch_size // dp,) * dp      # shares, not the per-replica view, must win
        if p.iteration_time_s < predict_with_shares(cost.candidate(tp, pp, dp, mbs, order), partition,
                                                    even).iteration_time_s * (1 - 1e-9):
            out.append(priced(scenario, to_whole(scenario, used, kept, p)))
    return out
