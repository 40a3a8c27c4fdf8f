"""Short human formats for table cells (the core's units module has the precise ones)."""

from __future__ import annotations

from amp_tui.core.base.units import format_bandwidth, format_bytes, format_long_seconds

__all__ = ["format_bandwidth", "format_bytes", "format_seconds", "format_count", "format_flops",
           "format_ratio"]


def format_count(value: float) -> str:
    """Parameters and the like: '345 M', '12.6 M', '1.3 B', '512'."""
    return _scaled(value, (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)))


def format_flops(value: float) -> str:
    """FLOPs (a count, not a rate): '30.1 G', '2.1 M'."""
    return _scaled(value, (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)))


def _scaled(value: float, units: tuple[tuple[str, float], ...]) -> str:
    for unit, scale in units:
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f}"


def format_seconds(seconds: float) -> str:
    """Three significant figures, trailing zeros kept so figures side by side read alike ('1.10 s'
    beside '1.17 s'); zero is '0 s' whatever the scale."""
    if seconds == 0:
        return "0 s"
    if (long := format_long_seconds(seconds)) is not None:
        return long
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale or unit == "µs":
            value = seconds / scale
            return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:#.3g}".rstrip(".") + f" {unit}"
    raise AssertionError("unreachable")


def format_ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def format_memory_pair(used_bytes: float, capacity_bytes: float, *, short: bool = False) -> str:
    """'9.8/14.6 GiB' (short: '9.8/14.6G'): used against capacity in the capacity's unit."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if capacity_bytes >= scale:
            return f"{used_bytes / scale:.1f}/{capacity_bytes / scale:.1f}" + (unit[0] if short else f" {unit}")
    return f"{format_bytes(used_bytes)}/{format_bytes(capacity_bytes)}"


def cell(text: str, *, style: str = "", justify: str = "left") -> "Text":
    """A table cell with one leading space: tables run with cell_padding=0 to fit 80 columns."""
    from rich.text import Text

    return Text(" " + text, style=style, justify=justify)  # type: ignore[arg-type]
