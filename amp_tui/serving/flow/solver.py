"""The placement search: the layer range of every machine that maximises the max flow.

Helix solves this as one MILP (Gurobi, 8 to 48 minutes on 20 threads). We use the structure:

- **Quick bound.** Every token passes every layer, so the flow is at most the summed capacity of
  the machines holding any one layer. A machine of capacity t helps a layer by at most min(t, F)
  towards a flow F, so F is possible only if the machines, each at its best layer count k, supply
  k * min(t(k), F) >= num_layers * F in total. Machines of a type are counted, not searched.
- **Start.** Each group split into stages of c machines side by side (a tiny DP per group), the
  stages stacked end to end, at the best flow they reach together; the baselines are starts too.
- **Tight bound and blocks.** The configuration LP (columns.py) bounds the flow far more tightly,
  and its columns, as blocks with integer lengths (a small MILP), build placements; bisection on the
  flow between the best placement found and the bound. With regions, blocks sit in one region each
  and regions meet through wide blocks (enough machine pairs for the flow); every order of regions
  is tried, the last one that worked first.

Stops when the bisection closes, at the time limit, or raises Cancelled when `should_cancel` is true.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.serving.flow.columns import blocks_at, config_bound, solve_config_lp
from amp_tui.serving.network import Network, max_flow
from amp_tui.serving.placement import Placement


@dataclass(frozen=True)
class Solution:
    placement: Placement
    throughput: float           # tokens/s, the placement's max flow
    upper_bound: float          # no placement can exceed this
    solve_time_s: float
    evaluations: int
    stopped_by: str             # "converged", "steps", "time limit"; "given" for a reopened placement

    @property
    def gap(self) -> float:
        """(bound - found) / bound: how far the found placement may be from the best one."""
        return 0.0 if self.upper_bound <= 0 else max(0.0, (self.upper_bound - self.throughput) / self.upper_bound)


# -- the bound --------------------------------------------------------------------------------------

def _bisect(feasible: Callable[[float], bool], high: float, steps: int = 50) -> float:
    low = 0.0
    if feasible(high):
        return high
    for _ in range(steps):
        mid = (low + high) / 2
        if feasible(mid):
            low = mid
        else:
            high = mid
    return low


def upper_bound(net: Network, machines: np.ndarray | None = None) -> float:
    """The layer-capacity bound (see the module docstring); valid for any links. `machines`: only these."""
    L = net.num_layers
    groups, counts = np.unique(net.machine_group if machines is None else net.machine_group[machines],
                               return_counts=True)
    layer_counts = [np.arange(len(net.tables[g])) for g in groups]

    def feasible(flow: float) -> bool:
        supply = sum(n * float(np.max(ks * np.minimum(net.tables[g], flow)))
                     for g, n, ks in zip(groups, counts, layer_counts))
        return supply >= L * flow * (1 - 1e-12)

    most = float(sum(n * net.tables[g].max() for g, n in zip(groups, counts)))
    coordinator = float(net.coordinator.sum() if machines is None else net.coordinator[machines].sum())
    return _bisect(feasible, min(most, coordinator))


# -- the start: stages per group ----------------------------------------------------------------------

def _group_stages(table: np.ndarray, machines: int, flow: float) -> tuple[int, list[tuple[int, int]]]:
    """Most layers `machines` machines of one group cover at `flow`, split into stages of c machines
    side by side (each stage as long as c machines sustain): (layers, [(c, length), ...])."""
    reach = [int(np.max(np.flatnonzero(c * table >= flow), initial=0)) for c in range(machines + 1)]
    best = [0] * (machines + 1)
    choice = [0] * (machines + 1)
    for m in range(1, machines + 1):
        for c in range(1, m + 1):
            if reach[c] and best[m - c] + reach[c] > best[m]:
                best[m], choice[m] = best[m - c] + reach[c], c
    stages, m = [], machines
    while m and choice[m]:
        stages.append((choice[m], reach[choice[m]]))
        m -= choice[m]
    return best[machines], stages


def staged_start(net: Network) -> Placement:
    """Stages of interchangeable machines stacked end to end, at the best flow they reach together."""
    L = net.num_layers
    groups, counts = np.unique(net.machine_group, return_counts=True)

    def covered(flow: float) -> int:
        return sum(_group_stages(net.tables[g], int(n), flow)[0] for g, n in zip(groups, counts))

    flow = _bisect(lambda f: covered(f) >= L, float(max(t.max() for t in net.tables)) * net.num_machines)
    first = np.zeros(net.num_machines, dtype=np.int64)
    count = np.zeros(net.num_machines, dtype=np.int64)
    position = 0
    # Region by region, so that the stack crosses slow links as few times as possible.
    order = sorted(range(len(groups)), key=lambda i: net.machine_region[int(np.flatnonzero(net.machine_group == groups[i])[0])])
    for i in order:
        machines = list(np.flatnonzero(net.machine_group == groups[i]))
        for c, length in _group_stages(net.tables[groups[i]], int(counts[i]), flow)[1]:
            length = min(length, L - position)
            for _ in range(c):
                m = machines.pop()
                if length > 0:
                    first[m], count[m] = position, length
            position += max(length, 0)
    return Placement.of(first, count)


# -- blocks from the configuration LP ----------------------------------------------------------------

def _stack(net: Network, groups: np.ndarray, blocks: list) -> Placement:
    """Blocks end to end; in each block one track per item, ceil(y / k) machines long."""
    first = np.zeros(net.num_machines, dtype=np.int64)
    count = np.zeros(net.num_machines, dtype=np.int64)
    pools = {int(g): list(np.flatnonzero(net.machine_group == g)) for g in groups}
    position = 0
    for config, length in blocks:
        length = min(length, net.num_layers - position)
        if length <= 0:
            break
        for item in config:
            for start in range(position, position + length, item.layers):
                m = pools[int(groups[item.group])].pop()
                first[m], count[m] = start, min(item.layers, position + length - start)
        position += length
    return Placement.of(first, count)


def _region_sequences(net: Network, groups: np.ndarray) -> list[tuple[str, ...]]:
    """Orders in which a request may visit regions (each once), those that can hold the model first."""
    region = _group_regions(net, groups)
    names = list(dict.fromkeys(region))
    most = {r: sum(int((net.machine_group == g).sum()) * (len(net.tables[g]) - 1)
                   for g, rg in zip(groups, region) if rg == r) for r in names}
    sequences = [seq for size in range(1, min(len(names), 4) + 1) for seq in itertools.permutations(names, size)
                 if sum(most[r] for r in seq) >= net.num_layers]
    return sorted(sequences, key=len)


def _pair_capacity(net: Network):
    def capacity(a: str, b: str) -> float:
        rows = [m for m in range(net.num_machines) if net.machine_region[m] == a]
        cols = [m for m in range(net.num_machines) if net.machine_region[m] == b]
        return float(net.link[np.ix_(rows, cols)].min())
    return capacity


def _one_pair_suffices_up_to(net: Network) -> float:
    """The flow above which some layer must be held by two machines or more.

    When no region alone can carry the flow F, some flow crosses between regions at a layer boundary.
    If all of F crosses there and one pair of machines' link carries less than F, two senders or two
    receivers hold the layer before or after the boundary. If only part crosses, the rest passes that
    boundary through another machine holding the layer before or after it. Either way one layer is
    held by two machines: F above max(fastest pair link, best single region) needs a wide layer.
    """
    regions = list(dict.fromkeys(net.machine_region))
    if len(regions) < 2:
        return math.inf
    cross = [net.link[i, j] for i in range(net.num_machines) for j in range(net.num_machines)
             if net.machine_region[i] != net.machine_region[j]]
    alone = max(upper_bound(net, np.array([m for m in range(net.num_machines) if net.machine_region[m] == r]))
                for r in regions)
    return max(max(cross), alone)


def _group_regions(net: Network, groups: np.ndarray) -> list[str]:
    return [net.machine_region[int(np.flatnonzero(net.machine_group == g)[0])] for g in groups]


_STEPS = 14     # bisection steps on the flow: 2^-14 of the start's distance to the bound


def solve(net: Network, *, time_limit_s: float = 10.0, starts: list[Placement] | None = None, steps: int = _STEPS,
          progress: Callable[[float, float, float], None] | None = None,
          should_cancel: Callable[[], bool] | None = None) -> Solution:
    """The best placement found, with a bound on the best possible.

    `progress(fraction, best_tokens_per_s, bound)` is called as the search goes; `should_cancel()` is
    polled throughout and raises Cancelled when it turns true.
    """
    started = time.perf_counter()
    evaluations = 0

    def check() -> None:
        if should_cancel is not None and should_cancel():
            raise Cancelled()

    def evaluate(placement: Placement) -> float:
        nonlocal evaluations
        evaluations += 1
        return max_flow(net, *placement.arrays()).value

    def report(fraction: float) -> None:
        if progress is not None:
            progress(fraction, best_value, bound)

    groups, counts = np.unique(net.machine_group, return_counts=True)
    tables = [net.tables[g] for g in groups]
    L = net.num_layers
    bound = upper_bound(net)
    best_value, best = max(((evaluate(p), p) for p in [staged_start(net), *(starts or [])]), key=lambda vp: vp[0])
    report(0.05)
    check()
    bound = max(best_value, config_bound(tables, counts, L, best_value, bound, should_stop=check,
                                         wide_above=_one_pair_suffices_up_to(net)))
    report(0.3)
    families, regions, sequences, pair_capacity = None, None, [()], None
    if not net.links_never_bind:     # a block sits in one region; regions meet where blocks are wide
        regions = _group_regions(net, groups)
        families = [[g for g in range(len(groups)) if regions[g] == r] for r in dict.fromkeys(regions)]
        sequences = _region_sequences(net, groups)
        pair_capacity = _pair_capacity(net)
    low, high = best_value, bound
    stopped_by = "steps"
    for step in range(steps):
        check()
        elapsed = time.perf_counter() - started
        if high - low <= 1e-4 * high:
            stopped_by = "converged"
            break
        if elapsed >= time_limit_s:
            stopped_by = "time limit"
            break
        flow = (low + high) / 2
        lp = solve_config_lp(tables, counts, flow, L, families=families, should_stop=check, converge=True)
        found = 0.0
        for sequence in sequences:
            check()
            remaining = time_limit_s - (time.perf_counter() - started)
            if remaining <= 0:
                break
            blocks = blocks_at(tables, counts, L, flow, lp.columns, time_limit_s=max(0.05, remaining),
                               regions=regions, sequence=sequence, pair_capacity=pair_capacity)
            if not blocks:
                continue
            placement = _stack(net, groups, blocks)
            value = evaluate(placement)
            found = max(found, value)
            if value > best_value:
                best_value, best = value, placement
            if value >= flow * (1 - 1e-9):
                sequences.remove(sequence)
                sequences.insert(0, sequence)     # likely to work again at the next flow: try it first
                break
        if found >= flow * (1 - 1e-9):
            low = max(low, found)
        else:
            high = flow
        report(0.3 + 0.7 * (step + 1) / steps)
    report(1.0)
    return Solution(placement=best, throughput=float(best_value), upper_bound=float(max(bound, best_value)),
                    solve_time_s=time.perf_counter() - started, evaluations=evaluations, stopped_by=stopped_by)
