"""Strategies pane: the ranked table (a view of the latest search result), infeasible ones on request."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from amp_tui.core.cost import Prediction
from amp_tui.core.search import SearchResult
from amp_tui.core.units import format_seconds
from amp_tui.tui.format import cell, format_memory_pair
from amp_tui.tui.messages import StrategySelected
from amp_tui.tui.widgets.table import Table

COLUMNS = ("#", "tp×pp×dp", "mbs", "µbs", "iter", "smp/s", "memory", "gap", "vs unif")


def strategy_row(rank: int, prediction: Prediction, best_s: float, baseline_s: float | None) -> list[Text]:
    stage = prediction.tightest_stage
    memory = cell(format_memory_pair(stage.memory.total_bytes, stage.capacity_bytes, short=True), justify="right")
    if not stage.fits:
        memory.stylize("bold red")
    gap = prediction.iteration_time_s / best_s - 1.0
    return [
        cell(str(rank), justify="right"),
        cell(prediction.strategy.label),
        cell(str(prediction.strategy.micro_batch_size), justify="right"),
        cell(str(prediction.num_micro_batches), justify="right"),
        cell(format_seconds(prediction.iteration_time_s), justify="right"),
        cell(f"{prediction.samples_per_s:.1f}", justify="right"),
        memory,
        cell("best" if rank == 1 else f"+{gap * 100:.1f}%", justify="right"),
        cell("–" if baseline_s is None else f"{baseline_s / prediction.iteration_time_s:.2f}x", justify="right"),
    ]


class StrategyTable(Vertical):
    DEFAULT_CSS = """
    StrategyTable { height: 1fr; }
    StrategyTable DataTable { height: 1fr; }
    StrategyTable.-stale DataTable { text-opacity: 60%; }
    StrategyTable #strategies-note { height: auto; color: $text-muted; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: SearchResult | None = None
        self.show_infeasible = False
        self._has_reason_column = False

    def compose(self) -> ComposeResult:
        yield Table(id="strategies", cursor_type="row", zebra_stripes=True, cell_padding=0)
        yield Static(id="strategies-note")

    def on_mount(self) -> None:
        self._set_columns(False)
        app = self.app
        if getattr(app, "result", None) is not None:
            self.show_result(app.result, app.selected_index, app.show_infeasible, app.results_stale)

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def _set_columns(self, with_reason: bool) -> None:
        self.table.clear(columns=True)
        for header in COLUMNS:
            self.table.add_column(cell(header), key=header)
        if with_reason:
            self.table.add_column(cell("why not"), key="why not")
        self._has_reason_column = with_reason

    def show_result(self, result: SearchResult | None, selected: int, show_infeasible: bool, stale: bool) -> None:
        self.result = result
        self.show_infeasible = show_infeasible
        self.set_class(stale, "-stale")
        with self.prevent(DataTable.RowHighlighted):
            scroll_y = self.table.scroll_y
            self._set_columns(show_infeasible and result is not None and bool(result.infeasible))
            if result is None:
                self.query_one("#strategies-note", Static).update(Text("Searching…"))
                return
            best = result.strategies[0].iteration_time_s if result.strategies else 1.0
            baseline = result.baseline.iteration_time_s if result.baseline else None
            for rank, prediction in enumerate(result.strategies, start=1):
                row = strategy_row(rank, prediction, best, baseline)
                self.table.add_row(*row, *([Text("")] if self._has_reason_column else []))
            if self._has_reason_column:
                for entry in result.infeasible:
                    strategy = entry.strategy
                    self.table.add_row(cell("✗", style="red", justify="right"), cell(strategy.label, style="dim"),
                                       cell(str(strategy.micro_batch_size), justify="right", style="dim"),
                                       *[cell("–", style="dim", justify="right") for _ in range(6)],
                                       cell(entry.reason + " ", style="red"))
            if self.table.row_count:
                self.table.move_cursor(row=min(selected, self.table.row_count - 1), animate=False)
                self.table.scroll_to(y=scroll_y, animate=False)
        self.query_one("#strategies-note", Static).update(self._note(result, show_infeasible))

    def _note(self, result: SearchResult, show_infeasible: bool) -> Text:
        parts = []
        if not result.strategies:
            parts.append("No strategy fits in memory: press f to see why each fails.")
        if result.baseline is not None:
            parts.append(f"vs unif: speedup over {result.baseline.strategy.label} mbs "
                         f"{result.baseline.strategy.micro_batch_size} with layers split evenly "
                         f"({format_seconds(result.baseline.iteration_time_s)}).")
        parts.append("memory: fullest stage.")
        if result.infeasible:
            parts.append(f"{len(result.infeasible)} infeasible: f to {'hide' if show_infeasible else 'show'}.")
        return Text(" ".join(parts))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        # Refilling the table moves the cursor through row 0 first; only the row it rests on counts.
        if event.cursor_row == self.table.cursor_row:
            self.post_message(StrategySelected(event.cursor_row))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
