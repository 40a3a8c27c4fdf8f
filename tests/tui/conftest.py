"""Fixtures for the dashboard's pilot and snapshot tests."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui.app import AmpApp


@pytest.fixture
def make_app():
    """AmpApp on a preset, with timings hidden and a short debounce so tests stay fast."""
    def make(preset: str = "paper-homogeneous", **kwargs) -> AmpApp:
        kwargs.setdefault("show_timings", False)
        kwargs.setdefault("debounce_s", 0.02)
        return AmpApp(load_scenario(preset), **kwargs)
    return make


async def settle(app, pilot) -> None:
    """Wait until every search has finished, its result is on screen and every table has measured
    its columns.

    `WorkerManager.wait_for_complete` raises WorkerCancelled for a search that an edit cancelled,
    which is the normal case here; wait on the workers' states instead. A DataTable measures its
    columns in its own idle handler, which a pause does not wait for (a screenshot taken before
    then shows truncated cells: 'bes' for 'best'). And a worker reads as finished before the
    message with its result has refilled the tables: the newest search's result must have been
    applied. So poll until several checks in a row, each after a pause, find no search running,
    the newest generation's result applied (or its search failed) and no table with pending updates.
    """
    from textual.widgets import DataTable
    from textual.worker import WorkerState

    def busy() -> bool:
        return (any(worker.state in (WorkerState.PENDING, WorkerState.RUNNING) for worker in app.workers)
                or (app._generation not in app.applied_generations[-1:] and app.status.state != "failed")
                or any(table._updated_cells or table._require_update_dimensions for table in app.query(DataTable)))

    quiet = 0
    for _ in range(3000):
        await pilot.pause(0.01)
        quiet = 0 if busy() else quiet + 1
        if quiet >= 3:
            break
    await pilot.pause()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run `async def` tests in a fresh event loop (the project adds no asyncio plugin for this)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
