"""Presets (ctrl+o), saving plans (ctrl+s), reopening them, exports (x) and infeasible strategies (f)."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from amp_tui.core.base.yamlio import load_yaml_file
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.tui.app import AmpApp, load_target
from amp_tui.tui.screens.confirm import ConfirmScreen
from amp_tui.tui.screens.preset_picker import PresetPickerScreen
from amp_tui.tui.screens.save_dialog import SaveDialog
from amp_tui.tui.widgets.selected_pane import SelectedPane
from amp_tui.tui.widgets.stage_bars import StageBars
from amp_tui.tui.widgets.strategy_table import StrategyTable

from .conftest import settle


async def pick_preset(app, pilot, words: str) -> None:
    await pilot.press("ctrl+o")
    await pilot.pause()
    assert isinstance(app.screen, PresetPickerScreen)
    app.screen.query_one(Input).value = words
    await pilot.pause()
    await pilot.press("enter")
    await pilot.pause()


async def test_cluster_preset_replaces_only_the_cluster(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        before = app.scenario
        await pick_preset(app, pilot, "cluster 2x-p4d+4x-g5")
        assert app.scenario.cluster.name == "2x-p4d+4x-g5.12xlarge"
        assert [g.instance for g in app.scenario.cluster.nodes] == ["p4d.24xlarge", "g5.12xlarge"]
        assert app.scenario.model == before.model
        assert app.scenario.training == before.training
        await settle(app, pilot)
        assert app.result.scenario is app.scenario
        await pick_preset(app, pilot, "model llama2-13b")
        assert app.scenario.model.name == "llama2-13b"
        assert app.scenario.cluster.name == "2x-p4d+4x-g5.12xlarge"
        await pilot.press("ctrl+z")
        assert app.scenario.model == before.model
        await settle(app, pilot)


async def test_scenario_preset_replaces_everything(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pick_preset(app, pilot, "scenario paper-het-model")
        assert app.scenario == load_scenario("paper-het-model")
        await settle(app, pilot)
        assert app.result.scenario is app.scenario
        # escape leaves everything as it was
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.scenario == load_scenario("paper-het-model")


async def test_save_plan_writes_a_plan_that_reopens(make_app, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        best = app.result.strategies[0]
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert isinstance(app.screen, SaveDialog)
        default = app.screen.query_one(Input).value
        assert default == f"paper-homogeneous-{best.strategy.label}.plan.yaml"
        await pilot.press("enter")
        await pilot.pause()
        path = tmp_path / default
        assert path.is_file()
        data = load_yaml_file(path)
        assert data["format"] == "amp-tui/plan/1"
        assert parse_scenario(data["scenario"]) == app.scenario
        assert data["strategy"]["tp"] == best.strategy.tp and data["strategy"]["dp"] == best.strategy.dp
        assert data["strategy"]["partition"] == list(best.strategy.partition)
        assert "iteration_time_s" in data["prediction"]
        original = path.read_text()

        # a second save to the same name asks first; "no" keeps the file
        table = app.query_one(StrategyTable).table
        table.focus()
        await pilot.press("down")
        await pilot.pause()
        assert app.selected_index == 1
        await pilot.press("ctrl+s")
        await pilot.pause()
        app.screen.query_one(Input).value = default
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert path.read_text() == original
        # "yes" overwrites
        await pilot.press("ctrl+s")
        await pilot.pause()
        app.screen.query_one(Input).value = default
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert path.read_text() != original
        second = app.result.strategies[1].strategy

    # `amp-tui ui PLAN` opens the plan's scenario with its strategy selected
    scenario, preferred = load_target(str(path))
    assert scenario == load_scenario("paper-homogeneous")
    assert (preferred.tp, preferred.pp, preferred.dp, preferred.micro_batch_size) == (
        second.tp, second.pp, second.dp, second.micro_batch_size)
    reopened = AmpApp(scenario, preferred=preferred, show_timings=False)
    async with reopened.run_test(size=(120, 40)) as pilot:
        await settle(reopened, pilot)
        assert reopened.selected_index == 1
        assert reopened.selected_prediction().strategy == second


async def test_save_refuses_missing_folder_inline(make_app, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("ctrl+s")
        await pilot.pause()
        app.screen.query_one(Input).value = "no/such/folder/x.plan.yaml"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, SaveDialog)
        assert "does not exist" in app.screen.error_text
        await pilot.press("escape")
        await pilot.pause()
        assert list(tmp_path.iterdir()) == []


async def test_infeasible_strategies_on_request(make_app):
    app = make_app("paper-het-model")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        result = app.result
        assert result.infeasible
        table = app.query_one(StrategyTable).table
        ranked = len(result.strategies) + 1   # and the uniform baseline's row
        assert table.row_count == ranked
        await pilot.press("f")
        await pilot.pause()
        assert table.row_count == ranked + len(result.infeasible)
        assert result.infeasible[0].reason in str(table.get_row_at(ranked)[-1])
        table.focus()
        table.move_cursor(row=ranked)
        await pilot.pause()
        summary = str(app.query_one(SelectedPane).query_one("#selected-summary").content)
        assert "infeasible" in summary and result.infeasible[0].reason in summary
        bars = app.query_one(SelectedPane).query_one(StageBars)   # the even split the reason describes
        assert bars.display and bars.prediction.strategy == result.infeasible[0].strategy
        assert not bars.prediction.fits_memory and "OVER by" in str(bars.render())
        await pilot.press("ctrl+s")  # nothing to save for an infeasible row
        await pilot.pause()
        assert not isinstance(app.screen, SaveDialog)
        await pilot.press("f")
        await pilot.pause()
        assert table.row_count == ranked
        assert app.selected_index == 0


async def test_export_shows_text_and_writes_files(make_app, tmp_path):
    pytest.importorskip("amp_tui.core.plans.exports")
    from textual.widgets import TextArea

    from amp_tui.tui.screens.export_picker import ExportScreen

    app = make_app("paper-het-cluster")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("x")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ExportScreen)
        assert "megatron_args.sh" in screen.query_one(TextArea).text
        await pilot.press("down", "down")
        await pilot.pause()
        assert screen.fmt == "torchrun" and "torchrun" in screen.query_one(TextArea).text
        await pilot.press("w")
        await pilot.pause()
        app.screen.query_one(Input).value = str(tmp_path / "out")
        await pilot.press("enter")
        await pilot.pause()
        assert (tmp_path / "out" / "launch.sh").is_file()
        await pilot.press("w")
        await pilot.pause()
        app.screen.query_one(Input).value = str(tmp_path / "out")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ExportScreen)
