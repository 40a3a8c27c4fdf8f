"""Fixtures for the dashboard's pilot and snapshot tests."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui.app import AmpApp


def new_app(preset: str = "paper-homogeneous", **kwargs) -> AmpApp:
    """AmpApp on a preset, with timings hidden and a short debounce so tests stay fast."""
    kwargs.setdefault("show_timings", False)
    kwargs.setdefault("debounce_s", 0.02)
    return AmpApp(load_scenario(preset), **kwargs)


@pytest.fixture
def make_app():
    return new_app


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


class SharedApp:
    """One app, started and settled once, for the tests of a module that only read it (a boot with its
    first search costs seconds each). The app runs in a task of this object's own event loop, which
    stays open between tests: a test using it runs in that loop, inside the app's context, as it would
    inside `async with app.run_test()`. A test that changes what others read must not use it."""

    def __init__(self, app, size: tuple[int, int]):
        self.app, self.loop = app, asyncio.new_event_loop()
        self._started: asyncio.Future = self.loop.create_future()
        self._done = asyncio.Event()

        async def hold() -> None:
            async with app.run_test(size=size) as pilot:
                await settle(app, pilot)
                self._started.set_result(pilot)
                await self._done.wait()
        self._task = self.loop.create_task(hold())
        self.loop.run_until_complete(asyncio.wait([self._started, self._task], return_when=asyncio.FIRST_COMPLETED))
        if not self._started.done():        # the start failed: its error
            try:
                self._task.result()
            finally:
                self.loop.close()
        self.pilot = self._started.result()

    def run(self, coroutine) -> None:
        with self.app._context():
            self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        self._done.set()
        try:
            self.loop.run_until_complete(self._task)
        finally:
            self.loop.close()


@pytest.fixture(scope="module")
def shared_app():
    """SharedApp(app, size), closed at the module's end: `shared_app(new_app(...), (160, 48))`. Mark
    the module with an xdist_group so that its tests share the app in one worker."""
    started: list[SharedApp] = []

    def start(app, size: tuple[int, int]) -> SharedApp:
        started.append(SharedApp(app, size))
        return started[-1]
    yield start
    for shared in started:
        shared.close()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run `async def` tests in a fresh event loop (the project adds no asyncio plugin for this), or in
    the loop of the SharedApp they take."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        shared = [value for value in arguments.values() if isinstance(value, SharedApp)]
        if shared:
            shared[0].run(pyfuncitem.obj(**arguments))
        else:
            asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
