"""Time limits hold: the search, the idle-node search, the post-pass and `plan` as a whole each stop
within TIME_LIMIT_SLACK_S of their deadline on a case built to take far longer, keep what they
found, and state a gap that is proven (the optimum is no better than the best found / (1 + gap)).
Where the search finishes within its limit, the ranking is the one without a limit."""

from __future__ import annotations

import time

import pytest

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.search.bench import TIME_LIMIT_SLACK_S
from amp_tui.core.search.deadline import Clock, OutOfTime
from amp_tui.core.search.planner import find_plans
from amp_tui.core.search.search import search
from amp_tui.core.search.subclusters import search_parts
from amp_tui.core.search.uneven import improve
from amp_tui.core.spec.scenario import load_scenario
from tests.core.core_builders import close

# Far beyond these limits without them: 2 to 4 s for the whole cluster's search on the
# development VM, 10 s and more for the idle search, 2 minutes for the post-pass before it polled.
SLOW = "bench-1024-gpus-1000-layers"
SIX_TYPES = "bench-1024-gpus-6-types"


def _timed(call):
    started = time.perf_counter()
    out = call()
    return out, time.perf_counter() - started


def test_clock_raises_out_of_time_a_kind_of_cancel():
    clock = Clock(time_limit_s=0.0)
    time.sleep(0.001)
    with pytest.raises(OutOfTime):
        clock.poll()
    assert issubclass(OutOfTime, Cancelled)       # every loop that polls stops on it
    assert Clock(time_limit_s=None).poll() is False
    assert Clock(time_limit_s=10.0, should_cancel=lambda: True).poll() is True


def test_search_stops_at_its_deadline():
    scenario = load_scenario(SLOW)
    limit = 0.3
    started = time.perf_counter()
    try:
        result = search(scenario, deadline=started + limit)
        assert result.stats.out_of_time and not result.stats.exact
    except OutOfTime:                   # (nothing settled by then)
        pass
    assert time.perf_counter() - started <= limit + TIME_LIMIT_SLACK_S


def test_search_cut_short_states_a_proven_gap():
    """Stopped at its first strategy, the best found lies within the stated gap of the optimum."""
    scenario = load_scenario("bench-1024-gpus")
    exact = search(scenario)
    assert exact.stats.exact and not exact.stats.out_of_time
    now = time.perf_counter()
    result = search(scenario, deadline=now, hard_deadline=now + 60.0)
    assert result.strategies and result.stats.out_of_time and not result.stats.exact
    best, optimum = result.strategies[0].iteration_time_s, exact.strategies[0].iteration_time_s
    gap = result.stats.orders_gap(best)
    assert 0 < gap < float("inf")
    assert best / (1 + gap) <= optimum * (1 + 1e-12) and optimum <= best * (1 + 1e-12)


def test_search_past_its_deadline_before_any_strategy_raises_out_of_time():
    with pytest.raises(OutOfTime):
        search(load_scenario(SLOW), deadline=time.perf_counter())


def test_a_soft_deadline_waits_for_the_first_strategy():
    """Past `deadline` with nothing found, the search goes on to `hard_deadline`."""
    scenario = load_scenario("bench-1024-gpus")
    now = time.perf_counter()
    result = search(scenario, deadline=now, hard_deadline=now + 30.0)
    assert result.strategies and result.stats.evaluated >= 1


@pytest.mark.parametrize("name", [SLOW, SIX_TYPES])
def test_plan_holds_its_time_limit_where_it_cannot_finish(name):
    scenario = load_scenario(name)
    limit = 0.8
    plans, elapsed = _timed(lambda: find_plans(scenario, time_limit_s=limit, first_strategy_limit_s=None))
    assert elapsed <= limit + TIME_LIMIT_SLACK_S
    assert plans.out_of_time and not plans.idle_search.exact and plans.overrun_s == 0
    assert plans.idle_search.note and "time" in plans.idle_search.note
    if plans.result.strategies:
        assert plans.idle_search.gap is not None and plans.idle_search.gap > 0


