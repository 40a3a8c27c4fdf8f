"""Shared behaviour of the editing panes: they show the app's scenario and propose new ones."""

from __future__ import annotations

from collections.abc import Callable

from textual.containers import Vertical
from textual.widgets import DataTable

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.scenario import Scenario
from amp_tui.tui.edits import plausibility_warning
from amp_tui.tui.messages import ScenarioEdited
from amp_tui.tui.screens.edit_value import EditValueScreen
from amp_tui.tui.screens.picker import PickerScreen, PickItem


class ScenarioPane(Vertical):
    """A view of `scenario` (set by the app through `show`). Edits never touch the shown scenario:
    they build a new one with amp_tui.tui.edits and post ScenarioEdited for the app to apply."""

    scenario: Scenario | None = None

    def show(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.refresh_view()

    def refresh_view(self) -> None:  # pragma: no cover - every pane overrides it
        raise NotImplementedError

    def on_mount(self) -> None:
        scenario = getattr(self.app, "scenario", None)
        if scenario is not None and self.scenario is None:
            self.show(scenario)

    def propose(self, scenario: Scenario | Callable[[Scenario], Scenario], what: str) -> None:
        self.post_message(ScenarioEdited(scenario, what))

    def attempt(self, build: Callable[[], Scenario], what: str) -> None:
        """Apply an edit that needs no input; a SpecError is shown and nothing changes."""
        try:
            scenario = build()
        except SpecError as error:
            self.app.notify(str(error), title="Edit refused", severity="error", markup=False)
            return
        except Exception as error:  # a bug must not take the dashboard down; say what happened
            self.app.notify(f"{type(error).__name__}: {error}", title="Edit failed (please report this)",
                            severity="error", markup=False)
            return
        self.propose(scenario, what)

    def edit_value(self, title: str, current: str, build: Callable[[str], Scenario], what: str,
                   hint: str = "") -> None:
        """Ask for a value; the dialog stays open with the parser's message until it is valid."""
        def done(result: Scenario | None) -> None:
            if result is not None:
                self.propose(result, what)
        self.app.push_screen(EditValueScreen(title, current, build, hint,
                                             warn=lambda new: plausibility_warning(new, self.scenario)), done)

    def pick(self, title: str, items: list[PickItem], build: Callable[[object], Scenario], what: str,
             current: object = None, filterable: bool = True) -> None:
        def done(value: object) -> None:
            if value is not None:
                self.attempt(lambda: build(value), what)
        self.app.push_screen(PickerScreen(title, items, filterable=filterable, current=current), done)

    @staticmethod
    def keep_cursor(table: DataTable, fill: Callable[[], None]) -> None:
        """Refill a table and put the cursor back where it was (clamped)."""
        row, column = table.cursor_coordinate
        scroll_x, scroll_y = table.scroll_x, table.scroll_y
        table.clear()
        fill()
        if table.row_count:
            table.move_cursor(row=min(row, table.row_count - 1), column=column, animate=False, scroll=False)
            table.scroll_to(scroll_x, scroll_y, animate=False)
