"""What `plan` runs, in one call shared by every front end: the exact search over the parts of the
cluster (idle nodes allowed: subclusters.py), then the post-pass over batch shares and per-stage
degrees (uneven.py), all ranked by one objective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import SearchResult
from amp_tui.core.search.subclusters import IdleSearch, search_parts
from amp_tui.core.search.uneven import UnevenSearch, improve
from amp_tui.core.spec.scenario import Scenario


@dataclass(frozen=True)
class Plans:
    result: SearchResult        # the ranking, with what the post-pass found
    idle_search: IdleSearch     # which parts of the cluster were searched, and how exactly
    uneven: UnevenSearch        # what the post-pass tried and added


def find_plans(scenario: Scenario, objective: Objective | None = None, *, top: int | None = None,
               should_cancel: Callable[[], bool] | None = None,
               progress: Callable[[float], None] | None = None) -> Plans:
    """The best `top` strategies for `scenario` by `objective`, as `amp-tui plan` ranks them."""
    result, idle_search = search_parts(scenario, objective, top=top, should_cancel=should_cancel, progress=progress)
    result, uneven = improve(scenario, result, objective)
    return Plans(result, idle_search, uneven)
