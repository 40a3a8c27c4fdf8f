"""`amp-tui calibrate`: the fit recovers known parameters, --suggest picks well-conditioned runs,
every bad measurements file gets one line and exit status 2, and a calibrated scenario travels
through files, plans and `evaluate`.

Recovery is tested twice. `synthetic_predict` below is an analytic stand-in for the cost model,
written here and fully under the test's control, so the fit and --suggest are checked whatever
the cost model does. The tests marked `needs_wired_model` generate measurements from the real
model (core.evaluate) at known parameter values; they run as soon as the cost model reads the
scenario's calibration (the `_model_reads_parameters` probe) and skip until then.
"""

from __future__ import annotations

import json
import math
import os
import random
import stat
from dataclasses import replace

import numpy as np
import pytest

from amp_tui.cli import main
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file
from amp_tui.core.calibration import calibrate as calibration
from amp_tui.core.calibration.calibrate import (
    calibrate,
    calibrated_uncertainty,
    current_values,
    fit,
    information_log_det,
    scenario_parameters,
    suggest,
    suggest_measurements,
    with_values,
)
from amp_tui.core.calibration.measurements import Measurement, load_measurements, measurements_yaml, parse_measurements
from amp_tui.core.plans.planfile import load_plan, save_plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.params import Calibration, bounds, prior
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy

# -- a synthetic model: 16 T4 GPUs over PCIe inside 4 nodes and Ethernet between them --------------

GBS, LAYERS, FLOPS, TP_BYTES, PARAMS, ACTIVATIONS = 64, 24, 6e12, 2e8, 3.5e8, 2e8
NAMES = ["compute_efficiency.T4", "link_efficiency.pcie", "link_efficiency.ethernet", "link_latency_s.pcie",
         "link_latency_s.ethernet", "layer_floor_s", "micro_batch_overhead_s", "iteration_overhead_s",
         "memory_fragmentation"]
# The truth sits as far from the defaults (the priors) as it was designed to before the defaults were
# fitted to the published runs (links 0.625 and 0.64 of them, latencies and fixed costs 1.5 to 2.7
# times), so refitting the defaults does not move the test.
TRUE = {"compute_efficiency.T4": 0.7, "link_efficiency.pcie": 0.625 * prior("link_efficiency.pcie")[0],
        "link_efficiency.ethernet": 0.643 * prior("link_efficiency.ethernet")[0],
        "link_latency_s.pcie": 2.0 * prior("link_latency_s.pcie")[0],
        "link_latency_s.ethernet": 1.67 * prior("link_latency_s.ethernet")[0],
        "layer_floor_s": 1.5 * prior("layer_floor_s")[0],
        "micro_batch_overhead_s": 2.67 * prior("micro_batch_overhead_s")[0],
        "iteration_overhead_s": 2.5 * prior("iteration_overhead_s")[0], "memory_fragmentation": 0.15}


def synthetic_predict(v: dict[str, float], m: Measurement) -> tuple[float, float]:
    """A 1F1B pipeline of tensor-parallel stages with a data-parallel all-reduce, in the named terms."""
    s = m.strategy
    B = GBS // (s.dp * s.micro_batch_size)
    stage = (FLOPS * s.micro_batch_size / (s.tp * s.pp * 32e12 * v["compute_efficiency.T4"])
             + v["layer_floor_s"] * LAYERS / s.pp + v["micro_batch_overhead_s"])
    if s.tp > 1:
        stage += (TP_BYTES * s.micro_batch_size * 2 * (s.tp - 1) / s.tp / (16e9 * v["link_efficiency.pcie"])
                  + 8 * LAYERS / s.pp * (s.tp - 1) * v["link_latency_s.pcie"])
    if s.pp > 1:
        stage += 2e6 * s.micro_batch_size / (6.25e9 * v["link_efficiency.ethernet"]) + v["link_latency_s.ethernet"]
    seconds = (B + s.pp - 1) * stage + v["iteration_overhead_s"]
    if s.dp > 1:
        seconds += (4 * (s.dp - 1) / s.dp * PARAMS / (s.tp * s.pp) / (6.25e9 * v["link_efficiency.ethernet"])
                    + 2 * (s.dp - 1) * v["link_latency_s.ethernet"])
    memory = (16 * PARAMS / (s.tp * s.pp) + ACTIVATIONS * s.micro_batch_size * min(s.pp, B) / s.tp) \
        * (1 + v["memory_fragmentation"]) + 1e9
    return seconds, memory


