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
# The default limit gives way while nothing has been found: a loaded machine (or one slow core) can
# spend the 1.5 s before the first strategy, and an empty answer is worth less than a late one. So
# the search goes on to its first strategy, up to this long (plan: after the command's start; the
# 1,000-layer benchmark finds its first at 1.3 s of CPU from the start, 2.6 s at half a core).
DEFAULT_FIRST_STRATEGY_S = 8.0


# The clock every deadline of the search is read against (time.perf_counter()'s seconds). A test
# sets its own (tests/core/fake_clock.py) so that a limit passes after a set number of polls, not
# after a wall time the machine's load decides.
clock_source: Callable[[], float] = time.perf_counter


def now() -> float:
    return clock_source()


class OutOfTime(Cancelled):
    """The time limit passed (not the user's cancel): the search that set it keeps what it found."""


class Clock:
    """A deadline (now()'s seconds; inf: none) and the user's cancellation check; with
    a later `hard_deadline`, the deadline holds only once something has been found (`found`): until
    then the hard one does."""

    def __init__(self, time_limit_s: float | None = None, should_cancel: Callable[[], bool] | None = None,
                 deadline: float | None = None, hard_deadline: float | None = None):
        self.started = now()
        if deadline is None:
            deadline = self.started + time_limit_s if time_limit_s is not None else math.inf
        self.deadline = deadline
        self.hard = deadline if hard_deadline is None else max(deadline, hard_deadline)
        self.found = False      # set by the search once it holds a strategy
        self.user_cancel = should_cancel or (lambda: False)

    def expired(self) -> bool:
        """Whether the deadline has passed (the soft one, whether or not anything was found)."""
        return now() > self.deadline

    def over(self) -> bool:
        """Whether the limit that holds now has passed (the hard one while nothing is found)."""
        return now() > (self.deadline if self.found else self.hard)

    def left_s(self) -> float:
        return self.deadline - now()

    def poll(self) -> bool:
        """The cancellation check for the loops below: True when the user cancels; raises
        OutOfTime once the deadline has passed."""
        if self.user_cancel():
            return True
        if self.over():
            raise OutOfTime
        return False

    def user_poll(self) -> bool:
        """The user's cancellation check alone, for bounded work after a deadline."""
        return self.user_cancel()

    def within(self, share: float) -> Clock:
        """A clock for a step that may take `share` of the time left (the user's cancel and the
        hard deadline the same)."""
        left = self.deadline - now()
        return Clock(should_cancel=self.user_cancel, deadline=self.deadline if math.isinf(left)
                     else now() + max(left, 0.0) * share, hard_deadline=self.hard)
