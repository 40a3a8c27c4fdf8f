"""units.py: bandwidths and sizes with units, and the one-line errors for bad ones."""

import pytest

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import parse_bandwidth, parse_bytes, parse_int, parse_number


@pytest.mark.parametrize("text, bytes_per_s", [
    ("50 Gbps", 50e9 / 8),
    ("25 GB/s", 25e9),
    ("400Mbps", 400e6 / 8),
    ("10 gbps", 10e9 / 8),
    ("1 Tbps", 1e12 / 8),
    ("2 GiB/s", 2 * 2**30),
    (" 170 Gbps ", 170e9 / 8),
    ("1.5e2 Gbps", 150e9 / 8),
    (50, 50e9 / 8),          # a bare number is Gbps
    (12.5, 12.5e9 / 8),
    ("100", 100e9 / 8),
])
def test_bandwidth(text, bytes_per_s):
    assert parse_bandwidth(text, "link") == pytest.approx(bytes_per_s, rel=1e-12)


@pytest.mark.parametrize("text, num_bytes", [
    ("16 GiB", 16 * 2**30),
    ("512 MiB", 512 * 2**20),
    ("24 GB", 24e9),
    ("1.5 KiB", 1536),
    ("1 TiB", 2**40),
    ("4096", 4096),
    (4096, 4096),            # a bare number is bytes
])
def test_bytes(text, num_bytes):
    assert parse_bytes(text, "memory") == pytest.approx(num_bytes, rel=1e-12)


BAD = [
    "-5 Gbps",     # negative
    "0 Gbps",      # zero
    0,
    -3,
    "5 furlongs",  # unknown unit
    "fast",        # garbage
    "5 Gbps extra",
    "",
    True,          # a YAML boolean is not a number
    None,
    [50],
    "nan Gbps",
]


def _check_one_line(err: SpecError, field: str, value) -> None:
    text = str(err)
    assert "\n" not in text
    assert err.field == field
    assert text.startswith(f"{field}: ")
    if value is None:       # nothing given: the line says what is needed, never "None" (issue 28, minor 17)
        assert text == f"{field}: {err.reason}" and "None" not in text
        return
    shown = repr(value) if isinstance(value, str) else str(value)
    assert shown in text


@pytest.mark.parametrize("value", BAD)
def test_bad_bandwidth(value):
    with pytest.raises(SpecError) as info:
        parse_bandwidth(value, "cluster.nodes[0].intra_node_bandwidth")
    _check_one_line(info.value, "cluster.nodes[0].intra_node_bandwidth", value)


@pytest.mark.parametrize("value", [v.replace("Gbps", "GiB") if isinstance(v, str) else v for v in BAD])
def test_bad_bytes(value):
    with pytest.raises(SpecError) as info:
        parse_bytes(value, "gpu.memory")
    _check_one_line(info.value, "gpu.memory", value)


def test_error_with_a_multiline_value_stays_on_one_line():
    with pytest.raises(SpecError) as info:
        parse_bandwidth("50\nGbps please", "link")
    assert "\n" not in str(info.value)
    assert info.value.field == "link"


def test_unknown_unit_lists_the_known_ones():
    with pytest.raises(SpecError) as info:
        parse_bandwidth("5 furlongs", "link")
    assert "Gbps" in str(info.value) and "furlongs" in str(info.value)


def test_gigabits_per_second_written_with_a_slash_is_not_gigabytes():
    try:
        value = parse_bandwidth("100 Gb/s", "link")
    except SpecError:
        return
    assert value == pytest.approx(100e9 / 8)


def test_gigabytes_per_second_without_slash_is_not_gigabits():
    try:
        value = parse_bandwidth("25 GBps", "link")
    except SpecError:
        return
    assert value == pytest.approx(25e9)


@pytest.mark.parametrize("value, expected", [(3, 3), ("7", 7), (4.0, 4), ("1_000", 1000)])
def test_parse_int(value, expected):
    assert parse_int(value, "n") == expected


@pytest.mark.parametrize("value", [0, -1, 2.5, "two", True, None, float("inf"), "nan"])
def test_parse_int_rejects(value):
    with pytest.raises(SpecError) as info:
        parse_int(value, "training.global_batch_size")
    assert info.value.field == "training.global_batch_size"
    assert "\n" not in str(info.value)


def test_parse_number_bounds():
    assert parse_number(0, "x", minimum=0) == 0
    with pytest.raises(SpecError):
        parse_number(0, "x", positive=True)
    with pytest.raises(SpecError):
        parse_number(-1e-9, "x", minimum=0)
