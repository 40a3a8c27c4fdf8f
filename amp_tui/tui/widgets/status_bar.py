"""Status line: searching (with progress) / done in N ms, candidates evaluated, the last error."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from amp_tui.core.plans.no_strategy import state_shortfall
from amp_tui.core.search.search import SearchResult
from amp_tui.tui.format import format_seconds


class StatusBar(Widget):
    DEFAULT_CSS = """
    StatusBar { height: auto; max-height: 3; background: $panel; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = "idle"            # idle, searching, done, failed
        self.fraction = 0.0
        self.result: SearchResult | None = None
        self.elapsed_s = 0.0
        self.error = ""
        self.show_timings = True
        self.ranking = ""              # the objective when not the default ('cost per token within $8.00/hour')
        self.best_so_far = None        # while searching: the best strategy found yet
        self.exact, self.gap = True, None   # done: proven optimal, or the most the best can be above it

    def searching(self, fraction: float = 0.0, best=None) -> None:
        if self.state != "searching":
            self.best_so_far = None
        self.state, self.fraction = "searching", fraction
        self.best_so_far = best or self.best_so_far
        self.refresh()

    def done(self, result: SearchResult, elapsed_s: float, exact: bool = True, gap: float | None = None) -> None:
        self.state, self.result, self.elapsed_s = "done", result, elapsed_s
        self.exact, self.gap, self.best_so_far = exact, gap, None
        self.refresh()

    def failed(self, message: str) -> None:
        self.state, self.error = "failed", message
        self.refresh(layout=True)

    def set_error(self, message: str) -> None:
        self.error = message
        self.refresh(layout=True)

    def render(self) -> Text:
        """The state on one line (cut to the width); an error whole on the lines below it."""
        line = self._state_line()
        width = self.content_size.width
        if width:
            line.truncate(width, overflow="ellipsis")
        text = Text()
        text.append_text(line)
        if self.error:
            text.append("\n")
            text.append(self.error, style="bold red")
        return text

    def _state_line(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        if self.state == "searching":
            filled = int(self.fraction * 10)
            text.append("searching ", style="bold yellow")
            text.append("▰" * filled + "▱" * (10 - filled), style="yellow")
            text.append(f" {self.fraction * 100:3.0f}%")
            if self.best_so_far is not None:
                best = self.best_so_far
                text.append(" · best so far ")
                text.append(f"{best.strategy.label} mbs {best.strategy.micro_batch_size}", style="bold")
                text.append(f" {format_seconds(best.iteration_time_s)}")
            if self.result is not None:
                text.append(" · results shown are stale", style="yellow")
        elif self.state == "done" and self.result is not None:
            stats = self.result.stats
            text.append("done", style="bold green")
            if self.show_timings:
                text.append(f" in {self.elapsed_s * 1e3:.0f} ms")
            if self.result.strategies:
                best = self.result.strategies[0]
                text.append(" · best ")
                text.append(f"{best.strategy.label} mbs {best.strategy.micro_batch_size}", style="bold")
                text.append(f" {format_seconds(best.iteration_time_s)}")
                if self.exact:
                    text.append(" · proven optimal", style="green")
                elif self.gap is not None:
                    text.append(f" · at most {self.gap:.1%} above the optimum", style="yellow")
            elif state_shortfall(self.result.scenario):
                text.append(" · the model is too big for the cluster: see the Strategies pane", style="bold red")
            elif stats.candidates == 0:
                text.append(" · no candidates: see the Strategies pane", style="bold red")
            else:
                text.append(" · nothing fits in memory", style="bold red")
            if self.ranking:
                text.append(f" · by {self.ranking}", style="bold cyan")
            text.append(f" · {stats.evaluated} of {stats.candidates} candidates evaluated, {stats.pruned} pruned, "
                        f"{len(self.result.infeasible)} infeasible")
            if not stats.all_node_orders:
                text.append(f" · only {stats.node_orders} node orders tried (too many to try all)", style="yellow")
        elif self.state == "failed":
            text.append("search failed", style="bold red")
        return text
