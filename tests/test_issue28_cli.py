"""Issue 28 (a newcomer's audit) from the command line: one test per item, each failed before its fix."""

from __future__ import annotations

import json
import re

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml

TOO_BIG = {"cluster": {"preset": "4x-g4dn.12xlarge"}, "model": {"preset": "llama3.1-405b"},
           "training": {"global_batch_size": 512, "precision": "fp16"}}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def too_big(tmp_path):
    path = tmp_path / "too-big.yaml"
    path.write_text(dump_yaml(TOO_BIG))
    return path


# Major 2 ------------------------------------------------------------------------------------------
def test_major_2_a_model_too_big_for_the_cluster_gets_its_one_line_reason(capsys, too_big):
    """Before: 'no strategy fits in memory; see the reasons below', no reasons, exit 0."""
    code, out, err = run(capsys, "plan", too_big)
    assert code == 1
    reason = next(line for line in out.splitlines() if line.startswith("no strategy:"))
    assert "too big for this cluster" in reason and "weights, gradients and optimizer state" in reason
    assert "5.91 TiB" in reason and "406 B parameters x 16 bytes" in reason and "16 GPUs" in reason
    assert "see the reasons below" not in out
    code, out, _ = run(capsys, "plan", too_big, "--json")
    assert code == 1 and "too big for this cluster" in json.loads(out)["no_strategy"]


# Major 5 ------------------------------------------------------------------------------------------
def test_major_5_plans_no_stock_engine_runs_are_marked_warned_and_exportable(capsys, tmp_path, uneven_shares_scenario):
    """Before: plan saved 1x1x32 with batch shares without a word, and all five exports refused it."""
    plan = tmp_path / "r1.plan.yaml"
    code, out, err = run(capsys, "plan", uneven_shares_scenario, "--top", "4", "--save", plan)
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.strip()[:2] in ("1†", "2†", "3 ", "4 ")]
    assert rows[0].lstrip().startswith("1†") and "batch shares" in rows[0]
    footnote = next(line for line in out.splitlines() if line.startswith("†"))
    assert "Megatron-LM, DeepSpeed and torchtitan do not run these" in footnote
    stock_rank = int(footnote.split("The best plan they run: rank ")[1].split(",")[0])
    assert "†" not in rows[stock_rank - 1]
    assert err.startswith("warning: strategy 1,") and f"--rank {stock_rank}" in err
    for fmt in ("torchrun", "rankmap"):
        code, _, err = run(capsys, "export", plan, "--format", fmt, "-o", tmp_path / fmt)
        assert code == 0, err
    document = json.loads((tmp_path / "rankmap" / "rankmap.json").read_text())
    shares = document["batch_shares"]
    assert len(set(shares)) > 1 and sum(shares) == 256
    assert [row["batch_share"] for row in document["ranks"]] == [shares[row["dp_replica"]] for row in document["ranks"]]
    code, _, err = run(capsys, "export", plan, "--format", "megatron")
    assert code == 2 and "the torchrun and rankmap exports carry the shares" in err


