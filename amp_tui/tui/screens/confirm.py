"""A yes/no question; only y confirms (Enter, n and Escape decline, so a double Enter never overwrites)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 70; max-width: 95%; height: auto; border: round $warning; padding: 0 1; background: $surface;
    }
    ConfirmScreen .hint { color: $text-muted; }
    """
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape,enter", "answer(False)", "No")]

    def __init__(self, question: str, title: str = "Confirm") -> None:
        super().__init__()
        self._question = question
        self._title = title

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self._title
            yield Static(Text(self._question))
            yield Static(Text("y: yes · n / Escape / Enter: no"), classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
