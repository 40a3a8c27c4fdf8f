"""`compare`, `plan --sensitivity` and `evaluate PLAN STRATEGIES` from the command line."""

from __future__ import annotations

import json

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml

OTHER = {"tp": 1, "pp": 2, "dp": 8, "micro_batch_size": 2}   # other degrees than the best plan's


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_evaluate_plan_with_strategies_uses_the_plans_scenario(capsys, tmp_path):
    """Defect 17: trying another split against a saved plan no longer needs its scenario copied out."""
    plan = tmp_path / "plan.yaml"
    assert run(capsys, "plan", "paper-het-cluster", "--save", plan)[0] == 0
    strategies = tmp_path / "s.yaml"
    strategies.write_text(dump_yaml([OTHER]))
    from_plan = run_json(capsys, "evaluate", plan, strategies)
    from_preset = run_json(capsys, "evaluate", "paper-het-cluster", strategies)
    assert len(from_plan) == 1
    assert from_plan[0]["iteration_time_s"] == from_preset[0]["iteration_time_s"]


def test_compare_prints_terms_and_the_sentence(capsys, tmp_path):
    best = run_json(capsys, "plan", "paper-het-cluster", "--top", "1")["strategies"][0]
    strategies = tmp_path / "s.yaml"
    keys = ("tp", "pp", "dp", "micro_batch_size", "partition", "placement", "idle")
    strategies.write_text(dump_yaml([{k: best[k] for k in keys if k in best}, OTHER]))
    code, out, _ = run(capsys, "compare", "paper-het-cluster", strategies)
    assert code == 0
    label = f"{best['tp']}x{best['pp']}x{best['dp']}"
    assert f"{label} is faster by " in out
    for term in ("compute", "bubble", "pipeline sends", "tp comm", "dp all-reduce", "optimizer", "stage 0 memory"):
        assert term in out


def test_compare_against_a_plan(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    assert run(capsys, "plan", "paper-het-cluster", "--save", plan)[0] == 0
    strategies = tmp_path / "s.yaml"
    strategies.write_text(dump_yaml([OTHER]))
    code, out, _ = run(capsys, "compare", plan, strategies)
    assert code == 0 and " is faster by " in out


def test_compare_needs_two(capsys, tmp_path):
    strategies = tmp_path / "s.yaml"
    strategies.write_text(dump_yaml([OTHER]))
    code, _, err = run(capsys, "compare", "paper-het-cluster", strategies)
    assert code == 2 and "at least two" in err


def test_plan_sensitivity(capsys):
    code, out, _ = run(capsys, "plan", "paper-homogeneous", "--top", "3", "--sensitivity")
    assert code == 0
    assert "network g4dn.12xlarge" in out and "global batch size" in out and "most robust:" in out