def grid() -> list[Measurement]:
    """Every (tp, pp, dp, micro-batch size) of 16 GPUs, as runs with nothing measured yet."""
    runs = []
    for tp in (1, 2, 4):
        for pp in (1, 2, 4, 8, 16):
            if 16 % (tp * pp) == 0 and GBS % (16 // (tp * pp)) == 0:
                for mbs in (1, 2, 4, 8):
                    if GBS % (16 // (tp * pp) * mbs) == 0:
                        runs.append(Measurement(len(runs), Strategy(tp, pp, 16 // (tp * pp), mbs)))
    return runs


def measure(runs: list[Measurement], noise: float, seed: int = 0, truth: dict = TRUE) -> list[Measurement]:
    """The runs 'measured' on the synthetic model at `truth`, with log-normal noise on time and memory."""
    rng = random.Random(seed)
    out = []
    for i, run in enumerate(runs):
        seconds, memory = synthetic_predict(truth, run)
        out.append(replace(run, index=i, iteration_time_s=seconds * math.exp(rng.gauss(0, noise)),
                           peak_memory_bytes=memory * math.exp(rng.gauss(0, noise))))
    return out


def log_error(values: dict, runs: list[Measurement]) -> float:
    """Mean |log(predicted / true)| of iteration time over `runs`."""
    return float(np.mean([abs(math.log(synthetic_predict(values, r)[0] / synthetic_predict(TRUE, r)[0]))
                          for r in runs]))


def test_fit_recovers_known_parameters_from_noisy_synthetic_measurements():
    runs = grid()
    measured = measure(random.Random(1).sample(runs, 12), noise=0.02)
    result = fit(measured, synthetic_predict, NAMES)
    after = {p.name: p.after for p in result.parameters}
    # The parameters these runs weigh heavily come back within a few percent of the truth ...
    for name in ("compute_efficiency.T4", "link_efficiency.pcie"):
        assert after[name] == pytest.approx(TRUE[name], rel=0.08), name
    assert 1 + after["memory_fragmentation"] == pytest.approx(1 + TRUE["memory_fragmentation"], rel=0.03)
    # ... and the model predicts every one of the 47 strategies, measured or not, far better.
    defaults = {n: prior(n)[0] for n in NAMES}
    assert log_error(defaults, runs) > 0.25
    assert log_error(after, runs) < 0.04
    assert result.residual_log_sd < 0.04
    assert [p.before for p in result.parameters] == [defaults[n] for n in NAMES]
    assert all(bounds(p.name)[0] <= p.after <= bounds(p.name)[1] for p in result.parameters)


def test_few_runs_stay_physical_and_near_the_priors():
    """Four runs cannot pin nine parameters: the priors hold what the runs do not inform."""
    measured = measure(grid()[::12], noise=0.03, seed=2)
    assert len(measured) == 4
    result = fit(measured, synthetic_predict, NAMES)
    for p in result.parameters:
        lower, upper = bounds(p.name)
        assert lower <= p.after <= upper
        default, sigma = prior(p.name)
        shift = 0.05 * default if lower == 0 else 0.0
        assert abs(math.log((p.after + shift) / (default + shift))) < 3 * sigma, p.name
    assert result.residual_log_sd < 0.1


def test_one_bad_run_does_not_drag_the_fit():
    measured = measure(random.Random(1).sample(grid(), 12), noise=0.02)
    clean = fit(measured, synthetic_predict, NAMES, leave_one_out=False)
    measured[3] = replace(measured[3], iteration_time_s=measured[3].iteration_time_s * 3)  # a mistyped time
    robust = fit(measured, synthetic_predict, NAMES, leave_one_out=False)
    assert robust.values["compute_efficiency.T4"] == pytest.approx(clean.values["compute_efficiency.T4"], rel=0.03)
    # Plain least squares would be off by 14% on average over every strategy (measured: 0.14).
    assert log_error(robust.values, grid()) < 0.05
    residuals = [abs(r.residual) for r in robust.runs]
    assert max(residuals) == residuals[3] and residuals[3] > 0.8   # the bad run stands out


def test_leave_one_out_errors_cover_every_timed_run():
    measured = measure(random.Random(3).sample(grid(), 8), noise=0.03)
    measured[5] = replace(measured[5], iteration_time_s=None, out_of_memory=True)
    result = fit(measured, synthetic_predict, NAMES)
    errors = [r.loo_error for r in result.runs]
    assert errors[5] is None and result.runs[5].residual is None
    assert all(e is not None for i, e in enumerate(errors) if i != 5)
    # A run left out of the fit is predicted worse than when it was in it.
    assert result.loo_log_sd > result.residual_log_sd
    assert result.loo_log_sd == pytest.approx(math.sqrt(np.mean([e * e for e in errors if e is not None])))


def test_parameters_the_runs_cannot_move_are_not_fitted():
    names = NAMES + ["link_efficiency.nvlink"]        # the synthetic model has no NVLink
    measured = measure(grid()[::5], noise=0.02)
    result = fit(measured, synthetic_predict, names, start={"link_efficiency.nvlink": 0.6}, leave_one_out=False)
    nvlink = result.parameters[-1]
    assert not nvlink.fitted and nvlink.sensitivity == pytest.approx(0, abs=1e-12) and nvlink.before == nvlink.after == 0.6
    assert "link_efficiency.nvlink" not in result.values


def test_nothing_to_fit_is_an_error():
    with pytest.raises(SpecError, match="nothing to fit"):
        fit(measure(grid()[:3], 0.0), lambda values, run: (1.0, 1e9), NAMES)


# -- choosing what to measure -------------------------------------------------------------------------

def test_suggested_runs_pin_the_parameters_better_than_random_runs():
    candidates = grid()
    picked = suggest(candidates, synthetic_predict, NAMES, 5)
    assert len(set(picked.chosen)) == 5
    names = list(picked.names)
    chosen = information_log_det(picked.slopes[list(picked.chosen)], names)
    rng = random.Random(0)
    random_sets = [information_log_det(picked.slopes[rng.sample(range(len(candidates)), 5)], names)
                   for _ in range(30)]
    assert chosen > max(random_sets)
    strategies = [candidates[i].strategy for i in picked.chosen]
    for field in ("tp", "pp", "dp", "micro_batch_size"):
        assert len({getattr(s, field) for s in strategies}) >= 2, field


def test_suggested_runs_make_the_fit_recover_the_truth():
    """Five suggested runs, measured, are enough to predict every strategy closely."""
    candidates = grid()
    picked = suggest(candidates, synthetic_predict, NAMES, 5)
    result = fit(measure([candidates[i] for i in picked.chosen], noise=0.02), synthetic_predict, NAMES,
                 leave_one_out=False)
    assert log_error({p.name: p.after for p in result.parameters}, candidates) < 0.05


def test_without_information_suggestions_are_cheap_and_spread():
    """A model no parameter moves (the state before the cost model reads them): spread and price decide."""
    candidates = grid()
    times = {c.index: 1.0 + c.strategy.tp + c.strategy.micro_batch_size / 10 for c in candidates}
    picked = suggest(candidates, lambda values, run: (times[run.index], 1e9), NAMES, 4)
    assert picked.names == ()
    strategies = [candidates[i].strategy for i in picked.chosen]
    assert times[picked.chosen[0]] == min(times.values())
    assert len({s.tp for s in strategies}) >= 2 and len({s.micro_batch_size for s in strategies}) >= 2


def test_suggest_measurements_on_a_scenario_writes_a_file_to_fill_in(tmp_path):
    scenario = load_scenario("paper-het-cluster")
    picked = suggest_measurements(scenario, 4)
    assert len(picked) == 4
    strategies = [m.strategy for m, _, _ in picked]
    assert len(set(strategies)) == 4
    for (m, seconds, peak), n in zip(picked, range(4)):
        assert m.index == n and m.iteration_time_s is None
        prediction = evaluate(scenario, m.strategy)
        assert prediction.fits_memory and prediction.iteration_time_s == pytest.approx(seconds)
    path = tmp_path / "runs.yaml"
    path.write_text(measurements_yaml([m for m, _, _ in picked]))
    again = parse_measurements(load_yaml_file(path), scenario, blank_ok=True)
    assert [m.strategy for m in again] == strategies
    with pytest.raises(SpecError, match=r"measurements\[0\]\.iteration_time_s"):
        load_measurements(path, scenario)


# -- the command line ---------------------------------------------------------------------------------

def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def user_error(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-tui: error:"), err
    assert "Traceback" not in out + err
    return lines[0]


GOOD_RUN = {"tp": 1, "pp": 4, "dp": 4, "micro_batch_size": 2, "iteration_time_s": 1.2}

BAD_FILES = [   # (file content, what the one line must name)
    ("just text", "measurements: 'str'"),
    ("[]", "measurements: []"),
    ("{tp: 1}", "measurements: 'dict'"),
    ("- 5", "measurements[0]: 5: expected a mapping"),
    ([GOOD_RUN, {**GOOD_RUN, "iteration_time_s": "abc"}], "measurements[1].iteration_time_s: 'abc': expected a number"),
    ([{**GOOD_RUN, "iteration_time_s": 0}], "measurements[0].iteration_time_s: 0: must be greater than 0"),
    ([{**GOOD_RUN, "iteration_time_s": -1.5}], "measurements[0].iteration_time_s: -1.5"),
    ([{k: v for k, v in GOOD_RUN.items() if k != "iteration_time_s"}],
     "measurements[0].iteration_time_s: required"),
    ([{**GOOD_RUN, "iteration_time": 1.2}], "measurements[0].iteration_time: 1.2: unknown field"),
    ([{k: v for k, v in GOOD_RUN.items() if k != "tp"}], "measurements[0].tp: required"),
    ([{**GOOD_RUN, "tp": "two"}], "measurements[0].tp: 'two': expected a number"),
    ([{**GOOD_RUN, "peak_memory": "lots"}], "measurements[0].peak_memory: 'lots'"),
    ([{**GOOD_RUN, "out_of_memory": "yes"}], "measurements[0].out_of_memory: 'yes': expected true or false"),
    ([{**GOOD_RUN, "dp": 2}], "measurements[0].tp*pp*dp: '1*4*2=8': must equal the GPU count it uses (16)"),
    ([{**GOOD_RUN, "micro_batch_size": 3}], "measurements[0].micro_batch_size: 3"),
    ([{**GOOD_RUN, "partition": [12, 12]}], "measurements[0].partition: [12, 12]: needs 4 entries"),
    ([{**GOOD_RUN, "partition": [1, 1, 1, 1]}], "measurements[0].partition: [1, 1, 1, 1]: sums to 4"),
    ([{**GOOD_RUN, "placement": [0, 0]}], "measurements[0].placement: [0, 0]: must list each node-group index"),
    ([{**GOOD_RUN, "recompute": "sometimes"}], "measurements[0].recompute: 'sometimes': expected one of"),
    ([{**GOOD_RUN, "iteration_time_s": None, "out_of_memory": True}],
     "measurements: 'every run out of memory': nothing to fit"),
    ("- {tp: 1, pp: [", "malformed YAML"),
]


@pytest.mark.parametrize("content, named", BAD_FILES, ids=[named.split(":")[0] + f"-{i}" for i, (_, named)
                                                           in enumerate(BAD_FILES)])
def test_every_bad_measurements_file_gets_one_line_naming_the_entry_and_field(tmp_path, capsys, content, named):
    path = tmp_path / "runs.yaml"
    path.write_text(content if isinstance(content, str) else dump_yaml(content))
    line = user_error(capsys, "calibrate", "paper-het-cluster", path, "-o", tmp_path / "out.yaml")
    assert named in line
    assert not (tmp_path / "out.yaml").exists()


def test_command_line_mistakes_are_one_line(tmp_path, capsys):
    runs = tmp_path / "runs.yaml"
    runs.write_text(dump_yaml([GOOD_RUN]))
    assert "no such file" in user_error(capsys, "calibrate", "paper-het-cluster", tmp_path / "missing.yaml")
    assert "MEASUREMENTS" in user_error(capsys, "calibrate", "paper-het-cluster")
    assert "not used with --suggest" in user_error(capsys, "calibrate", "paper-het-cluster", runs, "--suggest", "3")
    assert "--suggest: 0: must be at least 1" in user_error(capsys, "calibrate", "paper-het-cluster", "--suggest", "0")
    assert "is a folder" in user_error(capsys, "calibrate", "paper-het-cluster", runs, "-o", tmp_path)
    assert "already exists" in user_error(capsys, "calibrate", "paper-het-cluster", "--suggest", "2", "-o", runs)


def test_suggest_command_writes_a_measurements_file(tmp_path, capsys):
    code, out, err = run(capsys, "calibrate", "paper-homogeneous", "--suggest", "3")
    assert code == 0, err
    printed = load_yaml_file_text(out)
    assert len(printed) == 3 and all(entry["iteration_time_s"] is None for entry in printed)
    target = tmp_path / "runs.yaml"
    code, out, err = run(capsys, "calibrate", "paper-homogeneous", "--suggest", "3", "-o", target)
    assert code == 0, err
    assert f"wrote {target}" in out
    assert load_yaml_file(target) == printed
    # Filled in, it is a measurements file calibrate reads.
    filled = [{**entry, "iteration_time_s": 1.5} for entry in printed]
    target.write_text(dump_yaml(filled))
    assert len(load_measurements(target, load_scenario("paper-homogeneous"))) == 3


def load_yaml_file_text(text: str):
    from amp_tui.core.base.yamlio import load_yaml_text
    return load_yaml_text(text)


def stand_in_predictor(scenario):
    """The real prediction scaled by the parameters the way a wired cost model would respond:
    for the CLI's plumbing (read, fit, print, write) whatever the cost model does today."""
    gpu = scenario.cluster.nodes[0].gpu.name
    predictions = {}

    def predict(values, run):
        if run.strategy not in predictions:
            predictions[run.strategy] = evaluate(scenario, run.strategy)
        prediction = predictions[run.strategy]
        seconds = prediction.iteration_time_s / values[f"compute_efficiency.{gpu}"] + values["iteration_overhead_s"]
        return seconds, prediction.peak_memory_bytes * (1 + values["memory_fragmentation"])
    return predict


def measured_runs(scenario, factor: float, count: int = 4) -> list[dict]:
    """`count` feasible strategies 'measured' `factor` times slower than the current prediction."""
    result = search(scenario, top=count)
    return [{**p.strategy.to_dict(), "iteration_time_s": p.iteration_time_s * factor * (1 + 0.01 * i)}
            for i, p in enumerate(result.strategies[:count])]


def test_calibrate_command_prints_the_fit_and_writes_the_scenario(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(calibration, "scenario_predictor", stand_in_predictor)
    scenario = load_scenario("paper-homogeneous")
    runs = tmp_path / "runs.yaml"
    runs.write_text(dump_yaml(measured_runs(scenario, 1.4)))
    out_path = tmp_path / "calibrated.yaml"
    code, out, err = run(capsys, "calibrate", "paper-homogeneous", runs, "-o", out_path)
    assert code == 0, err
    for text in ("compute_efficiency.T4", "before", "after", "residual", "leave-one-out", f"wrote {out_path}"):
        assert text in out
    calibrated = load_scenario(str(out_path))
    fitted = calibrated.calibration.as_dict()
    assert fitted["compute_efficiency.T4"] < 0.8          # 1.4x slower than predicted: slower kernels
    assert calibrated.calibration.residual_log_sd is not None and calibrated.calibration.loo_log_sd is not None
    assert "4 measurements from runs.yaml" in calibrated.calibration.source
    assert replace(calibrated, calibration=Calibration()) == scenario   # nothing else changed
    # Overwriting needs --force and keeps the file's permissions.
    os.chmod(out_path, 0o600)
    before = out_path.read_text()
    assert "already exists" in user_error(capsys, "calibrate", "paper-homogeneous", runs, "-o", out_path)
    assert out_path.read_text() == before
    report = json.loads(run(capsys, "calibrate", "paper-homogeneous", runs, "-o", out_path, "--force", "--json")[1])
    assert stat.S_IMODE(out_path.stat().st_mode) == 0o600
    assert report["written"] == str(out_path) and len(report["runs"]) == 4
    assert {p["name"] for p in report["parameters"] if p["source"] == "fitted"} >= {"compute_efficiency.T4"}
    assert report["calibration"]["parameters"] == load_scenario(str(out_path)).calibration.as_dict()
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_a_calibrated_scenario_round_trips_through_a_plan_file(tmp_path, capsys):
    scenario = with_values(load_scenario("paper-het-cluster"),
                           {"compute_efficiency.V100": 0.8, "link_efficiency.ethernet": 0.5},
                           source="test", residual_log_sd=0.03, loo_log_sd=0.05)
    assert parse_scenario(scenario.to_dict()) == scenario
    prediction = evaluate(scenario, Strategy(1, 4, 4, 2))
    plan_path = save_plan(tmp_path / "p.plan.yaml", scenario, prediction)
    plan = load_plan(plan_path)
    assert plan.scenario.calibration == scenario.calibration
    code, out, err = run(capsys, "evaluate", plan_path)
    assert code == 0 and "figures unchanged since the plan was saved" in out, (out, err)
    code, out, err = run(capsys, "export", plan_path, "--format", "megatron")
    assert code == 0, err


def test_calibrated_uncertainty_is_the_larger_of_fit_and_leave_one_out_spread():
    scenario = load_scenario("paper-homogeneous")
    assert calibrated_uncertainty(scenario) is None
    calibrated = with_values(scenario, {"compute_efficiency.T4": 0.8}, residual_log_sd=0.03, loo_log_sd=0.05)
    assert calibrated_uncertainty(calibrated) == pytest.approx(math.expm1(0.05))
    # Without a leave-one-out error (too few runs to measure one) the fit claims no band of its own:
    # the in-sample spread of a fit with as many parameters as runs is near zero by construction.
    assert calibrated_uncertainty(replace(calibrated, calibration=replace(calibrated.calibration, loo_log_sd=None))) \
        is None
    reread = parse_scenario({**scenario.to_dict(), "calibration": {"parameters": {"compute_efficiency.T4": 0.8},
                                                                   "residual_log_sd": 0.1, "loo_log_sd": 0.02}})
    assert calibrated_uncertainty(reread) == pytest.approx(math.expm1(0.1))


def test_scenario_parameters_follow_its_gpus_and_links():
    names = scenario_parameters(load_scenario("paper-het-cluster"))
    assert {"compute_efficiency.V100", "compute_efficiency.T4", "link_efficiency.nvlink", "link_efficiency.pcie",
            "link_efficiency.ethernet", "iteration_overhead_s"} <= set(names)
    assert "link_efficiency.infiniband" not in names and "compute_efficiency.A100-40GB" not in names


# -- with the real cost model (turn on once it reads the scenario's calibration) ---------------------------

REAL = "mixed-a100-a10g-llama2-13b"      # analytic layers (no profiled times) on two GPU types


def _model_reads_parameters() -> bool:
    scenario = load_scenario(REAL)
    strategy = search(scenario, top=1).strategies[0].strategy
    slower = with_values(scenario, {f"compute_efficiency.{g.gpu.name}": 0.5 for g in scenario.cluster.nodes})
    return evaluate(slower, strategy).iteration_time_s != pytest.approx(evaluate(scenario, strategy).iteration_time_s)


needs_wired_model = pytest.mark.skipif(not _model_reads_parameters(),
                                       reason="the cost model does not read the calibration's parameters yet")


@needs_wired_model
def test_real_model_recovers_known_parameters():
    scenario = load_scenario(REAL)
    names = ["compute_efficiency.A100-40GB", "compute_efficiency.A10G"]
    defaults = current_values(scenario, names)
    truth = {name: defaults[name] * factor for name, factor in zip(names, (0.7, 0.85))}
    truly = with_values(scenario, truth)
    rng = random.Random(0)
    runs = []
    for i, (run, _, _) in enumerate(suggest_measurements(scenario, 6)):
        seconds = evaluate(truly, run.strategy).iteration_time_s
        runs.append(replace(run, index=i, iteration_time_s=seconds * math.exp(rng.gauss(0, 0.02))))
    result = calibrate(scenario, runs)
    fitted = result.scenario.calibration.as_dict()
    for name, value in truth.items():
        assert fitted[name] == pytest.approx(value, rel=0.1), name
    # Strategies not measured are now predicted close to the truth; before, they were not.
    others = [p.strategy for p in search(scenario, top=8).strategies]
    def error(model):
        return max(abs(math.log(evaluate(model, s).iteration_time_s / evaluate(truly, s).iteration_time_s))
                   for s in others)
    assert error(scenario) > 0.15 and error(result.scenario) < 0.06


@needs_wired_model
def test_real_model_command_line_end_to_end(tmp_path, capsys):
    scenario = load_scenario(REAL)
    runs = tmp_path / "runs.yaml"
    runs.write_text(dump_yaml(measured_runs(scenario, 1.5, count=5)))
    out_path = tmp_path / "calibrated.yaml"
    code, out, err = run(capsys, "calibrate", REAL, runs, "-o", out_path)
    assert code == 0, err
    calibrated = load_scenario(str(out_path))
    assert calibrated.calibration.values
    # evaluate honours the calibration: the measured runs are now predicted about 1.5x slower.
    strategies = tmp_path / "strategies.yaml"
    strategies.write_text(dump_yaml([{k: v for k, v in entry.items() if k != "iteration_time_s"}
                                     for entry in load_yaml_file(runs)]))
    before = json.loads(run(capsys, "evaluate", REAL, strategies, "--json")[1])
    after = json.loads(run(capsys, "evaluate", out_path, strategies, "--json")[1])
    for b, a in zip(before, after):
        assert a["iteration_time_s"] / b["iteration_time_s"] == pytest.approx(1.5, rel=0.1)


def test_calibrated_from_five_amp_runs_the_top_pick_is_the_measured_best():
    """AMP's homogeneous setting calibrated from 5 random measured runs (10 seeds): the run ranked
    first is the measured best on every seed. With one Ethernet efficiency for a lone flow and
    for four sharing an interface, 1x2x8 (6.7% slower) was ranked first on 5 of the 10."""
    import random

    from amp_tui.core.calibration.calibrate import calibrate
    from amp_tui.core.calibration.measurements import Measurement
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.core.validation.runs import load_runs, parse_run, source_key

    scenarios: dict = {}
    ran = [case for case in (parse_run(run, scenarios) for run in load_runs() if source_key(run) == "amp-homogeneous")
           if not case.measured.out_of_memory]
    best = min(case.measured.iteration_time_s for case in ran)
    base = load_scenario("paper-homogeneous")
    for seed in range(10):
        picked = random.Random(seed).sample(ran, 5)
        fitted = calibrate(base, [Measurement(i, c.strategy, c.measured.iteration_time_s) for i, c in enumerate(picked)],
                           leave_one_out=False).scenario
        cost = CostModel(fitted)
        top = min(ran, key=lambda c: evaluate(fitted, c.strategy, cost).iteration_time_s)
        assert top.measured.iteration_time_s <= 1.03 * best, seed
