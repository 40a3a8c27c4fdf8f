"""The exact optimal partition of layers into pipeline stages for one candidate.

The objective (cost.py) is  J = (B - 1) max_s tau_s + sum_s g_s + max_s E_s  with per-stage memory
limits, where g_s = C_s + c_s (compute plus the send after the stage). Two max-terms and a sum
rule out a plain dynamic program, so we walk Pareto frontiers, each step a vectorised DP:

  outer walk over the largest E: with every stage's E below a limit e, find the partition S that
  minimises (B - 1) max tau + sum g (inner walk). Any partition whose max E lies in [E(S), e)
  costs at least J(S), so the next limit is E(S). Stop when no partition is left or when
  (the inner value) + min-max-E cannot beat the best J found.

  inner walk over the bottleneck tau: minimise sum g with every stage's tau below a limit t; the
  result S has sum g = sigma and max tau = T; partitions with max tau in [T, t) cost at least
  (B - 1) T + sigma, so the next limit is T. Stop when (B - 1) min-max-tau + sigma cannot beat
  the best. (E has few distinct values when layers repeat, tau many: walking E outside takes
  fewer DPs than the other way round, e.g. 95 against 116 in paper-het-cluster.)

  Both walks prune with bounds on what is left, not only the global t* = min max tau and
  e* = min max E: each E limit starts from t_low, the least max tau with every E below it, and
  the tau walk keeps x_low, the least max E with every tau and E below the limits (one minmax DP
  each). With uneven layers the Pareto frontier is long and the global bounds stop nothing until
  the walk reaches t*: 1,000 uneven layers on mixed GPUs took 1,681 DPs for one candidate, 52 now.

Every step removes only partitions proven no better than one already found, so the result is exact;
tests/core/test_core_partition.py checks it against brute force over all partitions.

The DPs read segment tables (SegmentTables), cut to what can matter before they are built:
  - length: a partition with max tau >= (J - sum-g floor - max-E floor) / (B - 1) costs at least J,
    so with J the bound to beat (or the even split's time) no segment whose compute alone reaches
    that tau is needed; as compute grows with the segment, that caps its length W, near L / pp
    for a balanced optimum instead of all that fits in memory;
  - rows: with segments of at most W layers, stage s ends within [L - (pp - 1 - s) W, (s + 1) W],
    so only those ends get a row; with every stage's tau below the cap, greedy walks over the
    prefix sums from both ends narrow that per stage (SegmentTables._reach_limits: a slow stage
    of a mixed cluster gets a narrow band); each DP narrows it again to its own longest segment;
  - the cap: the bound, or else the time of the even split or of a partition balanced by compute
    when one fits, and once the walk's first partitions are known, their time if that cuts the
    tables to half or less.
Together about L W cells per table instead of pp L^2 (1,000 uneven layers on 4 stages, 2x4x128 of
bench-1024-gpus-1000-layers: 2.0 M cells cut at what fits in memory, 1.0 M banded, 0.43 M with
the tau cap of tp 4). Memory feasibility needs no table either: a segment needs more memory the
more layers it holds, so each row's fitting lengths are found by binary search. Tables of more
than MAX_TABLE_CELLS cells (with one micro-batch no bottleneck cap applies) are lean: never held
whole, each DP computes a chunk of rows at a time and drops it, so memory is bounded for every
pipeline depth, and the search leaves none out.

With one or two stages there are at most L - 1 partitions, so they are all evaluated at once instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import Candidate
from amp_tui.core.costmodel.stagewise import StageWise
from amp_tui.core.search.partition.dp import INF
from amp_tui.core.search.partition.memory import partition_fits, partitions_fit
from amp_tui.core.search.partition.per_stage import PerStageCandidate
from amp_tui.core.search.partition.tables import SegmentTables, cheapest_sends
from amp_tui.core.spec.strategy import even_partition

CAP_MIN_CELLS = 2**16      # smaller tables cost less than the even split's time, to cap them with
REBUILD_SHARE = 0.5        # solve cuts its tables again at its first partitions' time if they shrink this much


@dataclass(frozen=True)
class PartitionResult:
    partition: tuple[int, ...] | None      # layers per stage; None when nothing fits or beats the bound
    iteration_time_s: float                 # the objective J (inf when partition is None)
    solves: int                             # DPs asked for (see _answer; 1 for a one- or two-stage enumeration)
    fits: bool = True                       # False: no partition fits in memory


def best_partition(candidate: Candidate, upper_bound: float = INF) -> PartitionResult:
    """The partition minimising the iteration time under memory limits, or None if none fits.

    With a finite `upper_bound`, a candidate that cannot beat it may return partition None and
    iteration_time_s inf early; the caller then knows it is no better than the bound.
    """
    tables = SegmentTables(candidate)
    return solve(tables, upper_bound)


def best_per_stage_partition(model: StageWise, upper_bound: float = INF,
                             should_cancel: Callable[[], bool] | None = None) -> PartitionResult:
    """best_partition for a strategy with per-stage tp and dp (costmodel/stagewise.py), by the same
    walk over its own segment tables (per_stage.py); `should_cancel` as for solve."""
    return solve(SegmentTables(PerStageCandidate(model)), upper_bound, should_cancel)


def solve(tables: SegmentTables, upper_bound: float = INF,
          should_cancel: Callable[[], bool] | None = None) -> PartitionResult:
    """See the module docstring. `should_cancel` is polled before every DP; Cancelled is raised.

    Both walks start capped from above: a partition whose max E is at least
    best - (B - 1) min max tau - min sum g, or whose max tau is at least
    (best - min max E - sigma) / (B - 1), cannot beat the best found, so those are skipped too.
    """
    B = tables.candidate.num_micro_batches

    def poll() -> None:
        if should_cancel is not None and should_cancel():
            raise Cancelled

    tables.poll = poll
    candidate = tables.candidate
    deep = tables.pp > 2        # one or two stages: every partition at once (after the cap)
    even = even_partition(candidate.num_layers, candidate.pp)

    @functools.cache
    def fits() -> bool:
        """Whether some partition fits memory (the even split's check first: the cheapest)."""
        return partition_fits(candidate, even) or bool(partitions_fit([candidate])[0])

    # Large tables: settled without building them when no partition fits (after this, finding
    # nothing means that nothing beats the bound). Small ones cost less than that check: it is
    # made only when nothing is found, and not even then where a DP over the tables, not cut at
    # a cap, found no partition (the tables judge memory as partitions_fit does).
    small = tables.pp * tables.R ** 2 < CAP_MIN_CELLS
    if deep and not small and not fits():
        return PartitionResult(None, INF, 0, fits=False)
    g_floor, e_floor = _sum_and_tail_floors(candidate)
    # Settled without building the tables: none has a bottleneck that could beat the bound.
    if deep and upper_bound < INF and (g_floor + e_floor >= upper_bound or B > 1 and _bottleneck_exceeds(
            candidate, (upper_bound - g_floor - e_floor) / (B - 1))):
        return PartitionResult(None, INF, 0, fits=fits())
    # A partition with max tau >= (J - g_floor - e_floor) / (B - 1) costs at least J: with J the
    # bound, or else the even split's time (when it fits, the optimum costs no more), its
    # segments with tau that high are never needed, and the tables are cut short of them.
    # A partition found cheaply that fits (the even split, one balanced by compute) bounds it too.
    bound, incumbent = upper_bound, None
    if not small and (quick := quick_partition(candidate)) is not None and quick[0] < bound:
        bound, incumbent = quick
    # (the walk starts from that partition: what it cannot beat, it returns)
    kept = PartitionResult(incumbent, bound, 0) if incumbent is not None else None
    if B > 1 and bound < INF:
        tables.tau_cap = (bound - g_floor - e_floor) / (B - 1)
    if not deep and not tables.lean:
        result = _solve_by_enumeration(tables, upper_bound)
        # Nothing found: none fits, or (the tables cut at the cap) none beats the bound.
        if result.partition is None and not fits():
            return PartitionResult(None, INF, result.solves, fits=False)
        return result
    if not deep and not fits():     # lean tables
        return PartitionResult(None, INF, 0, fits=False)
    poll()
    if tables.empty:                # (not cut at a cap: no segment fits, nor any partition)
        return kept or PartitionResult(None, INF, 0, fits=tables.tau_cap < INF and fits())
    if not tables.lean:
        for table in ("_compute", "_busy", "tau"):      # built in steps, so that a cancel waits less
            poll()
            getattr(tables, table)
    poll()
    t_star, start = tables.minmax("tau")
    if start is None:               # (not cut at a cap: no partition fits)
        return _with(kept, 1) or PartitionResult(None, INF, 1, fits=tables.tau_cap < INF and fits())
    if (B - 1) * t_star + g_floor + e_floor >= bound:
        return _with(kept, 1) or PartitionResult(None, INF, 1)
    if not tables.lean:
        poll()
        tables.e
    poll()
    e_star, _ = tables.minmax("e")
    if (B - 1) * t_star + g_floor + e_star >= bound:
        return _with(kept, 2) or PartitionResult(None, INF, 2)
    poll()
    g_min, part = tables.minsum()
    solves = 3
    best_j, best_p = bound, incumbent
    for p in (start, part):
        tau, g_sum, e_max = tables.measures(p)
        if (B - 1) * tau + g_sum + e_max < best_j:
            best_j, best_p = (B - 1) * tau + g_sum + e_max, p
    # The walk needs no segment whose tau alone would cost best_j: when cutting the tables there
    # shrinks them well, the walk reads tables cut there (t_star, e_star and g_min, from more
    # segments, stay lower bounds).
    if B > 1 and best_j < INF:
        narrower = tables.narrowed((best_j - g_floor - e_floor) / (B - 1))
        if narrower.cells < REBUILD_SHARE * tables.cells:
            tables = narrower
            if tables.empty:
                return PartitionResult(best_p, best_j, solves)
    e_limit = best_j - (B - 1) * t_star - g_min
    t_low = t_star          # the least max tau with every max E below the limit
    while e_limit > e_star:                  # else no partition has max E below the limit
        inner_best, inner_e = INF, None
        # x_low: a lower bound on max E over the partitions left (max tau below t_limit, max E
        # below e_limit); it only rises as t_limit falls, and is refreshed while it prunes nothing.
        x_low = e_star
        t_limit = INF if B == 1 else (best_j - g_min - x_low) / (B - 1)
        while t_limit > t_low:              # else no partition has max tau below the limit
            poll()
            sigma, p = tables.minsum(e_limit, t_limit)
            solves += 1
            if p is None or (B - 1) * t_low + sigma >= inner_best:
                break
            tau, g_sum, e_max = tables.measures(p)
            if (B - 1) * tau + g_sum < inner_best:
                inner_best, inner_e = (B - 1) * tau + g_sum, e_max
            if (B - 1) * tau + g_sum + e_max < best_j:
                best_j, best_p = (B - 1) * tau + g_sum + e_max, p
            if B == 1:                       # tau does not count: the first S is the inner best
                break
            # Refreshed, x_low prunes more, and lowers the next limit further when it does not.
            if (B - 1) * t_low + sigma + x_low < best_j:
                poll()
                x_low, _ = tables.minmax("e", e_limit, t_limit)
                solves += 1
            if (B - 1) * t_low + sigma + x_low >= best_j:
                break
            t_limit = min(tau, (best_j - x_low - sigma) / (B - 1))
        # Partitions with max E below the limit have (B - 1) max tau + sum g >= inner_best, or
        # were already shown to lose: so those with max E >= best - inner_best lose too. Stop
        # if that leaves none.
        if inner_e is None or inner_best + e_star >= best_j:
            break
        e_limit = min(inner_e, best_j - inner_best)
        if e_limit <= e_star:
            break
        poll()
        t_low, _ = tables.minmax("tau", e_limit)
        solves += 1
        if (B - 1) * t_low + g_min + e_star >= best_j:
            break
    return PartitionResult(best_p, best_j if best_p is not None else INF, solves)


def quick_partition(candidate: Candidate) -> tuple[float, tuple[int, ...]] | None:
    """The better of the even split and a partition balanced by compute (_balanced_partition)
    that fits, and its time: a strategy in hand before any DP (None if neither fits)."""
    out = None
    for heuristic in (even_partition(candidate.num_layers, candidate.pp), _balanced_partition(candidate)):
        if heuristic is not None and partition_fits(candidate, heuristic):
            time_s = candidate.quick_evaluate(heuristic)[0]
            if out is None or time_s < out[0]:
                out = (time_s, heuristic)
    return out


def _with(kept: PartitionResult | None, solves: int) -> PartitionResult | None:
    return None if kept is None else PartitionResult(kept.partition, kept.iteration_time_s, solves)


def _bottleneck_exceeds(candidate: Candidate, limit: float) -> bool:
    """Whether every partition has max tau above `limit` (a little above it, against rounding),
    shown without tables: with each boundary at its cheapest cut, stage s may hold at most
    limit - overhead - its cheapest sends of compute; filling stages greedily in order is exact
    for that relaxation (a shorter segment never costs more), so if it leaves layers over, so
    does every partition. O(pp log L)."""
    return _greedy_ends(candidate, limit * (1 + 1e-9))[-1] < candidate.num_layers


def _greedy_ends(candidate: Candidate, limit: float, sends: np.ndarray | None = None) -> list[int]:
    """Where each stage ends when each in turn takes the most layers whose compute fits in
    `limit` less the overhead and its cheapest sends (the last end short of L: layers left over;
    an end may repeat where a stage has no room)."""
    pp, L = candidate.pp, candidate.num_layers
    prefix = candidate.time_prefix
    room = (limit - candidate.micro_batch_overhead - (cheapest_sends(candidate) if sends is None else sends)).tolist()
    ends, i = [], 0
    for s in range(pp):
        if room[s] >= 0:
            i = int(np.searchsorted(prefix[s], prefix[s][i] + room[s], side="right")) - 1
        ends.append(i)
        if i >= L:
            break
    return ends


def _balanced_partition(candidate: Candidate) -> tuple[int, ...] | None:
    """A partition with a small max compute, found cheaply to cap the tables with its time: the
    least bottleneck (to 1%) at which the greedy walk of _greedy_ends covers every layer, walked
    once more leaving a layer to each later stage. Memory is not considered (None if the walk
    leaves a stage empty)."""
    pp, L = candidate.pp, candidate.num_layers
    sends = cheapest_sends(candidate)
    low, high = 0.0, float(candidate.time_prefix[:, -1].max() + candidate.micro_batch_overhead + sends.max())
    while high - low > 0.01 * high:
        middle = (low + high) / 2
        if _greedy_ends(candidate, middle, sends)[-1] >= L:
            high = middle
        else:
            low = middle
    ends = _greedy_ends(candidate, high, sends)
    bounds = [0] + [min(end, L - (pp - 1 - s)) for s, end in enumerate(ends[:pp - 1])] + [L]
    sizes = np.diff(bounds)
    return tuple(int(n) for n in sizes) if len(sizes) == pp and np.all(sizes >= 1) else None


def _sum_and_tail_floors(candidate: Candidate) -> tuple[float, float]:
    """Lower bounds on sum g and on max E over all partitions, without a DP: every layer on its
    fastest stage and every boundary at its cheapest cut; and Candidate.tail_floor."""
    times, _ = candidate.stage_layer_times
    g_floor = float(times.min(axis=0).sum()) + candidate.pp * candidate.micro_batch_overhead
    if candidate.pp > 1:
        g_floor += float(candidate.cheapest_cut.sum())
    return g_floor / candidate.knobs.virtual_stages, candidate.tail_floor


def _solve_by_enumeration(tables: SegmentTables, upper_bound: float) -> PartitionResult:
    """One or two stages: every partition at once, as columns of layers per stage."""
    B, L, W = tables.candidate.num_micro_batches, tables.L, tables.W
    if tables.pp == 1:
        sizes = np.array([[L]])
    else:
        first = np.arange(1, L)
        sizes = np.stack([first, L - first])
    stage = np.arange(tables.pp)[:, None]
    r = np.cumsum(sizes, axis=0) - stage - 1
    # longer segments, or ends outside the bands, never fit or never win
    sizes = sizes[:, ((sizes <= W) & (r >= tables._low[:, None]) & (r < tables._high[:, None])).all(axis=0)]
    index = (tables.row(stage, np.cumsum(sizes, axis=0) - stage - 1), sizes - 1)
    fits = tables.feasible[index].all(axis=0)
    if not fits.any():                  # solve checked that some partition fits: none can win
        return PartitionResult(None, INF, 1)
    g, tau, e = (table[index] for table in (tables.g, tables.tau, tables.e))
    iteration = (B - 1) * tau.max(axis=0) + np.add.reduce(g, axis=0) + e.max(axis=0)
    iteration = np.where(fits, iteration, INF)
    best = int(np.argmin(iteration))
    if not iteration[best] < upper_bound:
        return PartitionResult(None, INF, 1)
    return PartitionResult(tuple(int(n) for n in sizes[:, best]), float(iteration[best]), 1)
