"""`amp-tui evaluate`: predict given strategies, or re-predict a saved plan."""

from __future__ import annotations

from amp_tui.cli.output import json_text, render_predictions
from amp_tui.core.base.errors import SpecError


def add_parser(sub) -> None:
    ev = sub.add_parser("evaluate", help="predict given strategies, or re-predict a saved plan")
    ev.add_argument("scenario", metavar="SCENARIO_OR_PLAN", help="scenario preset or file, or a plan file")
    ev.add_argument("strategies", nargs="?", metavar="STRATEGIES",
                    help="YAML list of strategies (tp, pp, dp, micro_batch_size[, partition, placement])")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args) -> int:
    from amp_tui.core.base.yamlio import load_yaml_document
    from amp_tui.core.plans.planfile import open_scenario, prediction_changes
    from amp_tui.core.search.evaluate import evaluate, parse_strategy_list

    scenario, plan = open_scenario(args.scenario)
    if plan is not None and not args.strategies:
        prediction = evaluate(plan.scenario, plan.strategy)
        changes = prediction_changes(plan.saved_prediction, prediction)
        if args.json:
            print(json_text({**prediction.to_dict(), "changed_since_saved": changes,
                             **_sources(plan.scenario, [prediction])[0]}))
        else:
            print(render_predictions(plan.scenario, [prediction]))
            print()
            print("figures changed since the plan was saved:\n  " + "\n  ".join(changes) if changes
                  else f"figures unchanged since the plan was saved ({plan.created}, amp-tui {plan.version})")
        return 0
    if not args.strategies:
        raise SpecError("STRATEGIES", None, "give a YAML file listing strategies (or pass a plan file)")
    strategies = parse_strategy_list(load_yaml_document(args.strategies, "a list of strategies"), args.strategies)
    from amp_tui.core.costmodel.cost import CostModel

    cost = CostModel(scenario)
    predictions = []
    for i, strategy in enumerate(strategies):
        predictions.append(evaluate(scenario, strategy, cost, field=f"strategies[{i}]"))
    if args.json:
        print(json_text([{**p.to_dict(), **extra} for p, extra in zip(predictions, _sources(scenario, predictions))]))
    else:
        print(render_predictions(scenario, predictions))
    return 0


def _sources(scenario, predictions) -> list[dict]:
    """Per prediction: where each GPU type's layer times come from (and the profile file), and the
    warning where its stages are priced by different sources (null where they are not)."""
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.costmodel.time_sources import layer_time_sources, source_warning

    cost = CostModel(scenario)
    sources = layer_time_sources(cost)
    return [{"layer_times": sources, "time_source_warning": source_warning(cost, p)} for p in predictions]
