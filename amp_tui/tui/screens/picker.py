"""A filterable list to pick one item from (instances, GPU types, choices, presets)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option


@dataclass(frozen=True)
class PickItem:
    value: object          # what the picker returns
    label: str             # shown bold
    detail: str = ""       # shown dim after the label; searched too


class PickerScreen(ModalScreen):
    """Type to filter (every word must appear), arrows to move, Enter to pick, Escape to cancel."""

    DEFAULT_CSS = """
    PickerScreen { align: center middle; }
    PickerScreen > Vertical {
        width: 100; max-width: 95%; height: auto; max-height: 90%; border: round $accent;
        padding: 0 1; background: $surface;
    }
    PickerScreen OptionList { height: auto; max-height: 24; }
    PickerScreen .hint { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel"),
                Binding("down", "cursor(1)", "Down", show=False),
                Binding("up", "cursor(-1)", "Up", show=False)]

    def __init__(self, title: str, items: list[PickItem], *, filterable: bool = True, current: object = None) -> None:
        super().__init__()
        self._title = title
        self._items = items
        self._filterable = filterable
        self._current = current
        self._shown: list[PickItem] = []

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self._title
            if self._filterable:
                yield Input(placeholder="type to filter", id="filter")
            yield OptionList(id="options")
            yield Label(Text("Enter pick · Escape cancel" + (" · ↑↓ move" if self._filterable else "")),
                        classes="hint")

    def on_mount(self) -> None:
        self._fill("")
        if self._filterable:
            self.query_one(Input).cursor_blink = False
            self.query_one(Input).focus()
        else:
            self.query_one(OptionList).focus()
        for index, item in enumerate(self._shown):
            if item.value == self._current:
                self.query_one(OptionList).highlighted = index

    def _fill(self, text: str) -> None:
        words = text.lower().split()
        self._shown = [item for item in self._items
                       if all(w in f"{item.label} {item.detail}".lower() for w in words)]
        options = self.query_one(OptionList)
        options.clear_options()
        for item in self._shown:
            line = Text(item.label, style="bold")
            if item.detail:
                line.append("  " + item.detail, style="dim")
            options.add_option(Option(line))
        if self._shown:
            options.highlighted = 0

    @property
    def shown(self) -> list[PickItem]:
        return list(self._shown)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._fill(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._pick(self.query_one(OptionList).highlighted)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self._pick(event.option_index)

    def _pick(self, index: int | None) -> None:
        if index is None or not 0 <= index < len(self._shown):
            self.notify("Nothing matches the filter", severity="warning")
            return
        self.dismiss(self._shown[index].value)

    def action_cursor(self, step: int) -> None:
        options = self.query_one(OptionList)
        if step > 0:
            options.action_cursor_down()
        else:
            options.action_cursor_up()

    def action_cancel(self) -> None:
        self.dismiss(None)
