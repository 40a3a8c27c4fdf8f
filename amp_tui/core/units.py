"""Parsing and formatting of quantities with units.

Internally everything is SI base units: bytes, bytes per second, seconds, FLOP/s.
"""

from __future__ import annotations

import math
import re

from amp_tui.core.errors import SpecError

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z/]*)\s*$")

# Bandwidth units in bytes per second. A bare number means Gbps.
_BANDWIDTH = {
    "bps": 1 / 8, "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8, "tbps": 1e12 / 8,
    "b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
    "kib/s": 2**10, "mib/s": 2**20, "gib/s": 2**30,
}
# Memory units in bytes. A bare number means bytes.
_BYTES = {
    "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_number(value: object, field: str, *, minimum: float | None = None,
                 positive: bool = False, integer: bool = False) -> float | int:
    """A finite number (YAML float, int, or numeric string), checked against the bounds."""
    if isinstance(value, bool) or value is None:
        raise SpecError(field, value, "expected a number")
    if isinstance(value, str):
        try:
            number: float = float(value.strip().replace("_", ""))
        except ValueError:
            raise SpecError(field, value, "expected a number") from None
    elif isinstance(value, (int, float)):
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
    return number


def parse_int(value: object, field: str, *, minimum: int = 1) -> int:
    return int(parse_number(value, field, integer=True, minimum=minimum))


_BANDWIDTH_NAMES = "Gbps, Mbps, Tbps, GB/s, MB/s, GiB/s"
_BYTES_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"


def _parse_quantity(value: object, field: str, table: dict[str, float], default_unit: str,
                    kind: str, names: str, example: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number, unit = float(value), default_unit
    elif isinstance(value, str):
        match = _QUANTITY.match(value)
        if not match:
            raise SpecError(field, value, f"expected a {kind} like {example!r}")
        number, unit = float(match.group(1)), (match.group(2) or default_unit)
    else:
        raise SpecError(field, value, f"expected a {kind}")
    scale = table.get(unit.lower())
    if scale is None:
        raise SpecError(field, value, f"unknown unit {unit!r}; use one of {names}")
    if not math.isfinite(number) or number <= 0:
        raise SpecError(field, value, f"{kind} must be greater than 0")
    return number * scale


def parse_bandwidth(value: object, field: str) -> float:
    """Bandwidth in bytes per second. Accepts '50 Gbps', '25 GB/s', '400Mbps' or a bare number of Gbps."""
    return _parse_quantity(value, field, _BANDWIDTH, "gbps", "bandwidth", _BANDWIDTH_NAMES, "50 Gbps")


def parse_bytes(value: object, field: str) -> float:
    """Memory size in bytes. Accepts '16 GiB', '24 GB', '512 MiB' or a bare number of bytes."""
    return _parse_quantity(value, field, _BYTES, "b", "size", _BYTES_NAMES, "16 GiB")


def format_bandwidth(bytes_per_s: float) -> str:
    gbps = bytes_per_s * 8 / 1e9
    return f"{gbps:g} Gbps" if gbps >= 1 else f"{gbps * 1000:g} Mbps"


def format_bytes(num_bytes: float) -> str:
    """Binary units, three significant figures: '14.8 GiB'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(num_bytes) >= scale:
            return f"{_three_figures(num_bytes / scale)} {unit}"
    return f"{num_bytes:.0f} B"


def _three_figures(x: float) -> str:
    """1.23, 12.3, 123, 1023: never scientific notation."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def format_seconds(seconds: float) -> str:
    if seconds >= 100:
        return f"{seconds:.0f} s"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"
