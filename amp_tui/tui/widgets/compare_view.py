"""The pinned strategy against the cursor's, term by term (the Selected pane shows this while a
strategy is pinned with p)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table as RichTable
from rich.text import Text
from textual.widgets import Static

from amp_tui.core.plans.compare import Comparison, Row, memory_mark
from amp_tui.tui.format import format_seconds


def _difference(row: Row) -> Text:
    """cursor − pinned; green where the cursor's strategy spends less, red where more."""
    value = row.difference
    if value is None:
        return Text("–")
    if row.unit == "s":
        text = "±0" if value == 0 else ("+" if value > 0 else "−") + format_seconds(abs(value))
    else:
        text = row.format(value, signed=True)
    return Text(text, style="green" if value < 0 else "red" if value > 0 else "dim")


def _value(row: Row, value: float | None) -> str:
    if value is None:
        return "–"
    return format_seconds(value) if row.unit == "s" else row.format(value)


def comparison_renderable(comparison: Comparison) -> Group:
    head = Text(style="bold")
    for note in comparison.notes:       # a strategy that does not fit, or may not
        head.append(f"{note}.\n", style="yellow")
    head.append(comparison.sentence)
    head.append(f"\npinned {comparison.a_name} against the cursor's {comparison.b_name}; "
                "p on the pinned row unpins", style="dim")
    terms = RichTable(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    terms.add_column("per iteration")
    terms.add_column(Text("pinned", justify="right"), justify="right")
    terms.add_column(Text("cursor", justify="right"), justify="right")
    terms.add_column(Text("cursor−pinned", justify="right"), justify="right")
    for row in comparison.terms:
        style = "bold" if row.name == "iteration" else ""
        terms.add_row(Text(row.name, style=style), Text(_value(row, row.a), style=style),
                      Text(_value(row, row.b), style=style), _difference(row))
    stages = RichTable(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for header in ("stage", "compute pinned", "cursor", "memory pinned", "cursor"):
        stages.add_column(header, justify="right")
    count = len(comparison.stages) // 2   # compute rows, then memory rows, one per stage
    for i in range(count):
        compute, memory = comparison.stages[i], comparison.stages[count + i]
        stages.add_row(str(i), _value(compute, compute.a), _value(compute, compute.b),
                       _value(memory, memory.a) + memory_mark(comparison.a, i),
                       _value(memory, memory.b) + memory_mark(comparison.b, i))
    return Group(head, Text(""), terms, Text(""), stages)


class CompareView(Static):
    DEFAULT_CSS = """
    CompareView { height: auto; }
    """

    def show(self, comparison: Comparison | None) -> None:
        self.display = comparison is not None
        if comparison is not None:
            self.update(comparison_renderable(comparison))
