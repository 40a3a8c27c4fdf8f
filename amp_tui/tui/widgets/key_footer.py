"""A one-line footer of the active key bindings, drawn as text.

Textual's Footer rebuilds a widget per key on every focus change, which costs about half a second
per keypress on a small machine with this many bindings; this draws the same keys as one line of
text. The help and command palette keys stay at the right edge.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget


class KeyFooter(Widget):
    DEFAULT_CSS = """
    KeyFooter { height: 1; background: $footer-background; color: $footer-foreground; }
    """

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def _bindings_changed(self, screen) -> None:
        if self.is_attached and screen is self.screen:
            self.call_after_refresh(self.refresh)

    def render(self) -> Text:
        width = self.content_size.width
        palette = Text()
        keys = Text(no_wrap=True, overflow="ellipsis")
        seen: set[str] = set()
        key_style = "bold reverse"
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            display = self.app.get_key_display(binding)
            # Help and the palette stay at the right edge, whatever the width: they lead to every other key.
            if binding.key == self.app.COMMAND_PALETTE_BINDING or (binding.action == "help" and binding.show):
                palette = Text.assemble((f" {display} ", key_style), f"{binding.description or 'palette'} ", palette)
                continue
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            keys.append(f" {display} ", style=key_style if enabled else "dim reverse")
            keys.append(f"{binding.description} ", style="" if enabled else "dim")
        if width and palette.cell_len and keys.cell_len + palette.cell_len > width:
            keys.truncate(max(0, width - palette.cell_len), overflow="ellipsis")
        if width and palette.cell_len:
            keys.pad_right(max(0, width - keys.cell_len - palette.cell_len))
        keys.append_text(palette)
        return keys
