"""The DataTable every pane uses: Textual's, with a stale-drawing bug mended."""

from __future__ import annotations

from textual.widgets import DataTable


class Table(DataTable):
    """A DataTable that redraws once it has measured new rows.

    Textual 8.2.8's DataTable measures added rows in its idle handler but keys its drawn lines by
    a counter that the measurement does not advance. Lines drawn between `add_row` and that
    handler (a repaint of the screen while the table is being refilled, likelier under load) keep
    the old, narrower columns until something else changes: 'bes' for 'best'. Advancing the
    counter after the measurement drops them (tests/tui/test_table.py shows the bug)."""

    def _update_dimensions(self, new_rows) -> None:
        super()._update_dimensions(new_rows)
        self._update_count += 1
        self.refresh()
