"""For every test: the search's time limits (plan's default 1.5 s, the idle search's and the
post-pass's own, the what-ifs') are read against a clock the test controls, which moves
SEARCH_TICK_S at each read. A limit then cuts a search after a set amount of its work, the same on
every machine and at every load: a ranking never depends on how busy the machine was. At 0.1 ms a
read the default limit allows about 15,000 reads, more than any scenario the tests rank in full
needs (bench-1024-gpus: ~10,700; the paper's: 500 to 1,500). A test that is about time limits
installs its own (tests/core/fake_clock.py); wall-clock targets are `amp-tui bench`'s."""

from __future__ import annotations

import pytest

import amp_tui.cli
from tests.core.fake_clock import install

SEARCH_TICK_S = 1e-4


@pytest.fixture(autouse=True)
def search_clock(monkeypatch):
    clock = install(monkeypatch, per_read=SEARCH_TICK_S)
    monkeypatch.setattr(amp_tui.cli, "STARTED_S", clock.t)    # a command run in the test starts now
    return clock
