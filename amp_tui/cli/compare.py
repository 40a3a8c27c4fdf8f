"""`amp-tui compare`: strategies side by side, term by term (the first against each other)."""

from __future__ import annotations

from amp_tui.cli.output import summary
from amp_tui.core.base.errors import SpecError


def add_parser(sub) -> None:
    co = sub.add_parser("compare", help="compare strategies term by term (the first against each other)")
    co.add_argument("scenario", metavar="SCENARIO_OR_PLAN", help="scenario preset or file, or a plan file")
    co.add_argument("strategies", metavar="STRATEGIES",
                    help="YAML list of two or more strategies; with a plan file, one or more (the plan's comes first)")


def run(args) -> int:
    from amp_tui.core.base.yamlio import load_yaml_document
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.plans.compare import compare
    from amp_tui.core.plans.planfile import open_scenario
    from amp_tui.core.search.evaluate import evaluate, parse_strategy_list

    scenario, plan = open_scenario(args.scenario)
    strategies = ([plan.strategy] if plan is not None else []) + parse_strategy_list(
        load_yaml_document(args.strategies, "a list of strategies"), args.strategies)
    if len(strategies) < 2:
        raise SpecError("STRATEGIES", args.strategies, "list at least two strategies to compare (or pass a plan)")
    cost = CostModel(scenario)
    predictions = [evaluate(scenario, s, cost, field=f"strategies[{i}]") for i, s in enumerate(strategies)]
    blocks = [summary(scenario)]
    for other in predictions[1:]:
        blocks += ["", *compare(predictions[0], other, scenario).lines()]
    print("\n".join(blocks))
    return 0
