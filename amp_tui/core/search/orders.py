"""Which node groups serve which pipeline stages: the orders of node groups the search tries.

Ranks fill nodes in the order the placement lists node groups, so an order fixes the hardware of
every node along the pipeline. Two orders that give the same per-node hardware sequence are the
same placement: groups with identical hardware and node count are interchangeable, and adjacent
groups of identical hardware merge into one run of nodes ((A, 2 nodes), (A, 1) is (A, 3)). Each
distinct sequence is searched once, as the smallest group order that gives it.

The orders are generated class by class (a class: groups with equal hardware and count), never by
permuting all groups, so a cluster written one node per group with few distinct kinds of node
stays cheap. Beyond MAX_ORDERS distinct sequences, rank order and the groups sorted by GPU
speed (both ways) are searched in full, and NodeOrders.complete says so. Up to MAX_LISTED
sequences, the others are listed too (NodeOrders.rest): the search bounds each (tp, pp, dp,
micro-batch size) family over every order at once (search.order_free_floors) and enumerates
the family's other orders only when that bound can still beat the N-th best, so the ranking
stays exact. Beyond that, the search bounds every order left out and says whether its ranking is
exact all the same, or the gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from amp_tui.core.costmodel.placement import merge_runs
from amp_tui.core.spec.scenario import Scenario

MAX_ORDERS = 6             # distinct sequences searched in full (more: family by family, see below)
MAX_LISTED = 720           # distinct sequences listed for the search to enumerate family by family
MAX_STEPS = 50_000         # arrangements tried before giving up on listing every sequence
ORDERS_NOTE = (f"the node groups have more than {MAX_LISTED} distinct orders; only rank order and the "
               "groups sorted by GPU speed (both ways) were searched")


@dataclass(frozen=True)
class NodeOrders:
    orders: tuple[tuple[int, ...], ...]   # rank order first
    complete: bool                        # False: too many distinct sequences, a few orders only
    # Not complete: every other distinct sequence's order, if there are at most MAX_LISTED in all
    # (else empty), for the search to enumerate in the families its bound cannot rule out.
    rest: tuple[tuple[int, ...], ...] = ()


def node_orders(scenario: Scenario, limit: int = MAX_ORDERS, listed: int = MAX_LISTED) -> NodeOrders:
    """The distinct orders of the scenario's node groups along the pipeline (see the module): all
    of them if at most `limit`, else a few, with the `rest` listed if there are at most `listed`."""
    groups = scenario.cluster.nodes
    rank = tuple(range(len(groups)))
    hardware = [group.hardware_key() for group in groups]
    if not scenario.search.reorder_nodes or len(set(hardware)) == 1:
        return NodeOrders((rank,), True)
    counts = [group.count for group in groups]
    found: dict[tuple, tuple[int, ...]] = {}    # merged per-node hardware runs -> smallest order
    # Every sequence found? k kinds of node give k! distinct sequences at least (each kind's
    # groups side by side, the kinds in any order): then too many to list, without walking them.
    everything = math.factorial(len(set(hardware))) <= max(limit, listed)
    for order in _arrangements(hardware, counts) if everything else ():
        if order is None:
            everything = False
            break
        key = merge_runs((hardware[g], counts[g]) for g in order)
        if key not in found or order < found[key]:
            found[key] = order
        if len(found) > max(limit, listed):
            everything = False
            break
    if everything and len(found) <= limit:
        return NodeOrders(tuple(sorted(found.values(), key=lambda order: (order != rank, order))), True)
    speed = sorted(rank, key=lambda g: groups[g].gpu.peak_flops_16 * groups[g].gpu.peak_fraction)
    few = tuple(dict.fromkeys([rank, tuple(speed), tuple(reversed(speed))]))
    if not everything or len(found) > listed:
        return NodeOrders(few, False)
    # the few, as the smallest orders of their sequences (so that none is listed twice)
    few = tuple(dict.fromkeys(found[merge_runs((hardware[g], counts[g]) for g in order)] for order in few))
    return NodeOrders(few, False, tuple(sorted(set(found.values()) - set(few))))


def _arrangements(hardware: list, counts: list[int]):
    """Group orders covering every distinct per-node hardware sequence, each sorted by group index
    within its runs; None once MAX_STEPS arrangements were tried without finishing.

    Depth first over sequences of classes (equal hardware and count), using each class as often as
    it has groups, with the classes of one run in ascending class order (any other order of a run
    merges to the same nodes). The i-th use of a class takes its i-th group."""
    n = len(hardware)
    classes = list(dict.fromkeys(zip(hardware, counts)))
    members = [[g for g in range(n) if (hardware[g], counts[g]) == cls] for cls in classes]
    left = [len(m) for m in members]
    sequence: list[int] = []
    choices = [0]                 # per depth, the next class to try there
    steps = 0
    while choices:
        depth = len(sequence)
        if depth == n:
            yield _order(sequence, members, classes)
            choices.pop()
            left[sequence.pop()] += 1
            continue
        c = choices[-1]
        while c < len(classes) and (not left[c] or (sequence and classes[sequence[-1]][0] == classes[c][0]
                                                     and c < sequence[-1])):
            c += 1
        if c == len(classes):     # nothing more at this depth: back up one
            choices.pop()
            if sequence:
                left[sequence.pop()] += 1
            continue
        steps += 1
        if steps > MAX_STEPS:
            yield None
            return
        choices[-1] = c + 1
        left[c] -= 1
        sequence.append(c)
        choices.append(0)


def _order(sequence: list[int], members: list[list[int]], classes: list[tuple]) -> tuple[int, ...]:
    used = [0] * len(members)
    order = []
    for c in sequence:
        order.append(members[c][used[c]])
        used[c] += 1
    out: list[int] = []           # sort group indices within each run of identical hardware
    start = 0
    for i in range(1, len(order) + 1):
        if i == len(order) or classes[sequence[i]][0] != classes[sequence[start]][0]:
            out += sorted(order[start:i])
            start = i
    return tuple(out)
