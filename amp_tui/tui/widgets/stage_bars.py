"""Per-stage load bars of one strategy: time against the bottleneck stage, memory against capacity."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from amp_tui.core.base.units import format_bytes
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.tui.format import format_memory_pair, format_seconds

COMPUTE = "color(33)"
COMM = "color(214)"
MEMORY = "color(70)"
OVER = "bold color(196)"
EMPTY = "color(240)"


def _bar(parts: list[tuple[float, str]], scale: float, width: int) -> Text:
    """A bar of `width` cells: each (value, style) part takes value/scale of it, the rest is dotted."""
    text = Text()
    used = 0
    total = 0.0
    for value, style in parts:
        total += value
        cells = min(width, round(total / scale * width)) - used if scale > 0 else 0
        if cells > 0:
            text.append("█" * cells, style=style)
            used += cells
    if used < width:
        text.append("·" * (width - used), style=EMPTY)
    return text


def stage_lines(prediction: Prediction, width: int) -> Text:
    stages = prediction.stages
    bottleneck = prediction.bottleneck_stage
    scale = stages[bottleneck].stage_time_s
    layer_w = max(len(f"{s.first_layer}-{s.last_layer}") for s in stages)
    gpu_w = max(len("/".join(s.gpu_types)) for s in stages)
    fixed = 3 + 1 + layer_w + 1 + gpu_w + 1 + 11 + 1 + 16
    bar_w = max(4, (width - fixed) // 2)
    out = Text()
    head = f"{'st':>3} {'layers':<{layer_w}} {'GPU':<{gpu_w}} "
    # The memory bar starts bar_w + 11 cells after the time bar; a narrow pane still keeps a space.
    time_head = f"{'time vs bottleneck':<{bar_w + 11}}"
    out.append(head + time_head + ("" if time_head.endswith(" ") else " ") + "memory vs capacity\n", style="bold")
    for stage in stages:
        layers = f"{stage.first_layer}-{stage.last_layer}"
        out.append(f"{stage.index:>3} {layers:<{layer_w}} {'/'.join(stage.gpu_types):<{gpu_w}} ")
        out.append_text(_bar([(stage.compute_s - stage.tp_comm_s, COMPUTE), (stage.tp_comm_s + stage.comm_s, COMM)],
                             scale, bar_w))
        mark = "◀" if stage.index == bottleneck else " "
        out.append(f" {format_seconds(stage.stage_time_s):>8}{mark} ", style="bold" if mark != " " else "")
        fraction = stage.memory.total_bytes / stage.capacity_bytes
        if stage.fits:
            out.append_text(_bar([(fraction, MEMORY)], 1.0, bar_w))
            out.append(f" {format_memory_pair(stage.memory.total_bytes, stage.capacity_bytes)}")
        else:
            out.append("█" * bar_w, style=OVER)
            out.append(f" OVER by {format_bytes(stage.memory.total_bytes - stage.capacity_bytes)}", style=OVER)
        out.append("\n")
    out.append("█", style=COMPUTE)
    out.append(" compute  ")
    out.append("█", style=COMM)
    out.append(" communication  ")
    out.append("◀", style="bold")
    out.append(" bottleneck (per micro-batch)")
    return out


class StageBars(Widget):
    """One row per pipeline stage; rendered from the Prediction it is given."""

    DEFAULT_CSS = """
    StageBars { height: auto; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.prediction: Prediction | None = None

    def show(self, prediction: Prediction | None) -> None:
        self.prediction = prediction
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.prediction.stages) + 2 if self.prediction else 1

    def render(self) -> Text:
        if self.prediction is None:
            return Text("")
        return stage_lines(self.prediction, self.content_size.width or 80)
