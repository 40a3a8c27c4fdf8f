"""Selected strategy: its summary line, per-stage load bars and the time chart."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.costmodel.pricing import cost_unit, used_nodes
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import Infeasible
from amp_tui.core.spec.strategy import Strategy
from amp_tui.tui.format import format_seconds
from amp_tui.tui.widgets.compare_view import CompareView
from amp_tui.tui.widgets.stage_bars import StageBars
from amp_tui.tui.widgets.strategy_table import no_strategy_note
from amp_tui.tui.widgets.time_chart import TimeChart


def summary(prediction: Prediction, baseline: Prediction | None, scenario) -> Text:
    strategy = prediction.strategy
    text = Text()
    text.append(f"{strategy.label}", style="bold")
    text.append(f" · micro-batch {strategy.micro_batch_size} x {prediction.num_micro_batches} · ")
    text.append(format_seconds(prediction.iteration_time_s), style="bold")
    text.append(f" per iteration · {prediction.samples_per_s:.1f} samples/s")
    if baseline is not None:
        text.append(f" · {baseline.iteration_time_s / prediction.iteration_time_s:.2f}x uniform")
    text.append(f"\nsteady {format_seconds(prediction.steady_state_s)} + fill/drain "
                f"{format_seconds(prediction.fill_drain_s)} + dp/optimizer {format_seconds(prediction.dp_and_optimizer_s)}")
    text.append(" · bubble ")
    text.append(f"{prediction.bubble_fraction * 100:.1f}%", style="bold")
    text.append(" · dp all-reduce ")
    text.append(format_seconds(prediction.dp_allreduce_s), style="bold")
    if strategy.partition:
        text.append(f"\nlayers per stage {'/'.join(map(str, strategy.partition))}")
    text.append(_nodes(scenario, strategy))
    if prediction.cost_per_hour_usd is not None:
        text.append(f"\n${prediction.cost_per_hour_usd:,.2f}/hour")
        if prediction.cost_per_million_tokens_usd is not None:
            text.append(f" · ${prediction.cost_per_million_tokens_usd:,.2f} per million {cost_unit(scenario)}")
    else:
        notes = [group.price_note(i) for i, (group, nodes) in enumerate(zip(scenario.cluster.nodes,
                                                                            used_nodes(scenario, strategy))) if nodes]
        text.append("\n" + next((note for note in notes if note), "no price: a node group it uses has none"),
                    style="yellow")
    from amp_tui.core.plans.confidence import confidence

    text.append(f"\npredicted {confidence(scenario).describe()}", style="dim")
    from amp_tui.core.costmodel.time_sources import has_measurements

    if has_measurements(scenario.model):
        text.append_text(_time_sources(scenario, prediction))
    from amp_tui.core.costmodel.prediction import memory_terms_text

    text.append(f"\nfullest stage's memory, {memory_terms_text(prediction.tightest_stage)}", style="dim")
    if not prediction.fits_memory and prediction.reason:
        text.append(f"\n{prediction.reason}", style="bold red")
    from amp_tui.core.plans.confidence import MEMORY_RISK_NOTE, memory_at_risk

    if memory_at_risk(prediction):
        text.append(f"\nmemory {MEMORY_RISK_NOTE}", style="bold yellow")
    from amp_tui.core.plans.runnable import custom_note

    if custom_note(strategy):
        text.append(f"\n† {custom_note(strategy)}", style="bold yellow")
    return text


def _time_sources(scenario, prediction: Prediction) -> Text:
    """Where each stage's layer times come from, and a warning where the stages' GPU types price
    the same layers from different sources (measured or carried on one, analytic on another)."""
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.costmodel.time_sources import source_warning, stage_sources_text

    text = Text(f"\nlayer times: {stage_sources_text(prediction)}", style="dim")
    warning = source_warning(CostModel(scenario), prediction)
    if warning:
        text.append(f"\n{warning}", style="bold yellow")
    return text


def _nodes(scenario, strategy: Strategy) -> str:
    """' · nodes: ...' where the cluster has more than one node group to order, and the nodes a
    strategy leaves idle, with the GPUs it uses."""
    from amp_tui.core.costmodel.parts import placement_text

    cluster = scenario.cluster
    out = f" · nodes: {placement_text(scenario, strategy)}" if len(cluster.nodes) > 1 else ""
    if strategy.idle:
        idle = ", ".join(f"{nodes} x {cluster.nodes[group].label}" for group, nodes in strategy.idle)
        used = strategy.num_gpus
        out += f" · idle: {idle} ({used} of {cluster.num_gpus} GPUs used)"
    return out


class SelectedPane(VerticalScroll):
    DEFAULT_CSS = """
    SelectedPane { height: 1fr; }
    SelectedPane #selected-summary { height: auto; }
    SelectedPane #selected-stale { height: auto; display: none; color: $warning; text-style: bold; }
    SelectedPane.-stale #selected-stale { display: block; }
    SelectedPane.-stale #selected-summary, SelectedPane.-stale StageBars, SelectedPane.-stale TimeChart,
    SelectedPane.-stale CompareView { text-opacity: 50%; }
    """

    def set_stale(self, stale: bool) -> None:
        self.set_class(stale, "-stale")

    def compose(self) -> ComposeResult:
        yield Static(Text("stale: this is from before the latest edit; searching…"), id="selected-stale")
        yield CompareView(id="compare")
        yield Static(Text("No strategy selected yet.", style="dim"), id="selected-summary")
        yield StageBars(id="stage-bars")
        yield TimeChart(id="time-chart")

    def on_mount(self) -> None:
        app = self.app
        self.set_stale(bool(getattr(app, "results_stale", False)))
        if getattr(app, "result", None) is not None:
            self.show(app.selected_entry(), app.result.baseline)

    def show(self, entry: Prediction | Infeasible | None, baseline: Prediction | None) -> None:
        bars, chart, text = self.query_one(StageBars), self.query_one(TimeChart), self.query_one("#selected-summary", Static)
        comparison = self.app.comparison() if hasattr(self.app, "comparison") else None
        self.query_one(CompareView).show(comparison)
        text.display = comparison is None
        if comparison is not None:
            bars.display = chart.display = False
        elif isinstance(entry, Prediction):
            text.update(summary(entry, baseline, self.app.result.scenario))
            bars.show(entry)
            chart.show(entry)
            bars.display = chart.display = True
        elif isinstance(entry, Infeasible):
            strategy, scenario = entry.strategy, self.app.result.scenario
            message = Text(f"{strategy.label} micro-batch {strategy.micro_batch_size} is infeasible", style="bold")
            message.append(_nodes(scenario, strategy))
            message.append("\n")
            message.append(entry.reason, style="red")
            message.append("\nThe bars show the even split.", style="dim")
            text.update(message)
            bars.show(evaluate(scenario, strategy))       # the even split the reason describes
            chart.show(None)
            bars.display, chart.display = True, False
        else:
            result = getattr(self.app, "result", None)
            text.update(Text(no_strategy_note(result, getattr(self.app, "objective", None)) if result is not None else "No strategy yet.", style="dim"))
            bars.show(None)
            chart.show(None)
            bars.display = chart.display = False
