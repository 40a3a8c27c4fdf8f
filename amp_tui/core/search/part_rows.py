"""Which parts of a cluster the search over idle nodes considers (subclusters.py): node-count
vectors, one row per part, and the cluster's natural sub-clusters, searched first.

Groups with equal hardware, price and size are interchangeable: a part lists their counts
non-increasing, once. The vectors are enumerated class by class (a class: such groups), never as
an array with a dimension per group or per class, and never more than MAX_PARTS rows, nor more
than MAX_CELLS counts in all: beyond that only counts within a few nodes of 0 or of each group's
size are tried, and with too many groups even for that, only whole groups in or out along the
groups sorted by GPU speed (every group of at least a given speed) and the natural sub-clusters
(`complete` is False: the search says so).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from amp_tui.core.spec.scenario import Scenario

MAX_PARTS = 200_000     # node-count vectors bounded in full
MAX_CELLS = 4_000_000   # rows x node groups held at once (200,000 parts of 20 groups; 20,000 of 200)
BUT_ONE_GROUPS = 16     # up to this many node groups, every group but one is a natural part (beyond, a
                        # search each would cost more than the rest of the search: the whole, the
                        # fastest groups together and each group alone remain)


def classes(scenario: Scenario) -> list[list[int]]:
    """The node groups in classes of interchangeable ones (equal hardware, price and size), each
    class's groups ascending, classes in order of their first group."""
    out: dict[tuple, list[int]] = {}
    for g, group in enumerate(scenario.cluster.nodes):
        out.setdefault((group.hardware_key(), group.price_per_hour, group.count), []).append(g)
    return list(out.values())


def canonical(counts, members: list[list[int]]) -> tuple[int, ...]:
    """The part `counts` as the vectors list it: each class's counts non-increasing."""
    out = list(counts)
    for m in members:
        for g, n in zip(m, sorted((out[g] for g in m), reverse=True)):
            out[g] = n
    return tuple(out)


NEAR_NOTE = "too many ways to leave nodes idle: only counts near 0 and near each group's size were tried"
NATURAL_NOTE = ("too many node groups to try every way of leaving nodes idle: only whole groups, the fastest "
                "together and the natural sub-clusters were tried")


def part_rows(scenario: Scenario) -> tuple[np.ndarray, str | None]:
    """Node-count vectors (rows) to consider, and None if they are all of them, else a note that
    says which were left out (see the module)."""
    groups = scenario.cluster.nodes
    members = classes(scenario)
    sizes = [groups[m[0]].count for m in members]
    most = max(1, min(MAX_PARTS, MAX_CELLS // len(groups)))

    def how_many(options: list[list[int]]) -> int:
        return math.prod(math.comb(len(o) + len(m) - 1, len(m)) for o, m in zip(options, members))

    options = [list(range(c + 1)) for c in sizes]
    note = None if how_many(options) <= most else NEAR_NOTE
    if note:
        options = [sorted({0, c}) for c in sizes]
        for k in itertools.count(1):      # counts within k of 0 or of the group's size
            wider = [sorted({*range(min(k, c) + 1), *range(max(c - k, 0), c + 1)}) for c in sizes]
            if wider == options or how_many(wider) > most:
                break
            options = wider
    if how_many(options) <= most:
        # the product of the classes' choices, row r taking choice (r // stride) % choices of each
        # class (the last class varying fastest), one class at a time
        per_class = [np.array(list(itertools.combinations_with_replacement(sorted(o, reverse=True), len(m))),
                              dtype=np.int64) for o, m in zip(options, members)]
        total = how_many(options)
        rows = np.zeros((total, len(groups)), dtype=np.int64)
        index, stride = np.arange(total), total
        for m, choices in zip(members, per_class):
            stride //= len(choices)
            rows[:, m] = choices[(index // stride) % len(choices)]
    else:       # too many groups for whole ones in or out: along the groups by speed, and the natural parts
        parts = [canonical(p, members) for p in natural_parts(scenario) + speed_prefixes(scenario)]
        rows = np.array(list(dict.fromkeys(parts)), dtype=np.int64).reshape(-1, len(groups))
        note = NATURAL_NOTE
    return rows[rows.sum(axis=1) > 0], note


def speed_order(scenario: Scenario) -> list[int]:
    """The node groups fastest GPU first (by peak x the share reached; ties in listed order)."""
    groups = scenario.cluster.nodes
    return sorted(range(len(groups)), key=lambda g: -groups[g].gpu.peak_flops_16 * groups[g].gpu.peak_fraction)


def speed_prefixes(scenario: Scenario) -> list[tuple[int, ...]]:
    """Every set of the fastest groups: all the groups of at least each GPU speed, whole."""
    groups = scenario.cluster.nodes
    counts = [0] * len(groups)
    out = []
    for g in speed_order(scenario):
        counts[g] = groups[g].count
        out.append(tuple(counts))
    return out


def natural_parts(scenario: Scenario) -> list[tuple[int, ...]]:
    """The cluster's natural sub-clusters, canonical and without repeats: the whole cluster, every
    node group but one, the fastest groups together (each prefix of the groups by GPU speed), and
    each group alone. A plan found on them is what the search holds before any other part is
    searched; the cluster without one group is among them, so a cluster with a group more holds
    that cluster's whole-cluster plan from the start (up to BUT_ONE_GROUPS groups)."""
    groups = scenario.cluster.nodes
    members = classes(scenario)
    whole = tuple(group.count for group in groups)
    but_one = [tuple(0 if h == g else n for h, n in enumerate(whole)) for g in range(len(groups))
               if len(groups) <= BUT_ONE_GROUPS]
    alone = [tuple(n if h == g else 0 for h, n in enumerate(whole)) for g in range(len(groups))]
    parts = [whole, *but_one, *speed_prefixes(scenario), *alone]
    return [p for p in dict.fromkeys(canonical(p, members) for p in parts) if any(p)]
