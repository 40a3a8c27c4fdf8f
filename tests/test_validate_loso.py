"""Fits judged by leave-one-source-out (issue 26 item 5): what the fit may move, a held-out GPU's
fallback, the folds `validate` replays (current with today's defaults), and the
leave-one-source-out figures pinned as ceilings."""

from __future__ import annotations

import statistics

import pytest

from amp_tui.core.spec.hardware import gpu_catalog
from amp_tui.core.validation.fit import fitted_names
from amp_tui.core.validation.loso import add_held_out, fold_start, load_folds, stale_parameters
from amp_tui.core.validation.replay import report, run_validation

# Ceilings of the leave-one-source-out MAPE per source (each predicted by parameters fitted
# without it; amp_tui/data/fit_folds.yaml) and over the published sources. The bar for
# the macro figure was 12%; issue 35's is 10% (9.7% with the peak fractions of the GPUs a GEMM
# microbenchmark covers set from it, not fitted: SC21's and Korthikanti et al.'s A100 runs, which
# favoured a higher A100 figure, rose 5.9% -> 9.1% and 7.6% -> 12.3%; AMP's 8.5% -> 9.2% with the 2020
# stack's host time set from its layer times, not fitted to its iterations).
LOSO_CEILINGS = {"amp-homogeneous": 0.095, "megatron-sc21": 0.095, "korthikanti": 0.125, "llmfoundry": 0.095,
                 "nemo": 0.135, "torchtitan": 0.10, "macro": 0.10}
BLOCKS_LOSO_CEILING = 0.12


@pytest.fixture(scope="module")
def held_out():
    validation = run_validation()
    return add_held_out(report(validation), validation)


def test_only_what_several_sources_inform_is_fitted():
    informing = {"gemm_half_dim": {"a", "b"}, "backward_ratio": {"a"}, "fp4_efficiency": {"nemo"},
                 "compute_efficiency.GB200": {"nemo"}, "collective_base_s": set()}
    assert fitted_names(informing) == ["gemm_half_dim", "compute_efficiency.GB200"]


def test_a_gpu_only_the_held_out_source_ran_on_takes_its_generations_fraction():
    """Held out llm-foundry, the A100 40 GB (which only it ran) takes the A100 80 GB's fitted
    fraction; held out NeMo, Blackwell (no other Blackwell was fitted) the median of the others'."""
    catalog = gpu_catalog()
    fitted = {"compute_efficiency.A100-80GB": 1.05, "compute_efficiency.H100": 0.9,
              "compute_efficiency.A100-40GB": 1.3, "compute_efficiency.GB200": 1.2}
    informing = {"compute_efficiency.A100-80GB": {"llmfoundry", "torchtitan"},
                 "compute_efficiency.H100": {"llmfoundry", "nemo"}, "compute_efficiency.A100-40GB": {"llmfoundry"},
                 "compute_efficiency.GB200": {"nemo"}}
    a100 = fold_start("compute_efficiency.A100-40GB", "llmfoundry", fitted, informing)
    assert a100 * catalog["A100-40GB"].peak_fraction == pytest.approx(1.05 * catalog["A100-80GB"].peak_fraction)
    gb200 = fold_start("compute_efficiency.GB200", "nemo", fitted, informing)
    others = [1.05 * catalog["A100-80GB"].peak_fraction, 0.9 * catalog["H100"].peak_fraction,
              1.3 * catalog["A100-40GB"].peak_fraction]
    assert gb200 * catalog["GB200"].peak_fraction == pytest.approx(statistics.median(others))


def test_the_committed_folds_are_current():
    """The folds were fitted against today's defaults and peak fractions: a model change that
    moves a default asks for `validate --fit --write-folds`."""
    folds = load_folds()
    assert folds and not stale_parameters(folds)
    assert set(folds["folds"]) >= {"amp-homogeneous", "megatron-sc21", "korthikanti", "llmfoundry", "nemo",
                                   "torchtitan", "h200-blocks"}
    # a fold fits without its source: a parameter only that source informs is not among its free ones
    for source, values in folds["folds"].items():
        for name, sources in folds["informing"].items():
            if set(sources) == {source} and name.startswith("compute_efficiency."):
                assert values[name] != pytest.approx(folds["fitted"][name], rel=1e-6), (source, name)


def test_leave_one_source_out_ceilings_hold(held_out):
    assert held_out["held_out"]["available"]
    for source, ceiling in LOSO_CEILINGS.items():
        row = held_out["macro"] if source == "macro" else held_out["sources"][source]
        assert row["loso_mape"] <= ceiling, source
        if source != "macro":        # held out, a source is not predicted better than fitted with it by much
            assert row["loso_mape"] >= row["mape"] - 0.02, source
    assert held_out["held_out"]["blocks"]["loso_mape"] <= BLOCKS_LOSO_CEILING


def test_stale_folds_are_said_not_shown():
    validation = run_validation("korthikanti")
    folds = load_folds()
    stale = {**folds, "defaults": {**folds["defaults"], "gemm_half_dim": 1.0}}
    rep = add_held_out(report(validation), validation, stale)
    assert rep["held_out"]["available"] is False and "gemm_half_dim" in rep["held_out"]["reason"]
    assert "loso_mape" not in rep["sources"]["korthikanti"]
