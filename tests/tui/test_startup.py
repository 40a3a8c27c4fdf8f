"""Start-up: the dashboard opens on the preset and shows the first results."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from amp_tui.tui.app import AmpApp, load_target
from amp_tui.tui.widgets.status_bar import StatusBar
from amp_tui.tui.widgets.strategy_table import StrategyTable

from .conftest import new_app, settle

pytestmark = pytest.mark.xdist_group("tui-startup")      # one worker: its tests share one app


@pytest.fixture(scope="module")
def home(shared_app):
    """The dashboard on the default preset at 120 x 40, for the tests that read it (and close what they open)."""
    return shared_app(new_app(), (120, 40))


async def test_first_results_are_shown(home):
    app = home.app
    assert app.result is not None
    assert app.result.scenario is app.scenario
    assert not app.results_stale
    table = app.query_one(StrategyTable).table
    assert table.row_count == len(app.result.strategies) + 1 == 11   # the uniform baseline too
    status = app.query_one(StatusBar)
    assert status.state == "done"
    assert "done in" not in str(status.render())  # search timings hidden for tests
    assert app.applied_generations == [1]


async def test_compact_layout_uses_tabs_and_switches_on_resize(make_app):
    app = make_app()         # its own app: it resizes the terminal
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        assert app.compact
        await pilot.press("4")
        await pilot.pause()
        assert isinstance(app.focused, DataTable) and app.focused.id == "strategies"
        await pilot.resize_terminal(130, 42)
        await pilot.pause()
        await pilot.pause()
        assert not app.compact
        # the recomposed panes show the current state again
        assert app.query_one(StrategyTable).table.row_count == 11


def test_load_target_defaults_to_paper_homogeneous():
    scenario, preferred = load_target(None)
    assert scenario.name == "paper-homogeneous"
    assert scenario.cluster.nodes[0].instance == "g4dn.12xlarge"
    assert preferred is None


def test_load_target_rejects_unknown_name():
    from amp_tui.core.base.errors import SpecError
    with pytest.raises(SpecError):
        load_target("no-such-preset")


async def test_help_and_palette_open(home):
    app, pilot = home.app, home.pilot
    await pilot.press("question_mark")
    await pilot.pause()
    assert type(app.screen).__name__ == "HelpScreen"
    await pilot.press("escape")
    await pilot.pause()
    assert type(app.screen).__name__ != "HelpScreen"
    commands = [command.title for command in app.get_system_commands(app.screen)]
    for title in ("Undo last edit (ctrl+z)", "Open preset (ctrl+o)", "Save plan (ctrl+s)", "Export (x)",
                  "Show / hide infeasible strategies (f)", "Help (?)"):
        assert title in commands
    assert isinstance(app, AmpApp)
