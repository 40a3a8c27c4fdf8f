"""`plan --objective/--budget/--use-all-gpus` and idle nodes end to end through the command line."""

from __future__ import annotations

import json

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def plan_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, "plan", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_idle_nodes_in_plan_json_and_text(capsys):
    data = plan_json(capsys, "bench-128-gpus", "--top", "2")
    best = data["strategies"][0]
    assert best["idle"] == [{"group": 1, "nodes": 8}] and best["gpus_used"] == 64
    assert best["tp"] * best["pp"] * best["dp"] == 64
    assert data["idle_search"]["exact"] is True and data["objective"] == "time"
    code, out, _ = run(capsys, "plan", "bench-128-gpus", "--top", "1")
    assert code == 0 and "idle: 8 x g5.48xlarge (group 1)" in out and "$/hour" in out and "$/M tokens" in out


def test_use_all_gpus_keeps_every_node(capsys):
    data = plan_json(capsys, "bench-128-gpus", "--top", "3", "--use-all-gpus")
    assert all(s["idle"] == [] and s["gpus_used"] == 128 for s in data["strategies"])
    assert data["idle_search"]["searched"] == 1
    faster = plan_json(capsys, "bench-128-gpus", "--top", "1")["strategies"][0]
    assert faster["iteration_time_s"] < data["strategies"][0]["iteration_time_s"]


def test_cost_objective_is_never_dearer_per_token_than_the_fastest(capsys):
    for name in ("paper-homogeneous", "paper-het-cluster", "bench-128-gpus"):
        cheapest = plan_json(capsys, name, "--top", "3", "--objective", "cost")
        fastest = plan_json(capsys, name, "--top", "1")["strategies"][0]
        costs = [s["cost_per_million_tokens_usd"] for s in cheapest["strategies"]]
        assert costs == sorted(costs) and cheapest["objective"] == "cost"
        assert costs[0] <= fastest["cost_per_million_tokens_usd"] * (1 + 1e-9)


def test_budget_keeps_strategies_within_it(capsys):
    # paper-homogeneous: 4 x g4dn.12xlarge at $3.912/hour each
    data = plan_json(capsys, "paper-homogeneous", "--top", "5", "--budget", "8")
    assert data["strategies"] and all(s["cost_per_hour_usd"] <= 8 for s in data["strategies"])
    assert all(s["gpus_used"] == 8 for s in data["strategies"][:1])   # two nodes are faster than one
    assert data["budget_usd_per_hour"] == 8
    code, out, _ = run(capsys, "plan", "paper-homogeneous", "--budget", "1", "--json")
    none = json.loads(out)          # searched, nothing to plan: exit 1 with the reason (issue 28)
    assert code == 1 and none["strategies"] == [] and "costing at most $1.00/hour" in none["no_strategy"]


def test_objective_errors_are_one_line(capsys):
    code, out, err = run(capsys, "plan", "dgx-a100-gpt3-13b", "--objective", "cost")
    assert code == 2 and "cluster.nodes[0].price_per_hour" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, "plan", "paper-homogeneous", "--budget", "-5")
    assert code == 2 and "budget: -5" in err


def test_evaluate_a_strategy_with_idle_nodes(capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml([{"tp": 1, "pp": 1, "dp": 64, "micro_batch_size": 8, "idle": [{"group": 1, "nodes": 8}]}]))
    code, out, err = run(capsys, "evaluate", "bench-128-gpus", str(path), "--json")
    assert code == 0, err
    (prediction,) = json.loads(out)
    best = plan_json(capsys, "bench-128-gpus", "--top", "1")["strategies"][0]
    assert prediction["iteration_time_s"] == best["iteration_time_s"] and prediction["gpus_used"] == 64
    path.write_text(dump_yaml([{"tp": 1, "pp": 1, "dp": 64, "micro_batch_size": 8, "idle": [{"group": 1, "nodes": 9}]}]))
    code, out, err = run(capsys, "evaluate", "bench-128-gpus", str(path))
    assert code == 2 and "strategies[0].idle: 9" in err


def test_a_saved_plan_with_idle_nodes_re_evaluates_and_exports_without_them(capsys, tmp_path):
    plan = tmp_path / "plan.yaml"
    code, out, err = run(capsys, "plan", "bench-128-gpus", "--top", "1", "--save", str(plan))
    assert code == 0, err
    code, out, err = run(capsys, "evaluate", str(plan))
    assert code == 0 and "figures unchanged since the plan was saved" in out and "idle: 8 x g5.48xlarge" in out
    code, out, err = run(capsys, "export", str(plan), "--format", "torchrun")
    assert code == 0 and "--nnodes 8 " in out and "g5.48xlarge" not in out
    assert "leaves 8 x g5.48xlarge (group 1) idle" in err