def test_major_5_per_stage_degrees_reach_the_rank_map(capsys, tmp_path):
    """Stage s takes the next tp_s x dp_s ranks, replica by replica, as the cost model places them."""
    from amp_tui.core.plans.planfile import save_plan
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.core.spec.strategy import parse_strategy

    scenario = load_scenario("mixed-h100-a100-llama3-8b")
    strategy = parse_strategy({"tp": [2, 1], "pp": 2, "dp": [8, 16], "micro_batch_size": 1, "placement": [1, 0]})
    path = save_plan(tmp_path / "p.yaml", scenario, evaluate(scenario, strategy))
    code, _, err = run(capsys, "export", path, "--format", "rankmap", "-o", tmp_path / "out")
    assert code == 0, err
    ranks = json.loads((tmp_path / "out" / "rankmap.json").read_text())["ranks"]
    first = [r for r in ranks if r["stage"] == 0]
    second = [r for r in ranks if r["stage"] == 1]
    assert len(first) == 16 and len(second) == 16 and all(r["gpu"] == "A100-80GB" for r in first)
    assert [(r["dp_replica"], r["tp_rank"]) for r in first[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {r["dp_replica"] for r in second} == set(range(16)) and {r["tp_rank"] for r in second} == {0}


# Also seen --------------------------------------------------------------------------------------
def test_also_seen_the_post_pass_note_only_when_it_changed_the_ranking(capsys, uneven_shares_scenario):
    code, out, _ = run(capsys, "plan", "paper-homogeneous", "--top", "2")
    assert code == 0 and "searched heuristically" not in out
    code, out, _ = run(capsys, "plan", uneven_shares_scenario, "--top", "2")
    assert code == 0 and "searched heuristically" in out


# Major 3 ------------------------------------------------------------------------------------------
def torchtitan_parallelism(text: str) -> dict:
    """The `config.parallelism.NAME = VALUE` settings of torchtitan_job.py (torchtitan 0.3 reads a
    Python config function, not TOML), after checking that the file is Python."""
    import ast

    ast.parse(text)
    settings = re.findall(r"^    config\.parallelism\.(\w+) = (.+)$", text, re.M)
    return {name: ast.literal_eval(value) for name, value in settings}


def test_major_3_torchtitan_never_trains_a_zero0_plan_with_tp_or_pp_in_fp32(capsys, tmp_path):
    """torchtitan (0.2.2, distributed/utils.py maybe_enable_amp) applies mixed precision only through
    FSDP; under TP or PP with DDP it trains in fp32. Before: dp_replicate = dp, dp_shard = 1 with
    mixed_precision_param bfloat16, for every ZeRO-0 plan with tp or pp > 1."""
    from amp_tui.core.plans.planfile import save_plan
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.core.spec.strategy import Strategy

    scenario = load_scenario("paper-homogeneous")        # fp16, ZeRO 0
    pipelined = save_plan(tmp_path / "a.yaml", scenario, evaluate(scenario, Strategy(1, 4, 4, 1)))
    code, out, err = run(capsys, "export", pipelined, "--format", "torchtitan")
    assert code == 0, err
    config = torchtitan_parallelism(out.split("----\n", 1)[1])
    assert (config["data_parallel_replicate_degree"], config["data_parallel_shard_degree"]) == (1, 4)
    assert "would train this plan in fp32 under DDP" in err and "predicted" in err
    no_dp = save_plan(tmp_path / "b.yaml", scenario, evaluate(scenario, Strategy(1, 16, 1, 1)))
    code, _, err = run(capsys, "export", no_dp, "--format", "torchtitan")
    assert code == 2 and err.count("\n") == 1 and "would train in fp32" in err
    plain = save_plan(tmp_path / "c.yaml", scenario, evaluate(scenario, Strategy(1, 1, 16, 2)))
    code, out, err = run(capsys, "export", plain, "--format", "torchtitan")
    config = torchtitan_parallelism(out.split("----\n", 1)[1])
    assert code == 0 and (config["data_parallel_replicate_degree"], config["data_parallel_shard_degree"]) == (16, 1)


# Major 4 ------------------------------------------------------------------------------------------
def megatron_flags(text: str) -> dict[str, list[str]]:
    import shlex

    body = text.split("MEGATRON_ARGS=(", 1)[1].split("\n)", 1)[0]
    words = [w for line in body.splitlines() if not line.strip().startswith("#") for w in shlex.split(line)]
    flags: dict[str, list[str]] = {}
    for word in words:
        if word.startswith("--"):
            flags[word] = []
            last = word
        else:
            flags[last].append(word)
    return flags


def test_major_4_megatron_writes_the_layout_flag_for_a_split_the_first_last_flags_cannot_say(capsys, tmp_path):
    """Before: the nearest split the first/last flags can say was written (predicted slower, or not to
    fit), and the exact --pipeline-model-parallel-layout was only a note at the end."""
    from amp_tui.core.plans.planfile import save_plan
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import parse_scenario
    from amp_tui.core.spec.strategy import Strategy

    scenario = parse_scenario({"cluster": {"preset": "4x-dgx-a100"}, "model": {"preset": "llama2-7b"},
                               "training": {"global_batch_size": 64}})
    # Unequal middle stages: 11/4/8/4/5 blocks (the embedding and the head on the end stages).
    path = save_plan(tmp_path / "p.yaml", scenario, evaluate(scenario, Strategy(1, 4, 8, 1, (12, 4, 8, 10))))
    code, out, err = run(capsys, "export", path, "--format", "megatron")
    assert code == 0, err
    flags = megatron_flags(out)
    assert flags["--pipeline-model-parallel-layout"] == ["Et*11|t*4|t*8|t*9L"]
    assert "--decoder-first-pipeline-num-layers" not in flags and "--decoder-last-pipeline-num-layers" not in flags
    assert not err.startswith("warning:")


def test_major_4_a_split_predicted_not_to_fit_is_said_first_and_in_the_file(capsys, tmp_path):
    """A layer Megatron's GPT does not name (an adapter) stays with the block before it, so Megatron
    runs [6, 5] for the plan's [5, 6], and that stage runs out of memory: 'does not fit' is the first
    thing the export says, and the file's header says it too."""
    from amp_tui.core.plans.planfile import save_plan
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import parse_scenario
    from amp_tui.core.spec.strategy import Strategy

    from tests.core.core_builders import adapter_scenario

    scenario = adapter_scenario(heavy_params=6e8)
    prediction = evaluate(scenario, Strategy(1, 2, 1, 1, (5, 6), (0,)))
    assert prediction.fits_memory
    path = save_plan(tmp_path / "p.yaml", scenario, prediction)
    code, out, err = run(capsys, "export", path, "--format", "megatron", "-o", tmp_path / "out")
    assert code == 0
    first = err.splitlines()[:2]
    assert first[0].startswith("warning: Megatron-LM runs another split") and first[1].startswith("warning: does not fit")
    header = (tmp_path / "out" / "megatron_args.sh").read_text().split("MEGATRON_ARGS=(")[0]
    assert "# WARNING: does not fit" in header


# Minor 15 -----------------------------------------------------------------------------------------
def test_minor_15_llama3_megatron_export_sets_the_rotary_base(capsys, tmp_path):
    """Llama 3 uses a RoPE base of 500,000; Megatron's --rotary-base defaults to 10,000 (Llama 2's)."""
    from amp_tui.core.plans.planfile import save_plan
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import parse_scenario
    from amp_tui.core.spec.strategy import Strategy

    for model, base in (("llama3-8b", ["500000"]), ("llama3.1-8b", ["500000"]), ("llama2-7b", None)):
        scenario = parse_scenario({"cluster": {"preset": "4x-dgx-a100"}, "model": {"preset": model},
                                   "training": {"global_batch_size": 64}})
        path = save_plan(tmp_path / f"{model}.yaml", scenario, evaluate(scenario, Strategy(1, 4, 8, 1)))
        code, out, err = run(capsys, "export", path, "--format", "megatron")
        assert code == 0, err
        assert megatron_flags(out).get("--rotary-base") == base, model


# Minor 4 ------------------------------------------------------------------------------------------
def test_minor_4_a_missing_uniform_baseline_is_explained(capsys):
    """The uniform baseline runs on the whole cluster: a budget below its price leaves it out, and
    plan says so (before: the line vanished without a word)."""
    code, out, _ = run(capsys, "plan", "paper-homogeneous", "--budget", "8", "--top", "2")
    assert code == 0 and "uniform baseline (even split" not in out
    assert "no uniform baseline: it runs on the whole cluster, whose $15.65/hour is over the $8.00/hour budget" in out


def test_minor_4_no_even_split_that_fits_is_explained():
    from amp_tui.core.plans.no_strategy import missing_baseline
    from amp_tui.core.search.search import SearchResult

    result = _plans("paper-homogeneous")
    stripped = SearchResult(result.scenario, result.strategies, result.infeasible, None, result.stats)
    assert "no even split" in missing_baseline(stripped) and missing_baseline(result) is None


def _plans(preset):
    from amp_tui.core.search.planner import find_plans
    from amp_tui.core.spec.scenario import load_scenario

    return find_plans(load_scenario(preset), top=2).result


# Minor 12 -----------------------------------------------------------------------------------------
def test_minor_12_plan_sensitivity_json_holds_the_what_ifs(capsys, monkeypatch):
    from amp_tui.core.plans import sensitivity

    monkeypatch.setattr(sensitivity, "BATCH_FACTORS", (2.0,))
    monkeypatch.setattr(sensitivity, "SPEED_FACTORS", (0.5,))
    code, out, err = run(capsys, "plan", "paper-homogeneous", "--top", "3", "--sensitivity", "--json")
    assert code == 0, err
    what_ifs = json.loads(out)["sensitivity"]
    assert what_ifs["cases"] and {"knob", "factor", "top_pick", "best_s", "changed", "watched_s"} <= set(what_ifs["cases"][0])
    assert what_ifs["watched"][0]["iteration_time_s"] > 0 and "what-ifs" in what_ifs["verdict"]
    assert err == ""


# Minor 13 -----------------------------------------------------------------------------------------
def test_minor_13_plan_marks_picks_within_the_memory_band(capsys):
    # (Llama 2 13B on the mixed cluster was the case before Megatron's fp32 main gradients were
    # counted: its top picks no longer sit near the A100s' capacity; GPT-3 13B on a DGX A100's do.)
    code, out, _ = run(capsys, "plan", "dgx-a100-gpt3-13b", "--top", "3")
    assert code == 0
    rows = [line for line in out.splitlines() if line.strip()[:1] in "123" and "GiB" in line]
    assert any(" !  " in row for row in rows)
    assert any(line.startswith("! within 11% of the GPU's capacity") for line in out.splitlines())


def test_minor_13_the_memory_band_is_validates_memory_error():
    """The band is validate's mean error on runs whose peak memory was measured, never narrower."""
    from amp_tui.core.plans.confidence import MEMORY_BAND
    from amp_tui.core.validation.replay import report, run_validation

    memory_mape = report(run_validation())["macro"]["memory_mape"]
    assert memory_mape <= MEMORY_BAND < memory_mape * 1.5


# Minor 17 -----------------------------------------------------------------------------------------
def test_minor_17_a_missing_field_is_not_called_none(capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(dump_yaml({"cluster": {"preset": "4x-g4dn.12xlarge"}, "training": {"global_batch_size": 8}}))
    code, _, err = run(capsys, "plan", path)
    assert code == 2 and "None" not in err and err.startswith("amp-tui: error: model")
