"""Time limits hold: the search, the idle-node search, the post-pass and `plan` as a whole each stop
at their deadline on a case built to take far longer, keep what they found, and state a gap that
is proven (the optimum is no better than the best found / (1 + gap)). Where the search finishes
within its limit, the ranking is the one without a limit.

No test here reads the machine's clock: the search's deadlines are read against a clock the test
controls (fake_clock.py), which moves one tick a poll. A limit of N ticks then passes at the N-th
poll, so "it stops at its deadline" is "it polls no more than N + 1 times (and a bounded wrap-up
polled for the user's cancel alone)", on any machine. How long a poll takes in seconds is what
`amp-tui bench` times, against its targets."""

from __future__ import annotations

import pytest

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.search.deadline import Clock, OutOfTime
from amp_tui.core.search.planner import find_plans
from amp_tui.core.search.search import search
from amp_tui.core.search.subclusters import search_parts
from amp_tui.core.search.uneven import improve
from amp_tui.core.spec.scenario import load_scenario
from tests.core.core_builders import close
from tests.core.fake_clock import install

# Far beyond these limits without them: the whole cluster's search polls about 1,500 times before
# its first strategy on SLOW, and tens of thousands of times in full; the post-pass about 700.
SLOW = "bench-1024-gpus-1000-layers"
SIX_TYPES = "bench-1024-gpus-6-types"
TICK = 1e-3         # the fake clock's seconds a poll
# After the poll past the deadline, bounded work polled for the user's cancel alone (the list of
# candidates that do not fit, the floors of the orders left out): a handful of polls, not a search.
WRAP_UP_POLLS = 20


@pytest.fixture
def clock(monkeypatch):
    return install(monkeypatch, per_poll=TICK)


def test_clock_raises_out_of_time_a_kind_of_cancel(clock):
    timer = Clock(time_limit_s=1.0)
    clock.t += 1.0
    assert timer.poll() is False           # at the deadline, not past it
    clock.t += TICK
    with pytest.raises(OutOfTime):
        timer.poll()
    assert issubclass(OutOfTime, Cancelled)       # every loop that polls stops on it
    assert Clock(time_limit_s=None).poll() is False
    assert Clock(time_limit_s=10.0, should_cancel=lambda: True).poll() is True


@pytest.mark.parametrize("polls", [1, 300])
def test_search_stops_at_its_deadline_before_its_first_strategy(clock, polls):
    """Past its deadline with nothing found (SLOW's first strategy takes ~1,500 polls), the search
    raises OutOfTime at the first poll past it."""
    with pytest.raises(OutOfTime):
        search(load_scenario(SLOW), deadline=clock.t + polls * TICK, should_cancel=clock.poll)
    assert clock.polls == polls + 1


def test_search_stops_at_its_deadline_with_what_it_found(clock):
    polls = 2000
    result = search(load_scenario(SLOW), deadline=clock.t + polls * TICK, should_cancel=clock.poll)
    assert result.strategies and result.stats.out_of_time and not result.stats.exact
    assert polls < clock.polls <= polls + 1 + WRAP_UP_POLLS


def test_search_cut_short_states_a_proven_gap(clock):
    """Stopped at its first strategy, the best found lies within the stated gap of the optimum."""
    scenario = load_scenario("bench-1024-gpus")
    exact = search(scenario)
    assert exact.stats.exact and not exact.stats.out_of_time
    result = search(scenario, deadline=clock.t, hard_deadline=clock.t + 1e6, should_cancel=clock.poll)
    assert result.strategies and result.stats.out_of_time and not result.stats.exact
    best, optimum = result.strategies[0].iteration_time_s, exact.strategies[0].iteration_time_s
    gap = result.stats.orders_gap(best)
    assert 0 < gap < float("inf")
    assert best / (1 + gap) <= optimum * (1 + 1e-12) and optimum <= best * (1 + 1e-12)


def test_search_past_its_deadline_before_any_strategy_raises_out_of_time(clock):
    with pytest.raises(OutOfTime):
        search(load_scenario(SLOW), deadline=clock.t, should_cancel=clock.poll)
    assert clock.polls == 1


def test_a_soft_deadline_waits_for_the_first_strategy(clock):
    """Past `deadline` with nothing found, the search goes on to `hard_deadline`."""
    result = search(load_scenario("bench-1024-gpus"), deadline=clock.t, hard_deadline=clock.t + 1e6,
                    should_cancel=clock.poll)
    assert result.strategies and result.stats.evaluated >= 1


@pytest.mark.parametrize("name", [SLOW, SIX_TYPES])
def test_plan_holds_its_time_limit_where_it_cannot_finish(clock, name):
    limit = 0.8         # 800 polls
    plans = find_plans(load_scenario(name), time_limit_s=limit, first_strategy_limit_s=None,
                       should_cancel=clock.poll)
    assert clock.polls <= round(limit / TICK) + 1 + WRAP_UP_POLLS
    assert plans.out_of_time and not plans.idle_search.exact and plans.overrun_s == 0
    assert plans.idle_search.note and "time" in plans.idle_search.note
    if plans.result.strategies:
        assert plans.idle_search.gap is not None and plans.idle_search.gap > 0


