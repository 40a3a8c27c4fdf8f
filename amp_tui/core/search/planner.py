"""What `plan` runs, in one call shared by every front end: the exact search over the parts of the
cluster (idle nodes allowed: subclusters.py), then the post-pass over batch shares and per-stage
degrees (uneven.py), all ranked by one objective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amp_tui.core.search.deadline import DEFAULT_FIRST_STRATEGY_S, DEFAULT_TIME_LIMIT_S, Clock, now
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import SearchResult
from amp_tui.core.search.subclusters import IdleSearch, search_parts
from amp_tui.core.search.uneven import UnevenSearch, improve
from amp_tui.core.search.work import work_for
from amp_tui.core.spec.scenario import Scenario

POST_PASS_SHARE = 0.15    # of the time limit (and of the work budget), kept for the post-pass over shares and per-stage degrees
AUTO = "auto"             # find_plans's work budget: the time limit's (work.work_for), none without one


@dataclass(frozen=True)
class Plans:
    result: SearchResult        # the ranking, with what the post-pass found
    idle_search: IdleSearch     # which parts of the cluster were searched, and how exactly
    uneven: UnevenSearch        # what the post-pass tried and added
    time_limit_s: float | None = None   # what it was given (None: none)
    overrun_s: float = 0.0      # how long past time_limit_s it ran to find a first strategy (0: it did not)

    @property
    def out_of_time(self) -> bool:
        """Whether the time limit cut the exact search short (its gap is idle_search.gap)."""
        return self.idle_search.out_of_time


def find_plans(scenario: Scenario, objective: Objective | None = None, *, top: int | None = None,
               should_cancel: Callable[[], bool] | None = None,
               progress: Callable[[float], None] | None = None,
               time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
               first_strategy_limit_s: float | None = DEFAULT_FIRST_STRATEGY_S,
               work: float | str | None = AUTO,
               improved: Callable[[SearchResult], None] | None = None) -> Plans:
    """The best `top` strategies for `scenario` by `objective`, as `amp-tui plan` ranks them.

    `time_limit_s` bounds all of it (None: no limit but each step's own; see search_parts and
    improve): the exact search gets all but POST_PASS_SHARE of it, and stops with the best found
    and a proven gap if it runs out; the post-pass gets what is left, at least POST_PASS_SHARE.
    While nothing has been found, the limit is `first_strategy_limit_s` instead (when later; None:
    time_limit_s holds whatever was found): an answer a little late beats none, and
    Plans.overrun_s says how late. `should_cancel` is polled inside every loop beneath (Cancelled
    is raised); `progress` gets the exact search's rising fraction, `improved` its ranking so far
    whenever its best improves.

    `work` (work units, work.py; by default the time limit's, work_for) bounds the searches the
    same way on every machine, so that the same input gives the same answer: the exact search
    gets all but POST_PASS_SHARE of it (its seeds whatever it is), the post-pass what is left, at
    least POST_PASS_SHARE. The time limit stays as the safety net behind it (the answer says
    which cut the search)."""
    started = now()
    if work == AUTO:
        work = work_for(time_limit_s) if time_limit_s is not None else None
    hard = None if time_limit_s is None or first_strategy_limit_s is None else started + first_strategy_limit_s
    clock = Clock(time_limit_s, should_cancel, hard_deadline=hard)
    exact = clock.within(1.0 - POST_PASS_SHARE) if time_limit_s is not None else None
    result, idle_search = search_parts(scenario, objective, top=top, should_cancel=should_cancel, progress=progress,
                                       deadline=exact.deadline if exact else None, hard_deadline=hard,
                                       work=None if work is None else (1.0 - POST_PASS_SHARE) * work,
                                       improved=improved)
    post_work = None if work is None else max(work - idle_search.work, POST_PASS_SHARE * work)
    result, uneven = improve(scenario, result, objective, should_cancel=should_cancel,
                             deadline=clock.deadline if time_limit_s is not None else None, work=post_work)
    overrun_s = max(now() - clock.deadline, 0.0) if idle_search.overran_s > 0 else 0.0
    return Plans(result, idle_search, uneven, time_limit_s, overrun_s)
