"""A small modal that edits one value: Enter validates through the core parser, Escape cancels.

The caller passes `validate(text) -> result`; a SpecError keeps the dialog open and shows its
message (field, value and what is allowed) under the input. Only a valid result is returned. An
empty value the caller refuses is not reported as a refused edit: the dialog asks for a value.

Keys typed right after the key that opened the dialog (one read of the terminal, or a loaded
machine) can reach it before its input has focus; they are kept and typed into the input once it
has, Enter included, instead of being lost.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from amp_tui.core.base.errors import SpecError
from amp_tui.tui.messages import EditRefused


class EditValueScreen(ModalScreen):
    DEFAULT_CSS = """
    EditValueScreen { align: center middle; }
    EditValueScreen > Vertical {
        width: 70; max-width: 95%; height: auto; border: round $accent; padding: 0 1;
        background: $surface;
    }
    EditValueScreen .hint { color: $text-muted; }
    EditValueScreen #error { color: $error; height: auto; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, value: str, validate: Callable[[str], object], hint: str = "",
                 warn: Callable[[object], str] | None = None) -> None:
        super().__init__()
        self._title = title
        self._value = value
        self._validate = validate
        self._hint = hint
        self._warn = warn             # a valid but implausible result: say so once, Enter again applies
        self._warned_for: str | None = None
        self._early: list[events.Key] = []    # keys that came before the input had focus
        self._ready = False

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = self._title
            if self._hint:
                yield Static(Text(self._hint), classes="hint")
            yield Input(value=self._value, id="value", select_on_focus=True)
            yield Static("", id="error")
            yield Label(Text("Enter apply · Escape cancel"), classes="hint")

    def on_mount(self) -> None:
        field = self.query_one(Input)
        field.cursor_blink = False
        field.focus()
        self.call_after_refresh(self._replay)

    def on_key(self, event: events.Key) -> None:
        if not self._ready and self.type_ahead(event):      # (before the input has focus)
            event.stop()
            event.prevent_default()

    def type_ahead(self, event: events.Key) -> bool:
        """A key typed before the input could take it (here, or on the screen this dialog covers):
        typed into the input once it has focus. Whether it was taken."""
        if not (event.is_printable or event.key in ("enter", "backspace")):
            return False
        self._early.append(event)
        if self._ready:
            self.call_later(self._replay)
        return True

    async def _replay(self) -> None:
        """Type the keys that came before the input had focus into it, as it would have."""
        self._ready = True
        field = self.query_one(Input)
        early, self._early = self._early, []
        for event in early:
            if event.key == "enter":
                await field.action_submit()
            elif event.key == "backspace":
                field.action_delete_left()
            elif event.character:
                if field.selection.is_empty:
                    field.insert_text_at_cursor(event.character)
                else:
                    field.replace(event.character, *field.selection)

    @property
    def error_text(self) -> str:
        return str(self.query_one("#error", Static).content)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_one("#error", Static).update("")
        self._warned_for = None

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            result = self._validate(event.value)
        except SpecError as error:
            if not event.value.strip():     # nothing typed yet: ask, do not report a refused edit
                self.query_one("#error", Static).update(Text("type a value first (Escape cancels)", style="yellow"))
                return
            self.query_one("#error", Static).update(Text(str(error)))
            self.post_message(EditRefused(str(error)))
            return
        except Exception as error:  # never let a bug in an edit crash the app
            self.query_one("#error", Static).update(Text(f"internal error (please report this): "
                                                         f"{type(error).__name__}: {error}"))
            return
        warning = self._warn(result) if self._warn is not None else ""
        if warning and self._warned_for != event.value:
            self._warned_for = event.value
            self.query_one("#error", Static).update(Text(warning + " Enter again to apply anyway.", style="yellow"))
            return
        self.dismiss(result)

    def action_cancel(self) -> None:
        self.dismiss(None)
