"""What a strategy costs: dollars per hour for the nodes it uses, and per million tokens trained.

Prices are per node-hour (presets/instances.yaml, or a node group's own `price_per_hour`). Idle
nodes are not charged: a plan that leaves nodes idle assumes they are not rented (or are put to
other use). A model that does not say how many tokens a sample holds (sequence_length 1, e.g. an
explicit list of layers) is priced per million samples: a sample counts as one token.
"""

from __future__ import annotations

from dataclasses import replace

from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy


def used_nodes(scenario: Scenario, strategy: Strategy) -> tuple[int, ...]:
    """Nodes the strategy uses, per node group."""
    idle = dict(strategy.idle or ())
    return tuple(group.count - idle.get(g, 0) for g, group in enumerate(scenario.cluster.nodes))


def cost_per_hour_usd(scenario: Scenario, strategy: Strategy) -> float | None:
    """Dollars per hour of the nodes the strategy uses; None if one of them has no price."""
    total = 0.0
    for group, nodes in zip(scenario.cluster.nodes, used_nodes(scenario, strategy)):
        if nodes:
            if group.price_per_hour is None:
                return None
            total += nodes * group.price_per_hour
    return total


def tokens_per_sample(scenario: Scenario) -> int:
    return scenario.model.sequence_length


def cost_unit(scenario: Scenario) -> str:
    """What `cost_per_million_tokens_usd` counts for this model: 'tokens' or 'samples'."""
    return "tokens" if tokens_per_sample(scenario) > 1 else "samples"


def cost_per_million_tokens_usd(scenario: Scenario, strategy: Strategy, samples_per_s: float) -> float | None:
    hourly = cost_per_hour_usd(scenario, strategy)
    if hourly is None or samples_per_s <= 0:
        return None
    tokens_per_hour = samples_per_s * tokens_per_sample(scenario) * 3600.0
    return hourly / (tokens_per_hour / 1e6)


def priced(scenario: Scenario, prediction: Prediction) -> Prediction:
    """The prediction with its cost fields filled in (None where a price is unknown)."""
    strategy = prediction.strategy
    return replace(prediction, cost_per_hour_usd=cost_per_hour_usd(scenario, strategy),
                   cost_per_million_tokens_usd=cost_per_million_tokens_usd(scenario, strategy,
                                                                           prediction.samples_per_s))
