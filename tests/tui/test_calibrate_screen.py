"""The Calibrate action (C): load a measurements file, fit in a worker, show the fit, apply it."""

from __future__ import annotations

from textual.widgets import Button, DataTable, Input

from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.calibration import calibrate as calibration
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.tui.screens.calibrate import CalibrateScreen

from .conftest import settle


def stand_in_predictor(scenario):
    """A prediction that slows with a lower T4 compute efficiency, whatever the cost model does today."""
    def predict(values, run):
        prediction = evaluate(scenario, run.strategy)
        return prediction.iteration_time_s / values["compute_efficiency.T4"], prediction.peak_memory_bytes
    return predict


def runs_file(tmp_path, scenario) -> str:
    runs = [{**p.strategy.to_dict(), "iteration_time_s": p.iteration_time_s * 1.3}
            for p in search(scenario, top=3).strategies]
    path = tmp_path / "runs.yaml"
    path.write_text(dump_yaml(runs))
    return str(path)


async def wait_for_fit(app, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_calibrate_fits_shows_and_applies(make_app, tmp_path, monkeypatch):
    monkeypatch.setattr(calibration, "scenario_predictor", stand_in_predictor)
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        before = app.scenario
        await pilot.press("C")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CalibrateScreen)
        assert screen.query_one("#apply", Button).disabled
        screen.query_one(Input).value = runs_file(tmp_path, before)
        await pilot.press("enter")
        await wait_for_fit(app, pilot)
        assert screen.result is not None, screen.status_text
        parameters = screen.query_one("#parameters", DataTable)
        assert [str(parameters.get_cell_at((r, 0))) for r in range(parameters.row_count)] == ["compute_efficiency.T4"]
        assert float(str(parameters.get_cell_at((0, 2)))) < 0.85     # measured 1.3x slower
        assert screen.query_one("#runs", DataTable).row_count == 3
        assert "parameters fitted to 3 runs" in screen.status_text
        await pilot.click("#apply")
        await pilot.pause()
        assert not isinstance(app.screen, CalibrateScreen)
        assert app.scenario.calibration.values and app.scenario.calibration == screen.result.scenario.calibration
        assert app.scenario.model == before.model and app.scenario.cluster == before.cluster
        await settle(app, pilot)
        assert app.result.scenario is app.scenario
        await pilot.press("ctrl+z")                       # undo takes the calibration off again
        assert app.scenario == before
        await settle(app, pilot)


async def test_calibrate_shows_a_bad_file_and_changes_nothing(make_app, tmp_path):
    app = make_app()
    bad = tmp_path / "runs.yaml"
    bad.write_text("- {tp: 1, pp: 4, dp: 4, micro_batch_size: 2, iteration_time_s: abc}\n")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        before = app.scenario
        await pilot.press("C")
        await pilot.pause()
        screen = app.screen
        screen.query_one(Input).value = str(bad)
        await pilot.press("enter")
        await wait_for_fit(app, pilot)
        assert "measurements[0].iteration_time_s: 'abc': expected a number" in screen.status_text
        assert screen.query_one("#apply", Button).disabled
        screen.query_one(Input).value = str(tmp_path / "missing.yaml")
        await pilot.press("enter")
        await wait_for_fit(app, pilot)
        assert "no such file" in screen.status_text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CalibrateScreen)
        assert app.scenario == before
