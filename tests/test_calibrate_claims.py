"""What a calibration claims (issue 34, minor): a band only where the runs can measure one, a
warning where the runs disagree with each other, and `validate --runs` reading calibrate's own
measurements file. Each failed before its fix: 4 runs fitting 12 parameters showed a +-1% band,
runs 80% off after the fit wrote calibrated.yaml without a word, and validate refused the file."""

from __future__ import annotations

import math

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.calibration import calibrate as calibration
from amp_tui.core.calibration.calibrate import calibrate, calibrated_uncertainty, scenario_parameters
from amp_tui.core.calibration.measurements import Measurement
from amp_tui.core.plans.confidence import confidence
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.params import prior
from amp_tui.core.spec.scenario import load_scenario

SCENARIO = "paper-homogeneous"


def every_parameter_predictor(scenario):
    """The real prediction, moved by every parameter of the scenario (each with its own weight), so
    that any run informs all of them: the fit has as many parameters as calibrate can give it."""
    names = scenario_parameters(scenario)
    weights = {name: 0.05 * (1 + i % 5) for i, name in enumerate(names)}
    cache = {}

    def predict(values, run):
        if run.strategy not in cache:
            cache[run.strategy] = evaluate(scenario, run.strategy)
        p = cache[run.strategy]
        scale = math.exp(sum(w * (values[n] - prior(n)[0]) / (abs(prior(n)[0]) + 0.01) * (1 + run.index % 3)
                             for n, w in weights.items()))
        return p.iteration_time_s * scale, p.peak_memory_bytes
    return predict


def runs(scenario, factors: list[float]) -> list[Measurement]:
    found = search(scenario, top=len(factors)).strategies
    return [Measurement(i, p.strategy, p.iteration_time_s * f) for i, (p, f) in enumerate(zip(found, factors))]


def test_fewer_runs_than_fitted_parameters_claim_no_band_and_say_so(monkeypatch):
    monkeypatch.setattr(calibration, "scenario_predictor", every_parameter_predictor)
    scenario = load_scenario(SCENARIO)
    result = calibrate(scenario, runs(scenario, [1.30, 1.32, 1.29]))
    fitted = sum(1 for p in result.fit.parameters if p.fitted)
    assert fitted > 3
    assert result.scenario.calibration.loo_log_sd is None and calibrated_uncertainty(result.scenario) is None
    assert any(note.startswith(f"3 timed runs for {fitted} fitted parameters") for note in result.notes)
    sure = confidence(result.scenario)
    assert "calibrated from too few runs" in sure.source
    assert sure.band == confidence(scenario).band       # the published runs' band, not a narrower one


def test_runs_that_disagree_with_each_other_get_a_warning(monkeypatch, tmp_path, capsys):
    scenario = load_scenario(SCENARIO)
    consistent = calibrate(scenario, runs(scenario, [1.3, 1.31, 1.29, 1.3]), leave_one_out=False)
    assert not any(note.startswith("warning") for note in consistent.notes)
    wild = runs(scenario, [0.4, 5.0, 1.0, 0.25])
    path = tmp_path / "runs.yaml"
    path.write_text(dump_yaml([{**m.strategy.to_dict(), "iteration_time_s": m.iteration_time_s} for m in wild]))
    code = main(["calibrate", SCENARIO, str(path), "-o", str(tmp_path / "c.yaml")])
    out = capsys.readouterr().out
    assert code == 0 and "note: warning: these runs disagree with each other" in out


def test_validate_replays_calibrates_own_measurements_file(tmp_path, capsys):
    scenario = load_scenario(SCENARIO)
    measured = runs(scenario, [1.2, 1.25, 1.3])
    path = tmp_path / "mine.yaml"
    path.write_text(dump_yaml([{**m.strategy.to_dict(), "iteration_time_s": m.iteration_time_s} for m in measured]))
    assert main(["validate", "--runs", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scenario" in err
    assert main(["validate", "--runs", str(path), "--scenario", SCENARIO, "--json"]) == 0
    import json

    report = json.loads(capsys.readouterr().out)
    row = report["sources"]["mine"]
    assert row["replayed"] == 3
    assert 0.15 < row["mape"] < 0.25          # predicted 1/1.2 .. 1/1.3 of the measured times
