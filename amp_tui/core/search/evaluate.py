"""Evaluate given strategies on a scenario: the `amp-tui evaluate` core."""

from __future__ import annotations

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_STRATEGIES
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.parts import part_scenario, to_part, to_whole
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.costmodel.pricing import priced, used_nodes
from amp_tui.core.costmodel.shares import predict_with_shares
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy, even_partition, parse_strategy
from amp_tui.core.spec.validity import validate_strategy


def rank_order(scenario: Scenario) -> tuple[int, ...]:
    return tuple(range(len(scenario.cluster.nodes)))


def evaluate(scenario: Scenario, strategy: Strategy, cost: CostModel | None = None,
             field: str = "strategy") -> Prediction:
    """Predict one strategy. Placement defaults to rank order; a missing partition is the one the
    search finds best for these degrees and placement, or the even split when none fits in memory
    (the prediction then says why). Errors name fields under `field`."""
    validate_strategy(scenario, strategy, field)
    if strategy.idle:
        return evaluate_with_idle(scenario, strategy, field=field)
    knobs = resolve(strategy, scenario.training)
    if cost is None or cost.knobs != knobs:
        cost = CostModel(scenario, knobs)
    order = strategy.placement or rank_order(scenario)
    if strategy.per_stage:
        from amp_tui.core.costmodel.stagewise import evaluate_stagewise

        return priced(scenario, evaluate_stagewise(cost, strategy, order, field))
    if strategy.batch_shares and len(set(strategy.batch_shares)) > 1:
        return priced(scenario, evaluate_shares(cost, strategy, order))
    candidate = cost.candidate(strategy.tp, strategy.pp, strategy.dp, strategy.micro_batch_size, order)
    partition = strategy.partition
    if partition is None:
        from amp_tui.core.search.partition.walk import best_partition

        partition = best_partition(candidate).partition or even_partition(candidate.num_layers, strategy.pp)
    return priced(scenario, candidate.predict(partition))


def parse_strategy_list(data: object, source: str = "strategies") -> list[Strategy]:
    if isinstance(data, dict) and "strategies" in data:
        data = data["strategies"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise SpecError(source, type(data).__name__, "expected a list of strategies (tp, pp, dp, micro_batch_size)")
    if len(data) > MAX_STRATEGIES:
        raise SpecError(source, f"{len(data):,} strategies", f"more than the limit of {MAX_STRATEGIES:,}")
    return [parse_strategy(entry, f"strategies[{i}]") for i, entry in enumerate(data)]


def evaluate_with_idle(scenario: Scenario, strategy: Strategy, field: str = "strategy") -> Prediction:
    """`evaluate` for a strategy that leaves nodes idle: predicted on the nodes it uses."""
    validate_strategy(scenario, strategy, field)
    counts = used_nodes(scenario, strategy)
    part, kept = part_scenario(scenario, counts)
    return to_whole(scenario, counts, kept, evaluate(part, to_part(strategy, kept), field=field))


def evaluate_shares(cost: CostModel, strategy, order: tuple[int, ...]) -> Prediction:
    """`evaluate` for a strategy with batch_shares (validated)."""
    from amp_tui.core.search.partition.walk import best_partition

    candidate = cost.candidate(strategy.tp, strategy.pp, strategy.dp, strategy.micro_batch_size, order)
    candidate.num_micro_batches = max(strategy.batch_shares) // strategy.micro_batch_size
    partition = strategy.partition
    if partition is None:
        partition = best_partition(candidate).partition or even_partition(candidate.num_layers, strategy.pp)
    return predict_with_shares(candidate, partition, strategy.batch_shares)
