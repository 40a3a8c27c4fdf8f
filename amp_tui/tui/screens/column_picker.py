"""c in the Strategies pane: tick the columns to show (at 80 columns not all of them fit)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, SelectionList


class ColumnPickerScreen(ModalScreen):
    DEFAULT_CSS = """
    ColumnPickerScreen { align: center middle; }
    ColumnPickerScreen > Vertical {
        width: 40; max-width: 95%; height: auto; max-height: 90%; border: round $accent;
        padding: 0 1; background: $surface;
    }
    ColumnPickerScreen SelectionList { height: auto; max-height: 18; }
    ColumnPickerScreen .hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("enter", "done", "Apply", priority=True)]

    def __init__(self, available: tuple[str, ...], shown: tuple[str, ...]) -> None:
        super().__init__()
        self._available = available
        self._shown = shown

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Columns"
            yield SelectionList[str](*[(Text(name), name, name in self._shown) for name in self._available])
            yield Label(Text("space tick/untick · Enter apply · Escape cancel"), classes="hint")

    def on_mount(self) -> None:
        self.query_one(SelectionList).focus()

    def action_done(self) -> None:
        chosen = tuple(self.query_one(SelectionList).selected)
        if not chosen:
            self.notify("Keep at least one column", severity="warning")
            return
        self.dismiss(tuple(name for name in self._available if name in chosen))

    def action_cancel(self) -> None:
        self.dismiss(None)
