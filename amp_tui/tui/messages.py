"""Messages that carry edits up to the app and search results back to it from the worker thread."""

from __future__ import annotations

from collections.abc import Callable

from textual.message import Message

from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.search.search import SearchResult
from amp_tui.core.spec.scenario import Scenario


class ScenarioEdited(Message):
    """A pane proposes a new scenario: a validated Scenario, a plain dict for the app to parse, or a
    function the app applies to its current scenario (for edits relative to it, like one node more).

    `what` is a short description of the edit for the status bar and the undo notification.
    """

    def __init__(self, scenario: Scenario | dict | Callable[[Scenario], Scenario], what: str) -> None:
        super().__init__()
        self.scenario = scenario
        self.what = what


class SearchProgress(Message):
    """The running search of `generation` has settled `fraction` of its candidates; `best`, when
    given, is the best strategy found so far (the search's anytime answer)."""

    def __init__(self, generation: int, fraction: float, best: Prediction | None = None) -> None:
        super().__init__()
        self.generation = generation
        self.fraction = fraction
        self.best = best


class SearchDone(Message):
    """The search of `generation` finished; the app drops it if a newer edit came since. `exact`:
    the ranking is proven (else `gap` bounds how far the best can be above the optimum)."""

    def __init__(self, generation: int, result: SearchResult, elapsed_s: float, exact: bool = True,
                 gap: float | None = None) -> None:
        super().__init__()
        self.generation = generation
        self.result = result
        self.elapsed_s = elapsed_s
        self.exact = exact
        self.gap = gap


class StrategySelected(Message):
    """The cursor in the strategies table moved to row `index` (feasible strategies first)."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index


class EditRefused(Message):
    """An edit dialog refused a value; the status line shows the reason until the next valid edit."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason


class PeerGone(Message):
    """Whoever drove the dashboard (textual-serve's server) hung up its stdin: quit as ctrl+q does."""
