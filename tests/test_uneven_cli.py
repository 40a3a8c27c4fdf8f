"""Batch shares and per-stage degrees through the CLI: evaluate from YAML, plan files, the stock engines' exports
refuse, torchrun and the rank map carry them."""

from __future__ import annotations

import json

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.plans.planfile import load_plan, save_plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.core.spec.strategy import Strategy

SCENARIO = "mixed-h100-a100-llama3-8b"      # 16 H100 then 16 A100 80 GB
SHARES = [12] * 16 + [4] * 16
PER_STAGE = {"tp": [2, 1], "pp": 2, "dp": [8, 16], "micro_batch_size": 1, "placement": [1, 0]}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_evaluate_accepts_shares_and_per_stage_lists(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml({"strategies": [
        {"tp": 1, "pp": 1, "dp": 32, "micro_batch_size": 2, "batch_shares": SHARES}, PER_STAGE]}))
    code, out, err = run(capsys, "evaluate", SCENARIO, path, "--json")
    assert code == 0, err
    shares, per_stage = json.loads(out)
    assert shares["batch_shares"] == SHARES and len(shares["replica_times_s"]) == 32
    assert shares["num_micro_batches"] in (6, 2)
    assert per_stage["tp"] == [2, 1] and per_stage["dp"] == [8, 16] and per_stage["gpus_used"] == 32
    even = evaluate(load_scenario(SCENARIO), Strategy(1, 1, 32, 2))
    assert shares["iteration_time_s"] < even.iteration_time_s
    code, out, _ = run(capsys, "evaluate", SCENARIO, path)
    assert "batch shares 16 x 12 + 16 x 4" in out and "2/1x2x8/16" in out


def test_bad_shares_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml([{"tp": 1, "pp": 1, "dp": 32, "micro_batch_size": 2, "batch_shares": SHARES[:-1]}]))
    code, _, err = run(capsys, "evaluate", SCENARIO, path)
    assert code == 2 and err.count("\n") == 1 and "strategies[0].batch_shares" in err and "needs 32 entries" in err


@pytest.mark.parametrize("strategy, field", [
    ({"tp": 1, "pp": 1, "dp": 32, "micro_batch_size": 2, "batch_shares": SHARES}, "strategy.batch_shares"),
    (PER_STAGE, "strategy.tp"),
    ({**PER_STAGE, "tp": [1, 1], "dp": [16, 16]}, None),
])
@pytest.mark.parametrize("fmt", ["megatron", "deepspeed", "torchtitan", "torchrun", "rankmap"])
def test_plan_files_round_trip_and_exports_refuse(tmp_path, capsys, strategy, field, fmt):
    from amp_tui.core.spec.strategy import parse_strategy

    scenario = load_scenario(SCENARIO)
    prediction = evaluate(scenario, parse_strategy(strategy))
    path = save_plan(tmp_path / "p.yaml", scenario, prediction)
    plan = load_plan(path)
    assert plan.strategy == prediction.strategy
    assert evaluate(plan.scenario, plan.strategy).iteration_time_s == pytest.approx(prediction.iteration_time_s, rel=1e-12)
    code, _, err = run(capsys, "export", path, "--format", fmt, "-o", tmp_path / "out")
    if field is None:           # equal lists are the uniform strategy: exported as usual
        assert code == 0, err
        return
    if fmt in ("torchrun", "rankmap"):      # these carry shares and per-stage degrees (issue 28, major 5)
        assert code == 0, err
        assert "do not run that; only the torchrun and rankmap exports carry it" in err
        return
    assert code == 2 and err.count("\n") == 1 and field in err and "cannot export" in err
    assert "the torchrun and rankmap exports carry" in err


def test_plan_json_reports_the_heuristic(uneven_shares_scenario, capsys):
    path = uneven_shares_scenario
    code, out, err = run(capsys, "plan", path, "--top", "2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["uneven_search"]["exact"] is False and "heuristically" in data["uneven_search"]["note"]
    assert data["strategies"][0]["batch_shares"]
    code, out, err = run(capsys, "plan", path, "--top", "2")
    assert "note: batch shares and per-stage tp/dp searched heuristically" in out


def test_a_huge_pp_with_one_degree_for_all_stages_is_refused_not_expanded(tmp_path, capsys):
    """tp and dp given once are not copied pp times before pp is checked (pp = 2^40 once ran out of memory)."""
    from amp_tui.cli import main

    path = tmp_path / "s.yaml"
    path.write_text("- {tp: 1, pp: 1099511627776, dp: 1, micro_batch_size: 1}\n")
    assert main(["evaluate", "paper-homogeneous", str(path)]) == 2
    assert "strategies[0]" in capsys.readouterr().err
