"""Suite-wide: the dashboard's snapshot tests run only on the textual version they were recorded
with (the one .ci/requirements.lock pins); SVGs change between textual releases, so on any other
version (a user's, or CI's lowest-versions pass) they skip and say so."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

import pytest

LOCK = Path(__file__).resolve().parent.parent / ".ci" / "requirements.lock"


def _locked_textual() -> str | None:
    if not LOCK.exists():
        return None
    found = re.search(r"^textual==(\S+)$", LOCK.read_text(), re.MULTILINE)
    return found.group(1) if found else None


def pytest_collection_modifyitems(items):
    locked, installed = _locked_textual(), version("textual")
    if locked is None or locked == installed:
        return
    skip = pytest.mark.skip(reason=f"snapshots are recorded with textual {locked} (.ci/requirements.lock); "
                                   f"this is textual {installed}")
    for item in items:
        if "snap_compare" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)