def test_idle_search_gap_is_proven():
    """Cut short, the idle search's best lies within its gap of the exact optimum."""
    scenario = load_scenario("bench-128-gpus")
    exact, info = search_parts(scenario)
    assert info.exact
    result, info = search_parts(scenario, deadline=time.perf_counter() + 0.03)
    if info.exact:
        return
    assert info.out_of_time
    if result.strategies:
        best, optimum = result.strategies[0].iteration_time_s, exact.strategies[0].iteration_time_s
        assert optimum <= best * (1 + 1e-12) and best / (1 + info.gap) <= optimum * (1 + 1e-12)


def test_post_pass_polls_inside_its_loops():
    """The post-pass on 1,000 layers took 2 minutes (its limit was checked between strategies
    only); given a deadline it stops there, says so and keeps the exact search's ranking."""
    scenario = load_scenario(SLOW)
    now = time.perf_counter()
    result = search(scenario, deadline=now, hard_deadline=now + 60.0)      # (its first strategy)
    assert result.strategies
    limit = 0.05
    (improved, uneven), elapsed = _timed(lambda: improve(scenario, result, deadline=time.perf_counter() + limit))
    assert elapsed <= limit + TIME_LIMIT_SLACK_S
    assert uneven.timed_out and "time limit" in uneven.note
    assert improved.strategies[0].iteration_time_s <= result.strategies[0].iteration_time_s


def test_cancel_stops_plan_whatever_its_limit():
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(Cancelled) as caught:
        find_plans(load_scenario("paper-het-cluster"), should_cancel=cancel, time_limit_s=60.0)
    assert not isinstance(caught.value, OutOfTime)


@pytest.mark.parametrize("name", ["paper-homogeneous", "paper-het-cluster", "paper-het-model", "bench-128-gpus"])
def test_rankings_within_a_limit_are_those_without_one(name):
    """A search that finishes within its time limit is exact and ranks as without one (the limit
    is far above what these take, so that a loaded machine does not reach it)."""
    scenario = load_scenario(name)
    limited = find_plans(scenario, time_limit_s=30.0)
    unlimited = find_plans(scenario, time_limit_s=None)
    assert not limited.out_of_time and limited.idle_search.exact and unlimited.idle_search.exact
    got = [(p.strategy, p.iteration_time_s) for p in limited.result.strategies]
    want = [(p.strategy, p.iteration_time_s) for p in unlimited.result.strategies]
    assert len(got) == len(want) and all(a == b and close(x, y) for (a, x), (b, y) in zip(got, want))


def test_a_default_limit_gives_way_until_a_first_strategy_is_found():
    """find_plans's default: a limit too short to find anything (start-up ate it on a loaded
    machine) extends to the first strategy, then holds: the answer comes with its proven gap and
    says how far past the limit it went."""
    scenario = load_scenario(SLOW)
    exact_best = 12.136         # the optimum (found without a limit; bench-1024-gpus-1000-layers)
    limit = 0.01
    plans, elapsed = _timed(lambda: find_plans(scenario, time_limit_s=limit))
    assert plans.result.strategies and plans.overrun_s > 0
    assert plans.overrun_s <= elapsed - limit + 1e-9
    best = plans.result.strategies[0].iteration_time_s
    assert plans.idle_search.gap is not None and best / (1 + plans.idle_search.gap) <= exact_best * (1 + 1e-4)
    assert plans.uneven.timed_out        # the post-pass had no time left: it tried nothing


def test_a_default_limit_gives_way_only_up_to_its_ceiling():
    scenario = load_scenario(SLOW)
    ceiling = 0.2
    plans, elapsed = _timed(lambda: find_plans(scenario, time_limit_s=0.01, first_strategy_limit_s=ceiling))
    assert elapsed <= ceiling + TIME_LIMIT_SLACK_S
    assert plans.out_of_time and not plans.idle_search.exact and not plans.result.strategies


def test_past_the_limit_the_search_stops_at_its_first_strategy():
    """Given way to, the limit holds again as soon as a strategy is in hand: plan searches no part
    and settles no candidate beyond the whole cluster's first strategy."""
    scenario = load_scenario(SLOW)
    now = time.perf_counter()
    # (plan's own search of the whole cluster, stopped at its first strategy)
    first = search_parts(scenario, deadline=now, hard_deadline=now + 60.0)[0].stats.evaluated
    plans = find_plans(scenario, time_limit_s=0.01, first_strategy_limit_s=60.0)
    assert plans.idle_search.searched == 1 and plans.result.stats.evaluated == first
    assert plans.result.strategies and plans.idle_search.cut_by == "time"
