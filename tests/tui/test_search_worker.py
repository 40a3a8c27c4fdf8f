"""The background search: errors are shown, never raised; the interface keeps working during a long search."""

from __future__ import annotations

import asyncio
import time

from textual.widgets import TabbedContent

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


async def test_keys_work_during_a_long_search_and_an_edit_cancels_it(make_app):
    app = make_app("bench-1024-gpus")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.3)
        status = app.query_one(StatusBar)
        assert status.state == "searching"
        # the event loop the app runs on keeps turning while the search thread works
        lags = []
        for _ in range(10):
            started = time.perf_counter()
            await asyncio.sleep(0.02)
            lags.append(time.perf_counter() - started - 0.02)
        assert max(lags) < 0.5, lags
        # the status line shows progress fed by the search's progress callback
        seen_progress = False
        for _ in range(200):
            if status.state != "searching":
                break
            seen_progress = seen_progress or status.fraction > 0
            if seen_progress:
                break
            await asyncio.sleep(0.05)
        assert seen_progress
        assert "searching" in str(status.render()) and "%" in str(status.render())
        # an edit cancels the running search; only the new generation reports
        app._preset_picked(("scenarios", "paper-homogeneous"))
        assert app._generation == 2
        await settle(app, pilot)
        assert app.applied_generations == [2]
        assert app.result.scenario is app.scenario and app.scenario.name == "paper-homogeneous"
        await pilot.press("3")
        assert app.query_one("#tabs", TabbedContent).active == "tab-training"
