"""Serve view: predicted decode and prompt tokens/s and latencies, the max flow against its bound and the
baselines', and the busiest links."""

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
        if result.served is not None:
            p = result.served.prediction
            text.append(f"decode {result.served.decode_tokens_per_s:,.1f} tokens/s", style="bold")
            text.append(f"   prompt {result.served.prompt_tokens_per_s:,.1f} tokens/s   TTFT {p.ttft_s:.2f} s   "
                        f"TPOT {p.tpot_s:.3f} s\n")
            text.append(f"{p.requests_in_flight:,.0f} requests in flight ({p.limited_by})   depth {p.depth:.1f} "
                        f"machines   {result.to_json()['predicted']['measured_over']}\n")
        text.append(f"max flow {sol.throughput:,.1f} tokens/s")
        text.append(f"   bound {sol.upper_bound:,.1f}   objective {result.objective}   solve {sol.solve_time_s:.2f} s\n")
        gap = result.gap_sentence()
        if gap:
            text.append(gap + "\n", style="dim")
        best = max([sol.throughput, *(v for _, v in result.baselines.values())]) or 1.0
        for name, value in [("amp-tui", sol.throughput), *((n, v) for n, (_, v) in result.baselines.items())]:
            bar = "█" * int(30 * value / best)
            text.append(f"{name:<20} {bar:<30} {value:>10,.1f}\n")
        text.append("busiest links:\n")
        for a, b, flow, use in result.busiest_links(4):
            text.append(f"  {a} -> {b}: {flow:,.1f} tokens/s ({use:.1%})\n")
        self.update(text)
