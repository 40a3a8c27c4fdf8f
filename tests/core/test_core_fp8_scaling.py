"""fp8's scaling granularity: with a scale per row (torchao's rowwise recipe) the linear layers run
at params fp8_rowwise_efficiency of the tensorwise fp8 rate; nothing else changes, and the field
is checked, kept, and read from a measured run's precision label."""

from dataclasses import replace

import numpy as np
import pytest

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.spec.params import Calibration
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.validation.runs import load_runs, parse_run


def scenario(precision: str = "fp8", scaling: str | None = None):
    training = {"global_batch_size": 8, "precision": precision, "framework": "fsdp"}
    if scaling is not None:
        training["fp8_scaling"] = scaling
    return parse_scenario({
        "name": "fp8", "cluster": {"nodes": [{"count": 1, "gpu": "H100", "gpus_per_node": 8,
                                              "intra_node_bandwidth": "450 GB/s", "inter_node_bandwidth": "400 Gbps"}]},
        "model": {"family": "gpt", "hidden_size": 4096, "num_layers": 4, "num_heads": 32, "sequence_length": 8192,
                  "vocab_size": 32000},
        "training": training,
    })


def forward(scn, tp: int = 1, efficiency: float | None = None) -> np.ndarray:
    if efficiency is not None:
        scn = replace(scn, calibration=Calibration(values=(("fp8_rowwise_efficiency", efficiency),)))
    cost = CostModel(scn)
    return cost._analytic_forward(cost.gpus[0], tp, 1)


@pytest.mark.parametrize("tp", [1, 8])
def test_rowwise_scaling_slows_only_the_linear_layers_by_its_efficiency(tp):
    tensorwise, rowwise = scenario(), scenario(scaling="rowwise")
    base = forward(tensorwise, tp)
    assert np.array_equal(forward(scenario(scaling="tensorwise"), tp), base)       # the default
    assert forward(rowwise, tp, 1.0) == pytest.approx(base, rel=1e-12)           # no loss: tensorwise
    # the linear layers' time L goes as 1 / efficiency, the rest not: at 1/2, L more; at 1/4, 3 L more
    half, quarter = forward(rowwise, tp, 0.5) - base, forward(rowwise, tp, 0.25) - base
    assert quarter == pytest.approx(3 * half, rel=1e-9)
    assert np.all((half > 0) == (tensorwise.model.columns["flops"] > 0))
    # the default is the fitted 0.5
    assert np.array_equal(forward(rowwise, tp), forward(rowwise, tp, 0.5))


def test_fp8_scaling_is_checked_kept_and_needs_fp8():
    with pytest.raises(SpecError) as err:
        scenario(scaling="blockwise")
    assert err.value.field == "training.fp8_scaling"
    with pytest.raises(SpecError, match="precision is bf16") as err:
        scenario("bf16", "rowwise")
    assert err.value.field == "training.fp8_scaling"
    assert scenario(scaling="rowwise").training.to_dict()["fp8_scaling"] == "rowwise"
    assert "fp8_scaling" not in scenario().training.to_dict()
    again = scenario(scaling="rowwise").to_dict()
    assert parse_scenario(again).training.fp8_scaling == "rowwise"


def test_torchtitans_rowwise_runs_replay_with_rowwise_scaling_and_the_rest_tensorwise():
    runs = [run for run in load_runs() if "float8" in str(run["training"].get("precision")).lower()]
    scalings = {run["id"]: parse_run(run).scenario.training.fp8_scaling for run in runs}
    assert {i for i, s in scalings.items() if s == "rowwise"} == {i for i in scalings if "rowwise" in i}
    assert len([s for s in scalings.values() if s == "rowwise"]) == 4


def test_plan_says_the_scaling_and_a_bad_value_is_one_line_exit_2(tmp_path, capsys):
    import yaml

    from amp_tui.cli import main
    spec = scenario(scaling="rowwise").to_dict()
    path = tmp_path / "rowwise.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["plan", str(path), "--top", "1"]) == 0
    assert "fp8 (rowwise scaling)" in capsys.readouterr().out
    spec["training"]["fp8_scaling"] = "per-row"
    path.write_text(yaml.safe_dump(spec))
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "training.fp8_scaling" in err and "per-row" in err
