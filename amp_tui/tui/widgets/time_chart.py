"""Where the iteration time goes, per stage: a plotext stacked bar chart.

plotext 5 keeps global state, so the chart is built on the UI thread, in `render`, and cached by
(prediction, size). 256-colour codes only (no true colour); Text.from_ansi turns them into Rich text.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from amp_tui.core.costmodel.prediction import Prediction

# (name, 256-colour index, Rich colour for the legend)
PARTS = [
    ("compute", 33, "color(33)"),
    ("tp comm", 214, "color(214)"),
    ("pipeline send", 160, "color(160)"),   # crimson: 178 (gold) read as tp comm's orange
    ("dp all-reduce", 141, "color(141)"),
    ("optimizer", 70, "color(70)"),
    ("idle (bubble)", 245, "color(245)"),
]


def stage_breakdown(prediction: Prediction) -> list[list[float]]:
    """Seconds per part (rows of PARTS) per stage over one iteration; they sum to the iteration time."""
    rows: list[list[float]] = [[] for _ in PARTS]
    micro_batches = prediction.num_micro_batches
    for stage in prediction.stages:
        values = [micro_batches * (stage.compute_s - stage.tp_comm_s), micro_batches * stage.tp_comm_s,
                  micro_batches * stage.comm_s, stage.dp_allreduce_s, stage.optimizer_step_s]
        values.append(max(0.0, prediction.iteration_time_s - sum(values)))
        for row, value in zip(rows, values):
            row.append(max(0.0, value))
    return rows


def build_chart(prediction: Prediction, width: int, height: int) -> str:
    import plotext as plt  # on first draw: keeps start-up fast

    rows = stage_breakdown(prediction)
    scale, unit = (1.0, "s") if prediction.iteration_time_s >= 1 else (1e3, "ms")
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    labels = [f"st {stage.index}" for stage in prediction.stages]
    plt.stacked_bar(labels, [[v * scale for v in row] for row in rows], color=[p[1] for p in PARTS],
                    orientation="horizontal", width=0.8)
    plt.yreverse(True)  # stage 0 on top, as in the load bars
    plt.title(f"where each stage's iteration time goes ({unit})")
    return plt.build()


def legend(width: int) -> Text:
    """Every part's colour and name, wrapped to `width` between entries (never cut)."""
    text, line = Text(), 0
    for name, _, colour in PARTS:
        entry = len(name) + 4
        if line and line + entry > width:
            text.append("\n")
            line = 0
        text.append("█", style=colour)
        text.append(f" {name}  ")
        line += entry
    return text


class TimeChart(Widget):
    DEFAULT_CSS = """
    TimeChart { height: 8; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.prediction: Prediction | None = None
        self._cache: tuple[tuple, Text] | None = None

    def show(self, prediction: Prediction | None) -> None:
        self.prediction = prediction
        if prediction is not None:
            # title, frame and axis rows, the legend, and one or two rows per stage
            stages = len(prediction.stages)
            self.styles.height = 7 + (2 * stages if stages <= 6 else min(stages, 40))
        self.refresh(layout=True)

    def render(self) -> Text:
        if self.prediction is None:
            return Text("")
        width, height = self.content_size.width, self.content_size.height
        if width < 20 or height < 6:
            return Text("(too small for the chart)", style="dim")
        key = (id(self.prediction), width, height)
        height -= legend(width).plain.count("\n")   # the legend's extra lines come out of the chart
        if self._cache is None or self._cache[0] != key:
            try:
                drawn = build_chart(self.prediction, width, height - 1)
            except Exception as error:  # plotext is a third-party drawing: never let it crash the app
                return Text(f"(chart unavailable: {type(error).__name__})", style="dim")
            chart = Text.from_ansi(drawn, no_wrap=True)
            chart.rstrip()
            chart.append("\n")
            chart.append_text(legend(width))
            self._cache = (key, chart)
        return self._cache[1]
