"""Parsing and formatting of quantities with units.

Internally everything is SI base units: bytes, bytes per second, seconds, FLOP/s.
"""

from __future__ import annotations

import math
import re

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_BANDWIDTH, MAX_FIGURE, MAX_WHOLE_NUMBER, MIN_BANDWIDTH, check_figure

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z/]*)\s*$")

# Bandwidth units: an SI or binary prefix, then b (bits) or B (bytes), then "ps" or "/s".
# The case of b/B matters (100 Gb/s is 12.5 GB/s); prefixes are read in either case.
_BANDWIDTH_UNIT = re.compile(r"^([kKmMgGtT]?)(i?)([bB])(?:ps|/s)$")
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_BINARY_PREFIX = {"k": 2.0**10, "m": 2.0**20, "g": 2.0**30, "t": 2.0**40}
# Memory units in bytes. A bare number means bytes.
_BYTES = {
    "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_number(value: object, field: str, *, minimum: float | None = None, positive: bool = False,
                 integer: bool = False, maximum: float | None = None) -> float | int:
    """A finite number (YAML float, int, or numeric string), checked against the bounds and the
    representable range of limits.py."""
    if isinstance(value, bool) or value is None:
        raise SpecError(field, value, "expected a number")
    if isinstance(value, str):
        try:
            number: float = float(value.strip().replace("_", ""))
        except ValueError:
            raise SpecError(field, value, "expected a number") from None
    elif isinstance(value, int):
        if abs(value) > MAX_FIGURE:      # before float(), which a 400-digit integer overflows
            raise SpecError(field, value, f"too large (the limit is {MAX_FIGURE:g})")
        number = value
    elif isinstance(value, float):
        number = value
    else:
        raise SpecError(field, value, "expected a number")
    if not math.isfinite(number):
        raise SpecError(field, value, "expected a finite number")
    if integer:
        if number != int(number):
            raise SpecError(field, value, "expected a whole number")
        number = int(number)
    if positive and number <= 0:
        raise SpecError(field, value, "must be greater than 0")
    if minimum is not None and number < minimum:
        raise SpecError(field, value, f"must be at least {minimum:g}")
    if maximum is not None and number > maximum:
        raise SpecError(field, value, f"must be at most {maximum:,}" if integer else f"must be at most {maximum:g}")
    check_figure(number, field, value)
    return number


def parse_int(value: object, field: str, *, minimum: int = 1, maximum: int = MAX_WHOLE_NUMBER) -> int:
    return int(parse_number(value, field, integer=True, minimum=minimum, maximum=maximum))


_BANDWIDTH_NAMES = "Gbps, Gb/s, Mbps, Tbps, GB/s, GBps, MB/s, GiB/s"
_BYTES_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"


def _bandwidth_scale(unit: str) -> float | None:
    """Bytes per second in one `unit`, or None if it is not a bandwidth unit."""
    if unit.lower() == "gbps" and unit not in ("Gbps", "gbps", "GBps"):
        unit = "Gbps"  # 'GBPS', 'gBps'...: read as the common spelling, gigabits
    match = _BANDWIDTH_UNIT.match(unit)
    if not match:
        return None
    prefix, binary, bit = match.groups()
    if binary and not prefix:
        return None
    scale = _BINARY_PREFIX[prefix.lower()] if binary else _PREFIX[prefix.lower()]
    return scale / 8 if bit == "b" else scale


def _parse_quantity(value: object, field: str, table, default_unit: str,
                    kind: str, names: str, example: str, allow_zero: bool = False) -> float:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_FIGURE:
        raise SpecError(field, value, f"too large (the limit is {MAX_FIGURE:g})")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), default_unit
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if not match:
            raise SpecError(field, value, f"expected a {kind} like {example!r}")
        number, unit = float(match.group(1)), (match.group(2) or default_unit)
    else:
        raise SpecError(field, value, f"expected a {kind}")
    scale = table(unit) if callable(table) else table.get(unit.lower())
    if scale is None:
        raise SpecError(field, value, f"unknown unit {unit!r}; use one of {names}")
    if math.isnan(number) or number < 0 or (number == 0 and not allow_zero):
        raise SpecError(field, value, f"{kind} must be {'at least' if allow_zero else 'greater than'} 0")
    result = number * scale
    if kind == "bandwidth" and not MIN_BANDWIDTH <= result <= MAX_BANDWIDTH:
        raise SpecError(field, value, f"outside the range amp-tui plans for ({format_bandwidth(MIN_BANDWIDTH)} "
                                      f"to {format_bandwidth(MAX_BANDWIDTH)})")
    check_figure(result, field, value)
    return result


def parse_bandwidth(value: object, field: str) -> float:
    """Bandwidth in bytes per second. Accepts '50 Gbps', '25 GB/s', '400Mbps' or a bare number of Gbps."""
    return _parse_quantity(value, field, _bandwidth_scale, "Gbps", "bandwidth", _BANDWIDTH_NAMES, "50 Gbps")


def parse_bytes(value: object, field: str, allow_zero: bool = False) -> float:
    """Memory size in bytes. Accepts '16 GiB', '24 GB', '512 MiB' or a bare number of bytes."""
    return _parse_quantity(value, field, _BYTES, "b", "size", _BYTES_NAMES, "16 GiB", allow_zero)


def exact_bytes(num_bytes: float) -> str | float:
    """A size that parse_bytes reads back to exactly `num_bytes`: in GiB or MiB where that is
    exact and short, else the bare number of bytes."""
    return _shortest_exact(num_bytes, (("GiB", 2**30), ("MiB", 2**20), ("GB", 1e9), ("MB", 1e6)),
                           float(num_bytes))


def exact_bandwidth(bytes_per_s: float) -> str:
    """A bandwidth that parse_bandwidth reads back to exactly `bytes_per_s`."""
    return _shortest_exact(bytes_per_s, (("Gbps", 1e9 / 8), ("GB/s", 1e9), ("GiB/s", 2.0**30), ("Mbps", 1e6 / 8)),
                           f"{bytes_per_s!r} B/s")


def _shortest_exact(value: float, units: tuple, fallback):
    exact = []
    for unit, scale in units:
        text = repr(value / scale).removesuffix(".0")
        if float(text) * scale == value:
            exact.append(f"{text} {unit}")
    return min(exact, key=len) if exact else fallback


def format_bandwidth(bytes_per_s: float) -> str:
    gbps = bytes_per_s * 8 / 1e9
    return f"{gbps:g} Gbps" if gbps >= 1 else f"{gbps * 1000:g} Mbps" if gbps >= 1e-3 else f"{gbps * 1e6:g} kbps"


def format_bytes(num_bytes: float) -> str:
    """Binary units, three significant figures: '14.8 GiB'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(num_bytes) >= scale:
            return f"{_three_figures(num_bytes / scale)} {unit}"
    return f"{num_bytes:.0f} B"


def _three_figures(x: float) -> str:
    """1.23, 12.3, 123, 1023: never scientific notation."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


# Long times in the unit a person reads them in (an implausible input can predict years per step).
LONG_UNITS = (("years", 365.25 * 86400), ("days", 86400), ("h", 3600))


def format_long_seconds(seconds: float) -> str | None:
    """'5.2 h', '3.1 days', '8.73 years' from 2 hours up; None below (say it in seconds)."""
    for unit, scale in LONG_UNITS:
        if seconds >= 2 * scale:
            return f"{seconds / scale:.3g} {unit}"
    return None


def format_seconds(seconds: float) -> str:
    if (long := format_long_seconds(seconds)) is not None:
        return long
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"
