"""Keys typed ahead of the edit dialog: `e` then a value and Enter, in one read of the terminal (or
on a loaded machine), reach the app before the dialog exists. Each is sent to the widget focused
when it came in, on the screen the dialog then covers; back at the app no binding there takes it
and it was dropped, so '8' Enter applied the old value. Here a key that comes back from a screen
an edit dialog now covers is typed into the dialog instead."""

from __future__ import annotations

from collections import deque

from textual import events

from amp_tui.tui.screens.edit_value import EditValueScreen


class TypeAhead:
    """Mixed into AmpApp (app.py), before textual's App."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._key_screens: deque = deque(maxlen=32)     # (key event, the screen it came in on)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded:
            self._key_screens.append((event, self.screen))
        await super().on_event(event)

    def _on_key(self, event: events.Key) -> None:
        came_in_on = next((screen for key, screen in self._key_screens if key is event), None)
        if came_in_on is not None and came_in_on is not self.screen and isinstance(self.screen, EditValueScreen):
            event.prevent_default()         # (not the app's bindings: it was typed for the dialog)
            event.stop()
            self.screen.type_ahead(event)
