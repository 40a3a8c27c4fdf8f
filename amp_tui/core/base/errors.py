"""The one error type a user ever sees: a bad field, its value, and what is allowed."""

from __future__ import annotations

import os
import reprlib


class SpecError(ValueError):
    """Invalid user input. `str()` is a single line naming the field and the value."""

    def __init__(self, field: str, value: object, reason: str):
        self.field = one_line(field)      # a field path can hold a key the user wrote
        self.value = value
        self.reason = one_line(reason)
        # No value (a missing field) is not shown as "None", which reads as if the user wrote it.
        super().__init__(f"{self.field}: {self.reason}" if value is None else
                         f"{self.field}: {_show(value)}: {self.reason}")

    def within(self, prefix: str) -> "SpecError":
        """The same error with its field placed under `prefix` (e.g. `cluster.nodes[1]`)."""
        field = f"{prefix}.{self.field}" if self.field else prefix
        return SpecError(field, self.value, self.reason)


def _show(value: object) -> str:
    """The value on one line, cut to 60 characters; a file path is shown whole (a cut path helps
    nobody find the file)."""
    if isinstance(value, os.PathLike):
        return repr(os.fspath(value))
    # Bounded in depth and breadth: a value built from YAML aliases can be small in memory and
    # astronomically long when written out.
    text = repr(value[:200]) if isinstance(value, str) else _SHORT.repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def one_line(text: str, limit: int = 300) -> str:
    """`text` with unprintable characters escaped (a line break as \\n), cut to `limit`."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 3, 8, 8, 60, 60, 60


class Cancelled(Exception):
    """A long computation's cancellation check turned true; it stopped without a result."""
