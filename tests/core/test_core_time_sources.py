"""Where each layer's time comes from (core/costmodel/time_sources.py): one table of measured
times per (GPU type, tp), each entry labelled with its source, and one rule for the entries nobody
measured: the analytic time carried by the layer's measured / analytic ratio (issue 34, major 4)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.time_sources import layer_time_sources, source_warning
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.hardware import gpu_catalog
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.spec.strategy import Strategy

from core_builders import IDEAL, build, layer, node

TRAINING = {"global_batch_size": 32, "precision": "fp16", "optimizer": "adam", "schedule": "1f1b",
            "framework": "deepspeed", "recompute": "none", "zero_stage": 0, "state_bytes_per_param": 20}
# The cluster: AMP's gpt2-medium (T4 and V100 times measured) on V100s and A10Gs (not measured).
A10G_V100 = {"name": "a10g-v100", "model": {"preset": "gpt2-medium"}, "training": TRAINING,
             "cluster": {"nodes": [{"instance": "p3.8xlarge", "count": 2},
                                   {"instance": "g4dn.12xlarge", "count": 1, "gpu": "A10G"}]}}
A10G_ONLY = Strategy(1, 1, 4, 1, idle=((0, 2),))
V100_ONLY = Strategy(1, 1, 8, 1, idle=((1, 1),))
BLOCK = 2     # gpt2-medium's first transformer block (after the embedding and a no-op)


def _ratio(cost: CostModel, gpu: str) -> float:
    """AMP's measured forward of the first block over the analytic one, tp 1, micro-batch 1."""
    block = cost.model.layers[BLOCK]
    return block.profiled_time(gpu, 1, 0) / float(cost._analytic_forward(gpu_catalog()[gpu], 1, 1)[BLOCK])


def test_an_unmeasured_gpu_carries_the_measured_gpus_ratio():
    """The A10G's block is its analytic time times the geometric mean of the T4's and V100's
    measured / analytic ratios: measured level, analytic ratio between the GPUs."""
    cost = CostModel(parse_scenario(A10G_V100))
    r_t4, r_v100 = _ratio(cost, "T4"), _ratio(cost, "V100")
    assert 1.5 < r_t4 < r_v100 < 4      # AMP's 2020 stack ran well below the analytic model
    a10g = 1                            # node group of the A10Gs
    compute, _ = cost.layer_times(a10g, 1, 1)
    analytic = float(cost._analytic_forward(cost.gpus[a10g], 1, 1)[BLOCK])
    # forward + backward (2 x) of the carried forward time; no recompute, no flash attention
    assert compute[BLOCK] == pytest.approx(3 * analytic * math.sqrt(r_t4 * r_v100), rel=1e-9)


def test_each_stage_names_the_source_of_its_times():
    scenario = parse_scenario(A10G_V100)
    cost = CostModel(scenario)
    a10g = evaluate(scenario, A10G_ONLY, cost)
    v100 = evaluate(scenario, V100_ONLY, cost)
    assert [st.time_source for st in v100.stages] == ["measured (AMP 2020, V100)"]
    assert [st.time_source for st in a10g.stages] == ["carried from T4+V100's measured/analytic ratio (AMP 2020)"]
    assert a10g.to_dict()["stages"][0]["time_source"] == a10g.stages[0].time_source
    # the V100s now win: the A10G is no longer priced ~3x faster than AMP's measured V100 times
    assert v100.iteration_time_s < a10g.iteration_time_s
    assert source_warning(cost, a10g) is None and source_warning(cost, v100) is None


def test_a_cluster_nobody_measured_stays_analytic():
    """AMP's 2020 ratios describe AMP's software: a cluster with no measured GPU type is priced by
    the analytic model (carried to a lone H200, they raised the error on its measured iterations,
    tests/test_profile_h200.py), while a part of a measured cluster keeps carrying (above)."""
    data = {**A10G_V100, "cluster": {"nodes": [{"instance": "g5.12xlarge", "count": 1}]}}
    scenario = parse_scenario(data)
    p = evaluate(scenario, Strategy(1, 1, 4, 1), CostModel(scenario))
    assert p.stages[0].time_source == "analytic"


def test_a_gpu_beyond_the_measured_tp_carries_its_own_tp1_ratio():
    data = {**A10G_V100, "cluster": {"nodes": [{"instance": "p3.16xlarge", "count": 1}]}}
    scenario = parse_scenario(data)
    p = evaluate(scenario, Strategy(8, 1, 1, 1), CostModel(scenario))
    assert p.stages[0].time_source == "carried from V100's tp 1 measured/analytic ratio (AMP 2020)"
    p4 = evaluate(scenario, Strategy(4, 1, 2, 1), CostModel(scenario))
    assert p4.stages[0].time_source == "measured (AMP 2020, V100)"


