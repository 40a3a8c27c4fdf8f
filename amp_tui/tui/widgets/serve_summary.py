"""Serve view: throughput against bound and baselines, and the busiest links."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class ServeSummary(Static):
    DEFAULT_CSS = """
    ServeSummary { height: auto; padding: 0 1; }
    """

    def show(self, result, note: str = "") -> None:
        text = Text()
        if note:
            text.append(note + "\n", style="yellow")
        if result is None:
            self.update(text)
            return
        sol = result.solution
        text.append(f"throughput {sol.throughput:,.1f} tokens/s", style="bold")
        text.append(f"   bound {sol.upper_bound:,.1f}   gap {sol.gap:.2%}   solve {sol.solve_time_s:.2f} s\n")
        best = max([sol.throughput, *(v for _, v in result.baselines.values())]) or 1.0
        for name, value in [("amp-tui", sol.throughput), *((n, v) for n, (_, v) in result.baselines.items())]:
            bar = "█" * int(30 * value / best)
            text.append(f"{name:<20} {bar:<30} {value:>10,.1f}\n")
        text.append("busiest links:\n")
        for a, b, flow, use in result.busiest_links(4):
            text.append(f"  {a} -> {b}: {flow:,.1f} tokens/s ({use:.1%})\n")
        self.update(text)
