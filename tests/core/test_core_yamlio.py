"""yamlio.py: scientific notation loads as floats, malformed YAML names line and column, atomic writes."""

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import atomic_write, dump_yaml, load_yaml_file, load_yaml_text


@pytest.mark.parametrize("text, value", [
    ("2.5e10", 2.5e10),
    ("1e6", 1e6),
    ("-3E-4", -3e-4),
    ("+7e+2", 700.0),
    ("1.5", 1.5),
    (".5", 0.5),
])
def test_scientific_notation_loads_as_float(text, value):
    data = load_yaml_text(f"x: {text}\n")
    assert isinstance(data["x"], float)
    assert data["x"] == value


def test_plain_scalars_keep_their_types():
    data = load_yaml_text("a: 12\nb: abc\nc: true\nd: 1e6x\ne: '1e6'\n")
    assert data == {"a": 12, "b": "abc", "c": True, "d": "1e6x", "e": "1e6"}
    assert isinstance(data["a"], int)


def test_malformed_yaml_names_line_and_column():
    with pytest.raises(SpecError) as info:
        load_yaml_text("a: 1\nb: [1, 2\nc: 3\n", "plan.yaml")
    err = info.value
    assert err.field == "plan.yaml (line 3, column 2)"          # where, in the field; not as the value
    assert err.value == "c: 3"                                   # the line it stopped at
    assert "\n" not in str(err)
    assert "malformed YAML" in str(err)


def test_malformed_yaml_line_number_is_the_bad_line():
    with pytest.raises(SpecError) as info:
        load_yaml_text("ok: 1\nalso: 2\n  bad: indentation: here\n")
    assert "line 3" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_yaml_file(tmp_path / "nope.yaml")
    assert info.value.field == "file" and "nope.yaml" in str(info.value)


def test_a_long_path_is_shown_whole(tmp_path):
    """Values are cut to 60 characters in errors, but a cut path does not say which file."""
    path = tmp_path / ("a-folder-with-a-long-name-" * 3) / "scenario-that-is-not-there.yaml"
    with pytest.raises(SpecError) as info:
        load_yaml_file(path)
    assert len(str(path)) > 60 and str(path) in str(info.value) and "\n" not in str(info.value)


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(SpecError) as info:
        load_yaml_file(tmp_path)
    assert info.value.field == "file"


def _leftovers(folder, name):
    return [p for p in os.listdir(folder) if p != name]


def test_atomic_write_writes_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "out.yaml"
    atomic_write(target, "a: 1\n")
    assert target.read_text() == "a: 1\n"
    atomic_write(target, "a: 2\n")            # overwrite by default
    assert target.read_text() == "a: 2\n"
    assert _leftovers(tmp_path, "out.yaml") == []


def test_atomic_write_refuses_existing_file_when_told(tmp_path):
    target = tmp_path / "plan.yaml"
    target.write_text("precious\n")
    with pytest.raises(SpecError) as info:
        atomic_write(target, "clobbered\n", overwrite=False)
    assert info.value.field == "file"
    assert "already exists" in str(info.value)
    assert target.read_text() == "precious\n"
    assert _leftovers(tmp_path, "plan.yaml") == []


def test_atomic_write_new_file_without_overwrite(tmp_path):
    target = tmp_path / "new.yaml"
    atomic_write(target, "x: 1\n", overwrite=False)
    assert target.read_text() == "x: 1\n"
    assert _leftovers(tmp_path, "new.yaml") == []


def test_atomic_write_into_missing_folder(tmp_path):
    with pytest.raises(SpecError) as info:
        atomic_write(tmp_path / "missing" / "out.yaml", "x: 1\n")
    assert info.value.field == "file"
    assert not (tmp_path / "missing").exists()


def test_atomic_write_cleans_up_when_writing_fails(tmp_path):
    target = tmp_path / "out.yaml"
    with pytest.raises(UnicodeEncodeError):
        atomic_write(target, "bad surrogate \udc80\n")
    assert os.listdir(tmp_path) == []


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False))
def test_float_round_trip(value):
    loaded = load_yaml_text(dump_yaml({"x": value, "nested": [value]}))
    assert isinstance(loaded["x"], float)
    assert loaded["x"] == value and loaded["nested"] == [value]
    assert math.copysign(1, loaded["x"]) == math.copysign(1, value)


@pytest.mark.parametrize("value", [1e16, 2.5e10, 1e-7, 5e-324, 1.7976931348623157e308, 3.0, -0.0])
def test_float_round_trip_examples(value):
    text = dump_yaml({"x": value})
    assert load_yaml_text(text)["x"] == value
    assert "'" not in text  # a float is written as a number, not a quoted string


def test_nested_round_trip():
    data = {"name": "plan", "sizes": [1, 2.5e10, 1e-3], "on": True, "map": {"a": None}}
    assert load_yaml_text(dump_yaml(data)) == data
