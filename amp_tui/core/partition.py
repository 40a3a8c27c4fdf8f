"""The exact optimal partition of layers into pipeline stages for one candidate.

The objective (cost.py) is  J = (B - 1) max_s tau_s + sum_s g_s + max_s E_s  with per-stage memory
limits, where g_s = C_s + c_s (compute plus the send after the stage). Two max-terms and a sum
rule out a plain dynamic program, so we walk Pareto frontiers, each step a vectorised DP:

  outer walk over the bottleneck tau: with every stage below a limit t, find the partition S that
  minimises sum g + max E (inner walk). Any partition whose max tau lies in [tau(S), t) costs at
  least J(S), so the next limit is tau(S). Stop when no partition is left or when
  (B - 1) min-max-tau + (the inner value) cannot beat the best J found.

  inner walk over max E: minimise sum g with every stage's E below a limit e; the result S has
  sum g = sigma and max E = eps; partitions with max E in [eps, e) cost at least sigma + eps, so the
  next limit is eps. Stop when sigma + min-max-E cannot beat the best.

Every step removes only partitions proven no better than one already found, so the result is exact;
tests/test_partition.py checks it against brute force over all partitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from amp_tui.core.cost import Candidate
from amp_tui.core.errors import Cancelled

INF = float("inf")


@dataclass(frozen=True)
class PartitionResult:
    partition: tuple[int, ...] | None      # layers per stage; None when nothing fits or beats the bound
    iteration_time_s: float                 # the objective J (inf when partition is None)
    solves: int                             # dynamic programs run
    fits: bool = True                       # False: no partition fits in memory


class SegmentTables:
    """Every candidate segment as (stage s, end j, length w + 1): it holds layers [j - w - 1, j).

    Arrays have shape (pp, L + 1, W) with W the longest stage that leaves one layer to each other stage.
    """

    def __init__(self, candidate: Candidate):
        c = candidate
        pp, L = c.pp, c.num_layers
        self.candidate = c
        self.pp, self.L = pp, L
        W = L - pp + 1
        self.W = W
        j = np.arange(L + 1)[:, None]
        w = np.arange(W)[None, :]
        start = j - w - 1                                   # (L + 1, W)
        valid = start >= 0
        self.start = np.where(valid, start, 0)
        s = np.arange(pp)[:, None, None]
        # Stage s needs s layers before it and pp - 1 - s after it; the first starts at 0, the last ends at L.
        structural = valid[None] & (start[None] >= s) & (j[None] <= L - (pp - 1 - s))
        structural &= (s != 0) | (start[None] == 0)
        structural &= (s != pp - 1) | (j[None] == L)

        prefix = c.time_prefix                               # (pp, L + 1)
        compute = prefix[:, j] - prefix[:, self.start]       # (pp, L + 1, W)
        cut_in = np.zeros((pp, L + 1, W))
        cut_out = np.zeros((pp, L + 1, W))
        if pp > 1:
            cut_in[1:] = c.cut_cost[:, self.start]           # boundary s - 1 follows layer start - 1
            cut_out[:-1] = np.broadcast_to(c.cut_cost[:, :, None], (pp - 1, L + 1, W))
        params = c.param_prefix[j] - c.param_prefix[self.start]      # (L + 1, W)
        act_prefix, peak, in_flight = c.memory_arrays
        acts = act_prefix[j] - act_prefix[self.start]
        layer = np.where(valid, j - 1 - w, 0)
        seg_peak = np.maximum.accumulate(np.where(valid, peak[layer], 0.0), axis=1)
        memory = (c.state.total * params[None] + in_flight[:, None, None] * acts[None] + seg_peak[None]
                  + c.cost.training.runtime_reserve_bytes)
        fits = memory <= c.layout.stage_capacity[:, None, None]

        self.structural = structural
        self.memory = np.where(structural, memory, INF)
        self.feasible = structural & fits
        self.tau = compute + cut_in + cut_out
        self.g = compute + cut_out
        self.e = c.e_coef[:, None, None] * params[None]

    def minsum(self, allowed: np.ndarray) -> tuple[float, tuple[int, ...] | None]:
        """Minimum sum of g over partitions using only allowed segments, and one such partition."""
        pp, L = self.pp, self.L
        value = np.full(L + 1, INF)
        value[0] = 0.0
        choice = np.zeros((pp, L + 1), dtype=np.int64)
        for s in range(pp):
            total = np.where(allowed[s], value[self.start] + self.g[s], INF)
            choice[s] = total.argmin(axis=1)
            value = total[np.arange(L + 1), choice[s]]
        if not np.isfinite(value[L]):
            return INF, None
        return float(value[L]), self._trace(choice)

    def minmax(self, cost: np.ndarray, allowed: np.ndarray) -> float:
        """Minimum over allowed partitions of the largest per-stage `cost`."""
        return self.minmax_partition(cost, allowed)[0]

    def minmax_partition(self, cost: np.ndarray, allowed: np.ndarray) -> tuple[float, tuple[int, ...] | None]:
        L = self.L
        value = np.full(L + 1, INF)
        value[0] = -INF
        choice = np.zeros((self.pp, L + 1), dtype=np.int64)
        for s in range(self.pp):
            total = np.where(allowed[s], np.maximum(value[self.start], cost[s]), INF)
            choice[s] = total.argmin(axis=1)
            value = total[np.arange(L + 1), choice[s]]
        if not np.isfinite(value[L]):
            return INF, None
        return float(value[L]), self._trace(choice)

    def least_over_memory(self) -> tuple[int, ...]:
        """The partition whose worst stage is least over its memory capacity (for the reason)."""
        over = self.memory - self.candidate.layout.stage_capacity[:, None, None]
        return self.minmax_partition(over, self.structural)[1]

    def _trace(self, choice: np.ndarray) -> tuple[int, ...]:
        sizes, j = [], self.L
        for s in range(self.pp - 1, -1, -1):
            w = int(choice[s, j])
            sizes.append(w + 1)
            j -= w + 1
        return tuple(reversed(sizes))

    def measures(self, partition: tuple[int, ...]) -> tuple[float, float, float]:
        """(max tau, sum g, max E) of a partition."""
        ends = np.cumsum(partition)
        s = np.arange(self.pp)
        w = np.asarray(partition) - 1
        return float(self.tau[s, ends, w].max()), float(self.g[s, ends, w].sum()), float(self.e[s, ends, w].max())

    @cached_property
    def min_max_tau(self) -> float:
        return self.minmax(self.tau, self.feasible)

    @cached_property
    def min_max_e(self) -> float:
        return self.minmax(self.e, self.feasible)


def best_partition(candidate: Candidate, upper_bound: float = INF) -> PartitionResult:
    """The partition minimising the iteration time under memory limits, or None if none fits.

    With a finite `upper_bound`, a candidate that cannot beat it may return partition None and
    iteration_time_s inf early; the caller then knows it is no better than the bound.
    """
    tables = SegmentTables(candidate)
    return solve(tables, upper_bound)


def solve(tables: SegmentTables, upper_bound: float = INF,
          should_cancel: Callable[[], bool] | None = None) -> PartitionResult:
    """See the module docstring. `should_cancel` is polled before every DP; Cancelled is raised.

    Both walks start capped from above: a partition whose max tau is at least
    (best - min sum g - min max E) / (B - 1), or whose max E is at least
    best - (B - 1) min max tau - sigma, cannot beat the best found, so those are skipped too.
    """
    B = tables.candidate.num_micro_batches
    t_star, start = tables.minmax_partition(tables.tau, tables.feasible)
    if start is None:
        return PartitionResult(None, INF, 1, fits=False)
    e_star = tables.min_max_e
    g_min, part = tables.minsum(tables.feasible)
    solves = 3
    best_j, best_p = upper_bound, None
    for p in (start, part):
        tau, g_sum, e_max = tables.measures(p)
        if (B - 1) * tau + g_sum + e_max < best_j:
            best_j, best_p = (B - 1) * tau + g_sum + e_max, p
    t_limit = INF if B == 1 else (best_j - g_min - e_star) / (B - 1)
    while True:
        allowed_t = tables.feasible & (tables.tau < t_limit)
        inner_best, inner_tau = INF, None
        e_limit = best_j - (B - 1) * t_star - g_min
        while True:
            if should_cancel is not None and should_cancel():
                raise Cancelled
            sigma, p = tables.minsum(allowed_t & (tables.e < e_limit))
            solves += 1
            if p is None or (B - 1) * t_star + sigma + e_star >= best_j or sigma + e_star >= inner_best:
                break
            tau, g_sum, e_max = tables.measures(p)
            if g_sum + e_max < inner_best:
                inner_best, inner_tau = g_sum + e_max, tau
            if (B - 1) * tau + g_sum + e_max < best_j:
                best_j, best_p = (B - 1) * tau + g_sum + e_max, p
            e_limit = min(e_max, best_j - (B - 1) * t_star - sigma)
        if inner_tau is None or B == 1:
            break
        t_limit = min(inner_tau, (best_j - g_min - e_star) / (B - 1))
    return PartitionResult(best_p, best_j if best_p is not None else INF, solves)
