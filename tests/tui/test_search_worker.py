"""The background search: errors are shown, never raised; the interface keeps working during a long search."""

from __future__ import annotations

import asyncio
import threading

from textual.widgets import TabbedContent

from amp_tui.core.base.errors import Cancelled
from amp_tui.tui import app as app_module
from amp_tui.tui.widgets.status_bar import StatusBar

from .conftest import settle


async def test_search_error_is_shown_not_raised(make_app, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("cost model exploded [bold]")

    monkeypatch.setattr(app_module, "find_plans", broken)   # what the dashboard searches with
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        status = app.query_one(StatusBar)
        assert status.state == "failed"
        assert "cost model exploded [bold]" in status.error or "exploded" in str(status.render())
        assert app.result is None
        await pilot.press("ctrl+o")  # still responsive
        await pilot.pause()
        await pilot.press("escape")


async def test_keys_work_during_a_long_search_and_an_edit_cancels_it(make_app, monkeypatch):
    """The event loop the app runs on keeps turning while the search thread works: the search's
    polls and the loop's turns interleave (counted, not timed). The search is held open at its end,
    still polling, so that a fast machine finishing it early changes nothing: the edit cancels it."""
    events: list[str] = []          # 'poll' (search thread) and 'turn' (event loop), in order
    real = app_module.find_plans

    def held(scenario, *args, should_cancel, **kwargs):
        if scenario.name != "bench-1024-gpus":
            return real(scenario, *args, should_cancel=should_cancel, **kwargs)

        def poll() -> bool:
            events.append("poll")
            return should_cancel()
        real(scenario, *args, should_cancel=poll, **kwargs)
        while not should_cancel():      # (as a search still running would: only a cancel ends it)
            threading.Event().wait(0.01)
        raise Cancelled

    monkeypatch.setattr(app_module, "find_plans", held)
    app = make_app("bench-1024-gpus")
    async with app.run_test(size=(120, 40)) as pilot:
        status = app.query_one(StatusBar)
        seen_progress = False
        for _ in range(10_000):         # (a bound on turns, not a time: it ends far sooner)
            await asyncio.sleep(0.01)
            events.append("turn")
            seen_progress = seen_progress or (status.state == "searching" and status.fraction > 0
                                              and "%" in str(status.render()))
            if seen_progress and _alternations(events) >= 10:
                break
        assert seen_progress and _alternations(events) >= 10
        assert status.state == "searching"
        # an edit cancels the running search; only the new generation reports
        app._preset_picked(("scenarios", "paper-homogeneous"))
        assert app._generation == 2
        await settle(app, pilot)
        assert app.applied_generations == [2]
        assert app.result.scenario is app.scenario and app.scenario.name == "paper-homogeneous"
        await pilot.press("3")
        assert app.query_one("#tabs", TabbedContent).active == "tab-training"


def _alternations(events: list[str]) -> int:
    """How many times the sequence switches from the search's polls to the loop's turns and back."""
    return sum(1 for a, b in zip(events, events[1:]) if a != b)
