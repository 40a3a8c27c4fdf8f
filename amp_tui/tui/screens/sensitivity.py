"""w: what if the figures are off? Every link class, GPU speed and the batch size scaled in turn,
the search rerun for each (in a worker, cancelled by Escape), whether the top pick changes, and a
chart of the top strategies' time against the factor for the what-if under the cursor."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState, get_current_worker

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.plans.sensitivity import Sensitivity, pick_label, sensitivity
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import SearchResult
from amp_tui.core.spec.scenario import Scenario
from amp_tui.tui.format import cell, format_seconds
from amp_tui.tui.widgets.key_footer import KeyFooter
from amp_tui.tui.widgets.table import Table

SERIES_COLOURS = (33, 214, 141, 70)


def build_chart(result: Sensitivity, knob: str, width: int, height: int) -> str:
    import plotext as plt  # plotext 5 keeps global state: only ever called on the UI thread

    factors, series = result.series(knob)
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    best = max((t for times in series for t in times if t is not None), default=1.0)
    scale, unit = (1.0, "s") if best >= 1 else (1e3, "ms")
    for i, (prediction, times) in enumerate(zip(result.watched, series)):
        points = [(f, t * scale) for f, t in zip(factors, times) if t is not None]
        if points:
            plt.plot([f for f, _ in points], [t for _, t in points], marker="dot",
                     color=SERIES_COLOURS[i % len(SERIES_COLOURS)], label=pick_label(prediction.strategy))
    plt.xticks(factors, [f"x{f:g}" for f in factors])
    plt.title(f"time per iteration ({unit}) against {knob}")
    return plt.build()


class WhatIfChart(Widget):
    DEFAULT_CSS = """
    WhatIfChart { height: 1fr; min-height: 8; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: Sensitivity | None = None
        self.knob = ""

    def show(self, result: Sensitivity | None, knob: str) -> None:
        self.result, self.knob = result, knob
        self.refresh()

    def render(self) -> Text:
        if self.result is None or not self.knob:
            return Text("")
        width, height = self.content_size.width, self.content_size.height
        if width < 30 or height < 6:
            return Text("(too small for the chart)", style="dim")
        try:
            return Text.from_ansi(build_chart(self.result, self.knob, width, height), no_wrap=True)
        except Exception as error:  # plotext is a third-party drawing: never let it crash the app
            return Text(f"(chart unavailable: {type(error).__name__})", style="dim")


class SensitivityScreen(Screen):
    DEFAULT_CSS = """
    SensitivityScreen { layout: vertical; }
    SensitivityScreen #whatif-verdict { height: auto; padding: 0 1; text-style: bold; }
    SensitivityScreen #whatif-table { height: 1fr; }
    SensitivityScreen #whatif-body { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "close", "Back"), Binding("j", "move(1)", "Down", show=False),
                Binding("k", "move(-1)", "Up", show=False)]

    def __init__(self, scenario: Scenario, base: SearchResult | None = None, objective: Objective | None = None) -> None:
        super().__init__()
        self.scenario = scenario
        self.base = base                # the dashboard's ranking of `scenario` (None: searched again)
        self.objective = objective
        self.result: Sensitivity | None = None
        self.knobs: list[str] = []      # per table row
        self.closed = False             # Escape: the worker stops at its next poll, its result is dropped

    def compose(self) -> ComposeResult:
        yield Static(Text(f"What if the figures are off? {self.scenario.name}: each link, GPU speed and the batch "
                          "size scaled in turn, the search rerun for each.", style="dim"), id="whatif-head")
        yield Static(Text("searching the what-ifs…", style="yellow"), id="whatif-verdict")
        with Vertical(id="whatif-body"):
            yield Table(id="whatif-table", cursor_type="row", zebra_stripes=True, cell_padding=0)
            yield WhatIfChart(id="whatif-chart")
        yield KeyFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for header in ("what-if", "factor", "top pick", "best", "moved"):
            table.add_column(cell(header), key=header)
        table.focus()
        self.run_whatifs()

    @work(thread=True, exclusive=True, group="sensitivity", exit_on_error=False)
    def run_whatifs(self) -> None:
        worker = get_current_worker()
        last = [0.0]

        def progress(fraction: float) -> None:
            import time

            if time.monotonic() - last[0] > 0.1:
                last[0] = time.monotonic()
                self.app.call_from_thread(self._progress, fraction)
        try:
            result = sensitivity(self.scenario, self.base, self.objective,
                                 should_cancel=lambda: worker.is_cancelled or self.closed, progress=progress)
        except Cancelled:
            return
        self.app.call_from_thread(self.show_result, result)

    def _progress(self, fraction: float) -> None:
        if self.result is None and not self.closed and self.is_attached:
            self.query_one("#whatif-verdict", Static).update(
                Text(f"searching the what-ifs… {fraction * 100:.0f}% (Escape cancels)", style="yellow"))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "sensitivity" and event.state == WorkerState.ERROR:
            error = event.worker.error
            self.query_one("#whatif-verdict", Static).update(
                Text(f"What-ifs failed: {type(error).__name__}: {error}", style="bold red"))

    def show_result(self, result: Sensitivity) -> None:
        if self.closed or not self.is_attached:
            return
        self.result = result
        self.query_one("#whatif-verdict", Static).update(Text(result.verdict()[0].upper() + result.verdict()[1:] + "."))
        table = self.query_one(DataTable)
        table.clear()
        self.knobs = []
        for case in result.cases:
            if case.error:
                table.add_row(cell(case.knob), cell(f"x{case.factor:g}", justify="right"),
                              cell(f"skipped: {case.error}", style="dim"), cell(""), cell(""))
            else:
                changed = result.changed(case)
                table.add_row(cell(case.knob), cell(f"x{case.factor:g}", justify="right"),
                              cell(pick_label(case.top.strategy) if case.top else "nothing fits",
                                   style="bold yellow" if changed else ""),
                              cell(format_seconds(case.best_s) if case.best_s is not None else "–", justify="right"),
                              cell("yes" if changed else "", style="bold yellow"))
            self.knobs.append(case.knob)
        if self.knobs:
            table.move_cursor(row=0)
            self.query_one(WhatIfChart).show(result, self.knobs[0])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        if self.result is not None and 0 <= event.cursor_row < len(self.knobs):
            self.query_one(WhatIfChart).show(self.result, self.knobs[event.cursor_row])

    def action_move(self, step: int) -> None:
        table = self.query_one(DataTable)
        table.action_cursor_down() if step > 0 else table.action_cursor_up()

    def action_close(self) -> None:
        self.closed = True
        self.workers.cancel_group(self, "sensitivity")
        self.app.pop_screen()
