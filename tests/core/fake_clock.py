"""A clock the test controls, for the search's deadlines (amp_tui.core.search.deadline.now).

It moves only when the code under test reads it (`per_read` seconds a read) or polls it (`poll`,
passed as the search's should_cancel: `per_poll` seconds a poll). A limit of N x per_poll then
passes at the N-th poll on any machine, however loaded, and a test counts polls instead of
timing them. Wall-clock targets belong to `amp-tui bench`, not to tests."""

from __future__ import annotations

import pytest

from amp_tui.core.search import deadline


class FakeClock:
    def __init__(self, per_read: float = 0.0, per_poll: float = 0.0):
        self.t = 1000.0             # (any start: deadlines are relative to it)
        self.per_read, self.per_poll = per_read, per_poll
        self.reads = self.polls = 0

    def __call__(self) -> float:
        self.reads += 1
        self.t += self.per_read
        return self.t

    def poll(self) -> bool:
        """A should_cancel that never cancels: each call is one poll, and time moves on by per_poll."""
        self.polls += 1
        self.t += self.per_poll
        return False


def install(monkeypatch: pytest.MonkeyPatch, **kwargs) -> FakeClock:
    clock = FakeClock(**kwargs)
    monkeypatch.setattr(deadline, "clock_source", clock)
    return clock
