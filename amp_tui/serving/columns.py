"""Column generation over layer configurations: a tight bound, and blocks that attain it.

A *configuration* is a multiset of (group, k) items -- machines of a group, each holding k layers --
whose capacities sum to at least a flow F: the machines one layer needs at that flow. Machine
counts are the only coupling between layers, so at flow F

    max  sum_c y_c        (layers served, y_c layers by configuration c)
    s.t. sum_c y_c * sum_{(g,k) in c} 1/k  <=  n_g   for every group g

is an LP relaxation of "can the model be placed at flow F": feasible placements need >= num_layers.
Columns come from pricing: the cheapest configuration under the duals is a covering knapsack,
solved by DP on capacities rounded *up* to 1/256 of F (rounding up only relaxes, so bounds stay
valid). Farley's bound (duals / cheapest reduced cost) proves F infeasible before the LP converges.

The columns found also build placements: a *block* of y layers served by configuration c holds, for
every item (g, k) of c, a track of ceil(y / k) machines of group g end to end. A small MILP picks
integer block lengths within the machine counts. In a block every track is a chain, and all tracks
end where the block ends, so the block's flow is the sum of its tracks' and links between blocks
join every track: the stacked blocks' max flow is the smallest block capacity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

UNITS = 256


@dataclass(frozen=True)
class Item:
    group: int      # index into the group list given to the functions here
    layers: int
    capacity: float


def _items(tables: list[np.ndarray], flow: float) -> list[Item]:
    return [Item(g, k, float(min(t[k], flow))) for g, t in enumerate(tables) for k in range(1, len(t)) if t[k] > 0]


def _price(items: list[Item], duals: np.ndarray, flow: float, exact: bool = False) -> tuple[float, tuple[Item, ...]]:
    """The configuration of least sum of duals[g] / k with capacity >= flow (unbounded multiplicity).
    Capacities are rounded up (a relaxation: for bounds) or, with `exact`, down (every configuration
    found truly covers the flow: for building blocks)."""
    scaled = [item.capacity / flow * UNITS for item in items]
    units = np.array([math.floor(x + 1e-9) if exact else math.ceil(x - 1e-9) for x in scaled])
    costs = np.array([duals[item.group] / item.layers for item in items])
    best = np.zeros(UNITS + 1)
    pick = np.zeros(UNITS + 1, dtype=np.int64)
    for u in range(1, UNITS + 1):
        options = costs + best[np.maximum(u - units, 0)]
        pick[u] = int(np.argmin(options))
        best[u] = options[pick[u]]
    chosen, u = [], UNITS
    while u > 0:
        chosen.append(items[pick[u]])
        u = max(u - units[pick[u]], 0)
    return float(best[UNITS]), tuple(chosen)


def _usage(config: tuple[Item, ...], groups: int) -> np.ndarray:
    use = np.zeros(groups)
    for item in config:
        use[item.group] += 1 / item.layers
    return use


@dataclass
class ConfigLP:
    """The configuration LP at one flow: its columns and what it proved."""

    flow: float
    columns: list
    layers_upper: float     # no placement at this flow serves more layers than this
    layers_lp: float        # the restricted master's value (a lower estimate of the LP's)


def solve_config_lp(tables: list[np.ndarray], counts: np.ndarray, flow: float, num_layers: int,
                    max_rounds: int = 60, families: list[list[int]] | None = None, should_stop=None,
                    converge: bool = False) -> ConfigLP:
    """`families`: the sets of groups allowed to share a configuration (default: all together).
    Stops once the bound is settled either way, or with `converge` (columns for blocks, every one a
    true cover) at the LP optimum."""
    items = _items(tables, flow)
    families = families or [list(range(len(tables)))]
    G = len(tables)
    columns: list[tuple[Item, ...]] = []
    for item in items:   # one item repeated until it covers the flow
        columns.append((item,) * math.ceil(flow / item.capacity - 1e-9))
    upper = math.inf
    value = 0.0
    for _ in range(max_rounds):
        if should_stop is not None:
            should_stop()
        usage = np.array([_usage(c, G) for c in columns]).T
        result = linprog(-np.ones(len(columns)), A_ub=usage, b_ub=counts.astype(float), bounds=(0, None),
                         method="highs")
        value = -result.fun
        duals = np.maximum(-result.ineqlin.marginals, 0)
        cost, config = min((_price([i for i in items if i.group in family], duals, flow, exact=converge)
                            for family in families),
                           key=lambda priced: priced[0])
        if cost > 1e-12 and not converge:
            upper = min(upper, float(duals @ counts) / cost)   # Farley: duals / cost is dual feasible
        if cost >= 1 - 1e-9 or upper < num_layers or (value >= num_layers and not converge):
            break
        columns.append(config)
    return ConfigLP(flow, columns, upper, value)


def config_bound(tables: list[np.ndarray], counts: np.ndarray, num_layers: int, low: float, high: float,
                 steps: int = 14, should_stop=None) -> float:
    """The smallest flow in [low, high] that the configuration LP proves infeasible (high if none):
    an upper bound on the max flow of any placement, given that `low` is attained."""
    if solve_config_lp(tables, counts, high, num_layers, should_stop=should_stop).layers_upper >= num_layers:
        return high
    for _ in range(steps):
        mid = (low + high) / 2
        if solve_config_lp(tables, counts, mid, num_layers, should_stop=should_stop).layers_upper < num_layers:
            high = mid
        else:
            low = mid
        if high - low <= 1e-4 * high:
            break
    return high


def blocks_at(tables: list[np.ndarray], counts: np.ndarray, num_layers: int, flow: float,
              columns: list, time_limit_s: float = 1.0) -> list[tuple[tuple[Item, ...], int]] | None:
    """Integer block lengths for the columns: [(configuration, layers), ...] covering the model with
    the machines at hand, or None if the MILP finds none in time."""
    # Pricing rounds capacities up, so a column may fall just short of the flow: not for building.
    columns = [c for c in columns if sum(item.capacity for item in c) >= flow * (1 - 1e-12)]
    # Variables: y_c (block length), then w_{c,i} (machines per track) for each distinct item of c.
    tracks = []
    for c, config in enumerate(columns):
        for item in set(config):
            tracks.append((c, item, config.count(item)))
    n_y, n = len(columns), len(columns) + len(tracks)
    rows, lower, upper = [], [], []
    cover = np.zeros(n)
    cover[:n_y] = 1
    rows.append(cover), lower.append(num_layers), upper.append(np.inf)
    for t, (c, item, _) in enumerate(tracks):      # k * w >= y
        row = np.zeros(n)
        row[n_y + t] = item.layers
        row[c] = -1
        rows.append(row), lower.append(0), upper.append(np.inf)
    for g in range(len(tables)):
        row = np.zeros(n)
        for t, (c, item, multiplicity) in enumerate(tracks):
            if item.group == g:
                row[n_y + t] = multiplicity
        rows.append(row), lower.append(-np.inf), upper.append(float(counts[g]))
    cost = np.zeros(n)
    cost[:n_y] = 1.0   # prefer the fewest layers over num_layers: less to trim
    result = milp(cost, constraints=LinearConstraint(np.array(rows), lower, upper), integrality=np.ones(n),
                  bounds=Bounds(0, num_layers), options={"time_limit": time_limit_s})
    if result.x is None:
        return None
    y = np.round(result.x[:n_y]).astype(int)
    return [(columns[c], int(y[c])) for c in range(n_y) if y[c] > 0]