@pytest.mark.parametrize("preset", ["paper-homogeneous", "paper-het-cluster", "paper-het-model"])
def test_where_every_gpu_is_measured_nothing_is_carried(preset):
    """AMP's own presets price every working layer from AMP's measurements on their own GPU types
    at every tp they run, so the carrying rule cannot move their rankings."""
    scenario = parse_scenario(load_preset("scenarios", preset))
    cost = CostModel(scenario)
    for gpu in {group.gpu for group in scenario.cluster.nodes}:
        for tp in (1, 2, 4):
            kinds = {label.split(" ")[0] for label, working in zip(cost.time_sources(gpu, tp),
                                                                    cost.model.columns["flops"] > 0) if working}
            assert kinds == {"measured"}, (gpu.name, tp, kinds)


def test_the_sources_json_lists_each_gpus_measured_carried_and_analytic_layers():
    sources = layer_time_sources(CostModel(parse_scenario(A10G_V100)))
    assert sources["carried"]["A10G"][:2] == ["embedding", "block x24"]
    assert sources["amp_inline"]["A10G"] == [] and sources["carried"]["V100"] == []
    assert "block x24" in sources["amp_inline"]["V100"]
    assert sources["by_gpu"] == {"V100": "measured (AMP 2020, V100)",
                                 "A10G": "carried from T4+V100's measured/analytic ratio (AMP 2020)"}


def _tp2_only(unit: float, name: str) -> dict:
    return layer(name=name, params=1e6, flops=1e10, activation_bytes=1e6, output_bytes=1e6, tokens=1024, width=1024,
                 profile={"V100": {2: unit}})


def test_a_layer_nobody_measured_at_tp1_is_analytic_and_a_mixed_plan_is_warned():
    """Measured at tp 2 on the V100 only: no tp 1 ratio to carry, so the T4 prices it analytically,
    and a plan whose stages meet both says so."""
    scn = build([node(1, "V100", 2), node(1, "T4", 2)], [_tp2_only(0.004, "l0"), _tp2_only(0.004, "l1")], 2,
                calibration=IDEAL)
    cost = CostModel(scn)
    assert cost.time_sources(cost.gpus[1], 2) == ("analytic", "analytic")
    assert cost.time_sources(cost.gpus[0], 2) == ("measured (inline profile, V100)",) * 2
    p = evaluate(scn, Strategy(2, 2, 1, 1, placement=(0, 1)), cost)
    warning = source_warning(cost, p)
    assert warning and "V100" in warning and "T4" in warning and "l0" in warning
    same = evaluate(scn, Strategy(2, 1, 1, 1, idle=((1, 1),)), cost)
    assert source_warning(cost, same) is None


def test_plan_and_evaluate_name_each_gpus_source(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(dump_yaml(A10G_V100))
    assert main(["plan", str(tmp_path / "s.yaml"), "--top", "1", "--time-limit", "60"]) == 0
    out = capsys.readouterr().out
    assert ("layer times: on V100 measured (AMP 2020, V100); "
            "on A10G carried from T4+V100's measured/analytic ratio (AMP 2020)") in out
    assert main(["plan", str(tmp_path / "s.yaml"), "--top", "1", "--json", "--time-limit", "60"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layer_times"]["by_gpu"]["A10G"].startswith("carried from T4+V100")
    assert all(stage["time_source"] for stage in data["strategies"][0]["stages"])
    (tmp_path / "st.yaml").write_text(dump_yaml([A10G_ONLY.to_dict(), V100_ONLY.to_dict()]))
    assert main(["evaluate", str(tmp_path / "s.yaml"), str(tmp_path / "st.yaml")]) == 0
    out = capsys.readouterr().out
    assert "carried from T4+V100's measured/analytic ratio (AMP 2020)" in out.split("strategy 1:")[1]
    assert "measured (AMP 2020, V100)" in out.split("strategy 2:")[1]


def test_mixed_sources_are_warned_on_the_command_line(tmp_path, capsys):
    from core_builders import scenario_dict

    data = scenario_dict([node(1, "V100", 2), node(1, "T4", 2)], [_tp2_only(0.004, "l0"), _tp2_only(0.004, "l1")], 2)
    (tmp_path / "s.yaml").write_text(dump_yaml(data))
    (tmp_path / "st.yaml").write_text("- {tp: 2, pp: 2, dp: 1, micro_batch_size: 1, placement: [0, 1]}\n")
    assert main(["evaluate", str(tmp_path / "s.yaml"), str(tmp_path / "st.yaml")]) == 0
    out = capsys.readouterr().out
    assert "warning: stages priced by different sources" in out
    assert main(["evaluate", str(tmp_path / "s.yaml"), str(tmp_path / "st.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "different sources" in data[0]["time_source_warning"]


def test_carried_times_keep_the_search_and_evaluate_in_agreement():
    scenario = parse_scenario(A10G_V100)
    from amp_tui.core.search.planner import find_plans
    from amp_tui.core.search.objective import Objective

    best = find_plans(scenario, Objective("time", None), top=1, time_limit_s=60).result.strategies[0]
    again = evaluate(scenario, best.strategy)
    assert again.iteration_time_s == pytest.approx(best.iteration_time_s, rel=1e-9)
    assert np.isfinite(again.iteration_time_s)