def test_idle_search_gap_is_proven(clock):
    """Cut short, the idle search's best lies within its gap of the exact optimum."""
    scenario = load_scenario("bench-128-gpus")
    exact, info = search_parts(scenario)
    assert info.exact
    result, info = search_parts(scenario, deadline=clock.t + 300 * TICK, should_cancel=clock.poll)
    assert info.out_of_time and not info.exact and result.strategies    # (it finishes at ~850 polls)
    best, optimum = result.strategies[0].iteration_time_s, exact.strategies[0].iteration_time_s
    assert optimum <= best * (1 + 1e-12) and best / (1 + info.gap) <= optimum * (1 + 1e-12)


@pytest.fixture(scope="module")
def slow_first_strategy():
    """SLOW's whole-cluster search stopped at its first strategy (the post-pass's input)."""
    return search(load_scenario(SLOW), deadline=-1.0, hard_deadline=float("inf"))


@pytest.mark.parametrize("polls", [1, 300, 600])     # in its shares (to ~490), in its per-stage layouts
def test_post_pass_polls_inside_its_loops(clock, slow_first_strategy, polls):
    """The post-pass on 1,000 layers took 2 minutes (its limit was checked between strategies
    only): given a deadline it stops at the first poll past it, wherever that falls (a full pass
    polls ~700 times, ~210 of them in the best strategy's per-stage layouts), says so and keeps the
    exact search's ranking. It polls more often than it starts a unit of work."""
    scenario, result = load_scenario(SLOW), slow_first_strategy
    improved, uneven = improve(scenario, result, deadline=clock.t + polls * TICK, should_cancel=clock.poll)
    assert clock.polls == polls + 1
    assert uneven.timed_out and "time limit" in uneven.note
    assert uneven.shares_tried + uneven.layouts_tried < polls
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
def test_rankings_within_a_limit_are_those_without_one(monkeypatch, name):
    """A search that finishes within its time limit is exact and ranks as without one (the clock
    stands still: the limit is never reached, however long the search takes)."""
    install(monkeypatch)
    scenario = load_scenario(name)
    limited = find_plans(scenario, time_limit_s=1.5)
    unlimited = find_plans(scenario, time_limit_s=None)
    assert not limited.out_of_time and limited.idle_search.exact and unlimited.idle_search.exact
    got = [(p.strategy, p.iteration_time_s) for p in limited.result.strategies]
    want = [(p.strategy, p.iteration_time_s) for p in unlimited.result.strategies]
    assert len(got) == len(want) and all(a == b and close(x, y) for (a, x), (b, y) in zip(got, want))


def test_a_default_limit_gives_way_until_a_first_strategy_is_found(clock):
    """find_plans's default: a limit too short to find anything (start-up ate it on a loaded
    machine) extends to the first strategy, then holds: the answer comes with its proven gap and
    says how far past the limit it went."""
    scenario = load_scenario(SLOW)
    exact_best = 12.136         # the optimum (found without a limit; bench-1024-gpus-1000-layers)
    limit, started = 0.01, clock.t
    plans = find_plans(scenario, time_limit_s=limit, should_cancel=clock.poll)
    assert plans.result.strategies and plans.overrun_s > 0
    assert plans.overrun_s <= clock.t - started - limit + 1e-9
    best = plans.result.strategies[0].iteration_time_s
    assert plans.idle_search.gap is not None and best / (1 + plans.idle_search.gap) <= exact_best * (1 + 1e-4)
    assert plans.uneven.timed_out        # the post-pass had no time left: it tried nothing


def test_a_default_limit_gives_way_only_up_to_its_ceiling(clock):
    ceiling = 0.2       # 200 polls: SLOW's first strategy takes ~1,500
    plans = find_plans(load_scenario(SLOW), time_limit_s=0.01, first_strategy_limit_s=ceiling,
                       should_cancel=clock.poll)
    assert clock.polls <= round(ceiling / TICK) + 1 + WRAP_UP_POLLS
    assert plans.out_of_time and not plans.idle_search.exact and not plans.result.strategies


def test_past_the_limit_the_search_stops_at_its_first_strategy(clock):
    """Given way to, the limit holds again as soon as a strategy is in hand: plan searches no part
    and settles no candidate beyond the whole cluster's first strategy."""
    scenario = load_scenario(SLOW)
    # (plan's own search of the whole cluster, stopped at its first strategy)
    first = search_parts(scenario, deadline=clock.t - 1.0, hard_deadline=clock.t + 60.0)[0].stats.evaluated
    plans = find_plans(scenario, time_limit_s=0.01, first_strategy_limit_s=1e6, should_cancel=clock.poll)
    assert plans.idle_search.searched == 1 and plans.result.stats.evaluated == first
    assert plans.result.strategies and plans.idle_search.cut_by == "time"
