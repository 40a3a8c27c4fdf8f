"""Time limits for what `plan` runs: one clock shared by the whole-cluster search, the parts of the
cluster and the post-pass, polled inside their loops as the user's cancellation check is.

A search past its deadline stops where it is and keeps what it found, with what it proved about the
rest (the lowest bound of what it left unsettled); a cancelled one stops without a result. So the
check raises OutOfTime, a kind of Cancelled: every loop that polls a cancellation check stops on it
without knowing why, and the search that set the deadline catches it and returns what it has.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from amp_tui.core.base.errors import Cancelled

DEFAULT_TIME_LIMIT_S = 1.5   # `plan`'s default for everything it searches: with start-up, 2 s of wall
DEFAULT_WALL_S = 1.8         # ... and at most this long after the command started (a 1,000-layer file
MIN_DEFAULT_S = 0.5          # takes 0.3 s to read), but never less than this


class OutOfTime(Cancelled):
    """The time limit passed (not the user's cancel): the search that set it keeps what it found."""


class Clock:
    """A deadline (time.perf_counter() seconds; inf: none) and the user's cancellation check."""

    def __init__(self, time_limit_s: float | None = None, should_cancel: Callable[[], bool] | None = None,
                 deadline: float | None = None):
        self.started = time.perf_counter()
        if deadline is None:
            deadline = self.started + time_limit_s if time_limit_s is not None else math.inf
        self.deadline = deadline
        self.user_cancel = should_cancel or (lambda: False)

    def expired(self) -> bool:
        return time.perf_counter() > self.deadline

    def left_s(self) -> float:
        return self.deadline - time.perf_counter()

    def poll(self) -> bool:
        """The cancellation check for the loops below: True when the user cancels; raises
        OutOfTime once the deadline has passed."""
        if self.user_cancel():
            return True
        if time.perf_counter() > self.deadline:
            raise OutOfTime
        return False

    def user_poll(self) -> bool:
        """The user's cancellation check alone, for bounded work after a deadline."""
        return self.user_cancel()

    def within(self, share: float) -> Clock:
        """A clock for a step that may take `share` of the time left (the user's cancel the same)."""
        left = self.deadline - time.perf_counter()
        return Clock(should_cancel=self.user_cancel, deadline=self.deadline if math.isinf(left)
                     else time.perf_counter() + max(left, 0.0) * share)
