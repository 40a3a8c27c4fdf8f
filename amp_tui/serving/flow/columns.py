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
MILP_NODES = 2000   # branch-and-bound nodes per block MILP: its work bound (the time limit is a safety net)


@dataclass(frozen=True)
class Item:
    group: int      # index into the group list given to the functions here
    layers: int
    capacity: float


def _items(tables: list[np.ndarray], flow: float) -> list[Item]:
    return [Item(g, k, float(min(t[k], flow))) for g, t in enumerate(tables) for k in range(1, len(t)) if t[k] > 0]


def _price(items: list[Item], duals: np.ndarray, flow: float, exact: bool = False,
           wide_bonus: float | None = None) -> tuple[float, tuple[Item, ...]]:
    """The configuration of least sum of duals[g] / k with capacity >= flow (unbounded multiplicity),
    less `wide_bonus` if it has two machines or more (None: no such term).
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

    def cover(u: int) -> list[Item]:
        chosen = []
        while u > 0:
            chosen.append(items[pick[u]])
            u = max(u - units[pick[u]], 0)
        return chosen

    narrow = (float(best[UNITS]), tuple(cover(UNITS)))
    if wide_bonus is None:
        return narrow
    # Two machines or more: a first item, then at least one more (the cheapest if the first covers).
    cheapest = int(np.argmin(costs))
    rest = np.maximum(UNITS - units, 0)
    after = np.where(rest > 0, best[rest], costs[cheapest])
    first = int(np.argmin(costs + after))
    tail = cover(int(rest[first])) if rest[first] > 0 else [items[cheapest]]
    wide = (float(costs[first] + after[first]) - wide_bonus, (items[first], *tail))
    return min(narrow, wide, key=lambda priced: priced[0])


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
                    converge: bool = False, one_wide_layer: bool = False) -> ConfigLP:
    """`families`: the sets of groups allowed to share a configuration (default: all together).
    `one_wide_layer`: some layer must be held by two machines or more (regions joined by links too
    slow for one pair to carry the flow; see solver.py). Stops once the bound is settled either way,
    or with `converge` (columns for blocks, every one a true cover) at the LP optimum."""
    items = _items(tables, flow)
    families = families or [list(range(len(tables)))]
    G = len(tables)
    columns: list[tuple[Item, ...]] = []
    for item in items:   # one item repeated until it covers the flow (and twice at least, for a wide layer)
        copies = math.ceil(flow / item.capacity - 1e-9)
        columns.append((item,) * copies)
        if one_wide_layer and copies == 1:
            columns.append((item,) * 2)
    upper = math.inf
    value = 0.0
    for _ in range(max_rounds):
        if should_stop is not None:
            should_stop()
        usage = np.array([_usage(c, G) for c in columns]).T
        a_ub, b_ub = usage, counts.astype(float)
        if one_wide_layer:   # sum of y over configurations of two machines or more >= 1
            a_ub = np.vstack([usage, -np.array([1.0 if len(c) > 1 else 0.0 for c in columns])])
            b_ub = np.append(b_ub, -1.0)
        result = linprog(-np.ones(len(columns)), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
        if result.status != 0:      # no wide layer fits with these columns: nothing proved
            return ConfigLP(flow, columns, math.inf, 0.0)
        value = -result.fun
        marginals = np.maximum(-result.ineqlin.marginals, 0)
        duals = marginals[:G]
        bonus = float(marginals[G]) if one_wide_layer else None
        cost, config = min((_price([i for i in items if i.group in family], duals, flow, exact=converge,
                                   wide_bonus=bonus) for family in families),
                           key=lambda priced: priced[0])
        if cost > 1e-12 and not converge:
            # Farley: the duals over the cheapest reduced cost are dual feasible
            upper = min(upper, (float(duals @ counts) - (bonus or 0.0)) / cost)
        if cost >= 1 - 1e-9 or upper < num_layers or (value >= num_layers and not converge):
            break
        columns.append(config)
    return ConfigLP(flow, columns, upper, value)


def config_bound(tables: list[np.ndarray], counts: np.ndarray, num_layers: int, low: float, high: float,
                 steps: int = 14, should_stop=None, wide_above: float = math.inf) -> float:
    """The smallest flow in [low, high] that the configuration LP proves infeasible (high if none):
    an upper bound on the max flow of any placement, given that `low` is attained. Above
    `wide_above`, some layer must be held by two machines or more."""
    def infeasible(flow: float) -> bool:
        lp = solve_config_lp(tables, counts, flow, num_layers, should_stop=should_stop,
                             one_wide_layer=flow > wide_above)
        return lp.layers_upper < num_layers

    if not infeasible(high):
        return high
    for _ in range(steps):
        mid = (low + high) / 2
        if infeasible(mid):
            high = mid
        else:
            low = mid
        if high - low <= 1e-4 * high:
            break
    return high


def blocks_at(tables: list[np.ndarray], counts: np.ndarray, num_layers: int, flow: float, columns: list,
              time_limit_s: float = 1.0, regions: list[str] | None = None, sequence: tuple[str, ...] = (),
              pair_capacity=None) -> list[tuple[tuple[Item, ...], int]] | None:
    """Integer block lengths for the columns: [(configuration, layers), ...] in stacking order,
    covering the model with the machines at hand, or None if the MILP finds none in time.

    With `regions` (the region of each group), blocks are placed region by region in `sequence`, and
    where two regions meet, the last block of one and the first of the next have enough tracks
    that their pairs of machines carry the flow: tracks_a * tracks_b * pair_capacity(a, b) >= flow.
    """
    # Pricing rounds capacities up, so a column may fall just short of the flow: not for building.
    columns = [c for c in columns if sum(item.capacity for item in c) >= flow * (1 - 1e-12)]
    if regions is not None:
        columns = [c for c in columns if regions[c[0].group] in sequence]
        columns = columns + columns   # a configuration may sit at both ends of a region, as two blocks
    if not columns:
        return None
    # Variables: y_c (block length), w_{c,i} (machines per track) for each distinct item of c, then
    # z_{e,c}: column c is the block at region end e (where regions meet).
    tracks = []
    for c, config in enumerate(columns):
        for item in set(config):
            tracks.append((c, item, config.count(item)))
    ends = []     # (position in sequence, "start" or "end")
    if regions is not None:
        for i in range(len(sequence)):
            if i > 0:
                ends.append((i, "start"))
            if i < len(sequence) - 1:
                ends.append((i, "end"))
    n_y, n_w = len(columns), len(tracks)
    n = n_y + n_w + len(ends) * n_y

    def z(e: int, c: int) -> int:
        return n_y + n_w + e * n_y + c

    rows, lower, upper = [], [], []

    def constrain(coefficients: dict, low: float, high: float) -> None:
        row = np.zeros(n)
        for index, value in coefficients.items():
            row[index] += value
        rows.append(row), lower.append(low), upper.append(high)

    constrain({c: 1 for c in range(n_y)}, num_layers, np.inf)
    for t, (c, item, _) in enumerate(tracks):      # k * w >= y
        constrain({n_y + t: item.layers, c: -1}, 0, np.inf)
    for g in range(len(tables)):
        constrain({n_y + t: m for t, (c, item, m) in enumerate(tracks) if item.group == g}, -np.inf, float(counts[g]))
    fixed_zero = set()
    for e, (i, side) in enumerate(ends):
        mine = [c for c in range(n_y) if regions[columns[c][0].group] == sequence[i]]
        constrain({z(e, c): 1 for c in mine}, 1, 1)
        for c in range(n_y):
            if c in mine:
                constrain({c: 1, z(e, c): -1}, 0, np.inf)      # the chosen end block exists
            else:
                fixed_zero.add(z(e, c))
        if side == "end" and (i, "start") in ends:            # a middle region: two different blocks
            s_index = ends.index((i, "start"))
            for c in mine:
                constrain({z(s_index, c): 1, z(e, c): 1}, -np.inf, 1)
        if side == "end":                                      # the crossing to the next region
            nxt = ends.index((i + 1, "start"))
            capacity = pair_capacity(sequence[i], sequence[i + 1])
            theirs = [c for c in range(n_y) if regions[columns[c][0].group] == sequence[i + 1]]
            for a in mine:
                for b in theirs:
                    if len(columns[a]) * len(columns[b]) * capacity < flow:
                        constrain({z(e, a): 1, z(nxt, b): 1}, -np.inf, 1)
    high_bounds = np.full(n, float(num_layers))
    high_bounds[n_y + n_w:] = 1
    for index in fixed_zero:
        high_bounds[index] = 0
    cost = np.zeros(n)
    cost[:n_y] = 1.0   # prefer the fewest layers over num_layers: less to trim
    result = milp(cost, constraints=LinearConstraint(np.array(rows), lower, upper), integrality=np.ones(n),
                  bounds=Bounds(0, high_bounds), options={"time_limit": time_limit_s, "node_limit": MILP_NODES})
    if result.x is None:
        return None
    x = np.round(result.x).astype(int)
    used = [c for c in range(n_y) if x[c] > 0]
    if regions is None:
        return [(columns[c], int(x[c])) for c in used]
    order = []
    for i, name in enumerate(sequence):
        first = next((c for e, (j, side) in enumerate(ends) if j == i and side == "start"
                      for c in used if x[z(e, c)]), None)
        last = next((c for e, (j, side) in enumerate(ends) if j == i and side == "end"
                     for c in used if x[z(e, c)]), None)
        middle = [c for c in used if regions[columns[c][0].group] == name and c not in (first, last)]
        order += ([first] if first is not None else []) + middle + ([last] if last is not None else [])
    return [(columns[c], int(x[c])) for c in order]
