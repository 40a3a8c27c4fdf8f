"""A part of a cluster: a strategy that leaves nodes idle runs on the nodes it uses.

The part keeps the node groups it uses (with their used node counts), numbered among themselves; a
prediction made on the part is mapped back onto the whole cluster, idle nodes named.
"""

from __future__ import annotations

from dataclasses import replace

from amp_tui.core.costmodel.placement import placement_label
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.costmodel.pricing import priced, used_nodes
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy


def part_scenario(scenario: Scenario, counts) -> tuple[Scenario, tuple[int, ...]]:
    """The scenario on `counts` nodes per group (groups with none dropped), and the kept groups'
    indices in the whole cluster."""
    kept = tuple(g for g, n in enumerate(counts) if n)
    nodes = tuple(replace(scenario.cluster.nodes[g], count=int(counts[g])) for g in kept)
    return replace(scenario, cluster=replace(scenario.cluster, nodes=nodes)), kept


def to_whole(scenario: Scenario, counts, kept: tuple[int, ...], prediction: Prediction) -> Prediction:
    """A prediction made on a part, with placement and idle nodes named on the whole cluster. Wholly
    idle groups go last in the placement (they take no ranks)."""
    s = prediction.strategy
    groups = scenario.cluster.nodes
    placement = None
    if s.placement is not None:
        placement = tuple(kept[i] for i in s.placement) + tuple(g for g in range(len(groups)) if g not in kept)
    idle = tuple((g, group.count - int(counts[g])) for g, group in enumerate(groups) if counts[g] < group.count)
    return priced(scenario, replace(prediction, strategy=replace(s, placement=placement, idle=idle or None)))


def to_part(strategy: Strategy, kept: tuple[int, ...]) -> Strategy:
    placement = None
    if strategy.placement is not None:
        placement = tuple(kept.index(g) for g in strategy.placement if g in kept)
    return replace(strategy, placement=placement, idle=None)


def placement_text(scenario: Scenario, strategy: Strategy) -> str:
    """The placement label on the nodes the strategy uses."""
    if not strategy.idle:
        return placement_label(scenario.cluster, strategy.placement)
    part, kept = part_scenario(scenario, used_nodes(scenario, strategy))
    return placement_label(part.cluster, to_part(strategy, kept).placement)
