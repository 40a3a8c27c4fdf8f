"""The command line end to end through `amp_tui.cli.main`: plan, evaluate, bench and presets output,
plan files, and the one-line errors with exit status 2. Expected figures come from the core API."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from amp_tui import __version__
from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.plans.planfile import load_plan
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.search.subclusters import search_parts
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.core.spec.strategy import Strategy
from tests.core.fake_clock import install

PAPER = ("paper-homogeneous", "paper-het-cluster", "paper-het-model")
STRATEGY_KEYS = ("tp", "pp", "dp", "micro_batch_size", "partition", "placement")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `amp-tui ARGV`."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def user_error(capsys, *argv: str) -> str:
    """Run a command that must be refused: status 2, one stderr line, no traceback. The line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("amp-tui: error:"), err
    return lines[0]


def strategy_of(entry: dict) -> Strategy:
    """The Strategy a JSON strategy entry describes: its degrees, split and placement, the training
    techniques and idle nodes it names."""
    from amp_tui.core.spec.strategy import KNOB_FIELDS, parse_strategy

    return parse_strategy({k: entry[k] for k in (*STRATEGY_KEYS, *KNOB_FIELDS, "idle", "ep") if k in entry})


def write_scenario(tmp_path, name="tiny.yaml", **node) -> str:
    """paper-homogeneous with its cluster written out as one node group (fields in `node` win)."""
    data = load_preset("scenarios", "paper-homogeneous")
    data["cluster"] = {"nodes": [{"instance": "g4dn.12xlarge", "count": 4, **node}]}
    path = tmp_path / name
    path.write_text(dump_yaml(data))
    return str(path)


# -- plan --json -------------------------------------------------------------------------------------

def test_plan_json_shape_and_figures(capsys):
    """`plan --json --top 3`: the documented keys, 3 ranked feasible strategies, consistent statistics."""
    data = run_json(capsys, "plan", "paper-het-cluster", "--top", "3")
    scenario = load_scenario("paper-het-cluster")
    assert set(data) == {"scenario", "search_time_s", "candidates", "statistics", "strategies", "infeasible",
                         "baseline", "speedup_vs_baseline", "objective", "budget_usd_per_hour", "idle_search", "uneven_search",
                         "uncertainty", "uncertainty_basis", "time_limit_s", "overrun_s", "layer_times"}
    assert data["layer_times"]["by_gpu"] == {"V100": "measured (AMP 2020, V100)", "T4": "measured (AMP 2020, T4)"}
    # the default's wall-clock safety net (the work budget ends the search first on a quiet machine)
    assert 2.0 <= data["time_limit_s"] <= 3.0      # (less where the command took long to start)
    assert data["uncertainty"] is None and "mixed GPUs" in data["uncertainty_basis"]     # (no such run replayed)
    assert data["scenario"] == "paper-het-cluster"
    # candidates of every part of the cluster searched (the whole cluster's alone with --use-all-gpus)
    assert data["candidates"] == data["statistics"]["candidates"] == search_parts(scenario, top=3)[0].stats.candidates
    assert data["idle_search"]["exact"] is True and data["objective"] == "time"
    strategies = data["strategies"]
    assert [s["rank"] for s in strategies] == [1, 2, 3]
    times = [s["iteration_time_s"] for s in strategies]
    assert times == sorted(times)
    for s in strategies:
        assert {"rank", *STRATEGY_KEYS, "num_micro_batches", "iteration_time_s", "samples_per_s", "fits_memory",
                "peak_memory_bytes", "stages"} <= set(s)
        assert s["fits_memory"] is True
        if isinstance(s["tp"], list):       # per-stage degrees (the plan's post-pass): a stage is tp_s x dp_s
            gpus = sum(t * d for t, d in zip(s["tp"], s["dp"]))
        else:
            gpus = s["tp"] * s["pp"] * s["dp"]
        assert gpus == s["gpus_used"] <= scenario.cluster.num_gpus == 16
        # the GPUs a strategy does not use are on the nodes it names idle
        idle_gpus = sum(e["nodes"] * scenario.cluster.nodes[e["group"]].gpus_per_node for e in s.get("idle", []))
        assert s["gpus_used"] + idle_gpus == 16
        assert sum(s["partition"]) == scenario.model.num_layers
        assert len(s["stages"]) == s["pp"]
        assert {st["time_source"] for st in s["stages"]} <= {"measured (AMP 2020, V100)", "measured (AMP 2020, T4)"}
        assert s["time_source_warning"] is None
    assert data["infeasible"] and len(data["infeasible"]) == data["statistics"]["infeasible"]
    for entry in data["infeasible"]:
        assert re.search(r"\bstage \d+\b", entry["reason"]) and "over" in entry["reason"]
    assert data["speedup_vs_baseline"] == data["baseline"]["iteration_time_s"] / times[0]


def test_evaluate_reproduces_plan(capsys):
    """The core's evaluate, given each strategy plan printed, predicts exactly the same figures."""
    scenario = load_scenario("paper-het-cluster")
    for entry in run_json(capsys, "plan", "paper-het-cluster", "--top", "3")["strategies"]:
        prediction = evaluate(scenario, strategy_of(entry))
        assert prediction.iteration_time_s == entry["iteration_time_s"]
        assert prediction.samples_per_s == entry["samples_per_s"]
        assert prediction.peak_memory_bytes == entry["peak_memory_bytes"]


@pytest.mark.parametrize("name", ["paper-het-cluster", "paper-het-model"])
def test_infeasible_list_does_not_depend_on_top(capsys, name):
    """Which candidates are out of memory, and why, is the same whether 1 or 10 strategies are kept."""
    one, ten = (run_json(capsys, "plan", name, "--top", top) for top in ("1", "10"))
    assert one["infeasible"] and one["infeasible"] == ten["infeasible"]
    assert one["statistics"]["infeasible"] == ten["statistics"]["infeasible"]


def test_plan_json_shows_top_strategies_even_when_saving_a_lower_rank(capsys, tmp_path):
    """`--top 1 --save F --rank 3` saves rank 3 but shows one strategy, in JSON as in the table."""
    path = tmp_path / "p.yaml"
    data = run_json(capsys, "plan", "paper-homogeneous", "--top", "1", "--save", path, "--rank", "3")
    third = search(load_scenario("paper-homogeneous"), top=3).strategies[2]
    assert load_plan(path).strategy == third.strategy
    assert len(data["strategies"]) == 1


# -- plan (text) -------------------------------------------------------------------------------------

def ranked_rows(text: str) -> list[str]:
    """The rows of the ranked table: the lines after the dashed rule, up to the blank line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("----")) + 1
    end = lines.index("", start)
    return lines[start:end]


def test_plan_text(capsys):
    """Header naming the scenario, search statistics, ranks 1.. and the uniform baseline line."""
    code, out, err = run(capsys, "plan", "paper-homogeneous")
    assert code == 0 and err == ""
    lines = out.splitlines()
    scenario = load_scenario("paper-homogeneous")
    assert lines[0].startswith(f"paper-homogeneous: {scenario.cluster.num_gpus} GPUs")
    assert lines[1].startswith("techniques fixed: ")   # which techniques the user fixed, which the search chose
    assert lines[2] == "layer times: on T4 measured (AMP 2020, T4)"    # where each GPU type's layer times come from
    assert lines[3].startswith("searched ")
    expected = len(search(scenario).strategies)
    assert [row.split()[0] for row in ranked_rows(out)] == [str(i) for i in range(1, expected + 1)]
    assert any(line.startswith("uniform baseline (even split, rank order): ") for line in lines)


def test_plan_text_top(capsys):
    code, out, _ = run(capsys, "plan", "paper-homogeneous", "--top", "2")
    assert code == 0
    assert [row.split()[0] for row in ranked_rows(out)] == ["1", "2"]


# -- plan --save and evaluate ----------------------------------------------------------------------

def test_plan_save_force_and_rank(capsys, tmp_path):
    """--save writes the chosen rank; an existing file is kept without --force; a missing rank writes nothing."""
    path = tmp_path / "plan.yaml"
    from amp_tui.core.search.uneven import improve

    scenario = load_scenario("paper-het-cluster")
    best = improve(scenario, search_parts(scenario, top=scenario.search.top)[0])[0].strategies   # as plan ranks them
    code, out, _ = run(capsys, "plan", "paper-het-cluster", "--save", path, "--rank", "2")
    assert code == 0 and f"saved strategy 2 to {path}" in out
    assert load_plan(path).strategy == best[1].strategy
    original = path.read_bytes()

    line = user_error(capsys, "plan", "paper-het-cluster", "--save", path)
    assert line.startswith("amp-tui: error: --save: ") and "already exists (use --force" in line
    assert path.read_bytes() == original

    code, _, _ = run(capsys, "plan", "paper-het-cluster", "--save", path, "--force")
    assert code == 0 and load_plan(path).strategy == best[0].strategy

    line = user_error(capsys, "plan", "paper-het-cluster", "--save", tmp_path / "other.yaml", "--rank", "999")
    assert line.startswith("amp-tui: error: --rank: 999: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]


def test_plan_save_refusal_shows_the_whole_path(capsys, tmp_path):
    """Like every other file error, the refusal names the file in full, however long its path."""
    path = tmp_path / ("a-folder-name-long-enough-to-pass-sixty-characters" * 2) / "plan.yaml"
    path.parent.mkdir()
    path.write_text("keep me\n")
    assert f"'{path.parent / 'nope.yaml'}'" in user_error(capsys, "plan", path.parent / "nope.yaml")   # as here
    assert f"'{path}'" in user_error(capsys, "plan", "paper-homogeneous", "--save", path)


def test_plan_save_force_onto_a_directory_is_a_user_error(capsys, tmp_path):
    """`--save DIR --force` with DIR an existing folder is refused like any other bad path."""
    (tmp_path / "out").mkdir()
    line = user_error(capsys, "plan", "paper-homogeneous", "--save", tmp_path / "out", "--force")
    assert line.startswith("amp-tui: error: --save: ") and str(tmp_path / "out") in line


def test_evaluate_saved_plan_is_unchanged(capsys, tmp_path):
    path = tmp_path / "plan.yaml"
    assert run(capsys, "plan", "paper-het-model", "--save", path)[0] == 0
    code, out, _ = run(capsys, "evaluate", path)
    assert code == 0 and "figures unchanged since the plan was saved" in out
    assert run_json(capsys, "evaluate", path)["changed_since_saved"] == []


def test_evaluate_strategies_file(capsys, tmp_path):
    """Two strategies come back in input order; plan's best partition reproduces its iteration time."""
    best = run_json(capsys, "plan", "paper-het-cluster", "--top", "1")["strategies"][0]
    other = {"tp": 1, "pp": 2, "dp": 8, "micro_batch_size": 2}
    assert (best["tp"], best["pp"], best["dp"]) != (1, 2, 8)
    path = tmp_path / "strategies.yaml"
    path.write_text(dump_yaml([other, strategy_of(best).to_dict()]))
    first, second = run_json(capsys, "evaluate", "paper-het-cluster", path)
    assert (first["tp"], first["pp"], first["dp"], first["micro_batch_size"]) == (1, 2, 8, 2)
    assert first["placement"] == [0, 1]   # default: rank order
    assert {k: second[k] for k in STRATEGY_KEYS} == {k: best[k] for k in STRATEGY_KEYS}
    assert second["iteration_time_s"] == best["iteration_time_s"]


# -- bad input -----------------------------------------------------------------------------------------

def write_bad_inputs(tmp_path) -> None:
    """The files the bad-input cases read, each wrong in one field."""
    write_scenario(tmp_path, "negative.yaml", inter_node_bandwidth="-5 Gbps")
    write_scenario(tmp_path, "empty-group.yaml", count=0)
    (tmp_path / "malformed.yaml").write_text("name: x\ncluster: [unclosed\n")
    (tmp_path / "degrees.yaml").write_text(dump_yaml([{"tp": 1, "pp": 4, "dp": 2, "micro_batch_size": 1}]))
    (tmp_path / "partition.yaml").write_text(
        dump_yaml([{"tp": 1, "pp": 4, "dp": 4, "micro_batch_size": 1, "partition": [8, 8, 8, 8]}]))


BAD_INPUT = {  # case: (arguments, {tmp} standing for tmp_path; what the error line must contain)
    "negative bandwidth": (["plan", "{tmp}/negative.yaml"], ["cluster.nodes[0].inter_node_bandwidth", "'-5 Gbps'"]),
    "malformed yaml": (["plan", "{tmp}/malformed.yaml"], ["malformed.yaml", "malformed YAML"]),
    "zero count": (["plan", "{tmp}/empty-group.yaml"], ["cluster.nodes[0].count: 0:"]),
    "missing file": (["plan", "{tmp}/nope.yaml"], ["nope.yaml", "no such file"]),
    "unknown preset": (["plan", "no-such-preset"], ["'no-such-preset'"]),
    "top 0": (["plan", "paper-homogeneous", "--top", "0"], ["--top: 0:"]),
    "time limit 0": (["plan", "paper-homogeneous", "--time-limit", "0"], ["--time-limit: 0.0:", "more than 0"]),
    "time limit nan": (["plan", "paper-homogeneous", "--time-limit", "nan"], ["--time-limit: nan:"]),
    "time limit huge": (["plan", "paper-homogeneous", "--time-limit", "1e9"], ["--time-limit: 1000000000.0:", "3,600"]),
    "bench runs 0": (["bench", "--runs", "0"], ["--runs: 0:"]),
    "bench unknown": (["bench", "--only", "nosuch"], ["--only: 'nosuch':"]),
    "degrees": (["evaluate", "paper-homogeneous", "{tmp}/degrees.yaml"], ["strategies[0].tp*pp*dp", "1*4*2=8", "(16)"]),
    "partition sum": (["evaluate", "paper-homogeneous", "{tmp}/partition.yaml"],
                      ["strategies[0].partition: [8, 8, 8, 8]:", "30 layers"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_naming_field_and_value(capsys, tmp_path, case):
    write_bad_inputs(tmp_path)
    argv, needles = BAD_INPUT[case]
    line = user_error(capsys, *(arg.format(tmp=tmp_path) for arg in argv))
    for needle in needles:
        assert needle in line


def test_plan_past_its_time_limit_says_what_was_cut_short_and_how_to_search_longer(capsys):
    # (the search's clock, conftest.py: the limit, 3,000 reads, passes in the whole cluster's search)
    code, out, _ = run(capsys, "plan", "bench-1024-gpus-1000-layers", "--top", "1", "--time-limit", "0.3")
    assert code == 0
    # (the limit's work budget, work.py, ends the search before the safety net on the test's clock)
    assert re.search(r"^note: .*(stopped at the time limit|within the work budget).*"
                     r"(at most \d+\.\d% above the optimum|nothing found)", out, re.M)
    assert "--time-limit S searches longer" in out


def test_plan_by_default_finds_a_first_strategy_past_a_limit_start_up_used_up(capsys, monkeypatch):
    """A loaded machine spent plan's default 1.5 s before the first strategy and plan answered
    with none: the default gives way until one is found, and plan says by how much."""
    import amp_tui.core.search.work as work

    # (the command starts now on the search's clock, conftest.py)
    monkeypatch.setattr(work, "DEFAULT_SAFETY_S", 0.0)       # start-up took all of it ...
    monkeypatch.setattr(work, "DEFAULT_SAFETY_MIN_S", 0.01)  # ... as on a machine far slower than this one
    code, out, _ = run(capsys, "plan", "bench-1024-gpus-1000-layers", "--top", "1")
    assert code == 0
    assert re.search(r"^note: no strategy was found within the default time limit .*; the search went on "
                     r"\d\S* s past it until it found one$", out, re.M)
    # the whole cluster's first strategy, and no part searched beyond it (which strategy comes first is
    # the search's order: 2x4x128 before the quick partitions of issue 36's round 2, 2x16x32 after)
    assert re.search(r"^ +1 +\d+x\d+x\d+ ", out, re.M) and re.search(r"^ranked by .*; 1 of \d+ ways", out, re.M)
    assert "no strategy" not in out.split("note: no strategy was found")[0]


def test_an_explicit_time_limit_holds_even_with_nothing_found(capsys, monkeypatch):
    clock = install(monkeypatch, per_read=1e-3)      # the search's clock: 10 reads to the limit
    code, out, _ = run(capsys, "plan", "bench-1024-gpus-1000-layers", "--top", "1", "--time-limit", "0.01")
    assert code == 0 and clock.reads < 100      # (the first strategy takes ~1,500: it did not go on to it)
    assert "no strategy found within the time limit" in out and "fits" not in out.split("\n\n")[1]
    assert "no strategy was found within the default" not in out


def test_the_scenario_file_helper_makes_a_valid_scenario(capsys, tmp_path):
    """The bad-input scenarios differ from a good one only in the field under test."""
    code, out, _ = run(capsys, "plan", write_scenario(tmp_path), "--top", "1")
    assert code == 0 and out.startswith("paper-homogeneous: 16 GPUs")


# -- bench and presets --------------------------------------------------------------------------------

def test_bench_json(capsys):
    """One row with its documented fields; no assertion on speed."""
    (row,) = run_json(capsys, "bench", "--only", "paper-homogeneous", "--runs", "1")
    scenario = load_scenario("paper-homogeneous")
    assert row["scenario"] == "paper-homogeneous"
    assert (row["gpus"], row["layers"]) == (scenario.cluster.num_gpus, scenario.model.num_layers)
    assert row["median_s"] > 0 and row["target_s"] > 0 and row["cancel_target_s"] > 0
    assert isinstance(row["meets_target"], bool)
    assert row["candidates"] == search(scenario).stats.candidates
    assert 0 < row["evaluated"] <= row["candidates"]
    assert row["candidates_per_s"] == row["candidates"] / row["median_s"]
    assert row["peak_memory_bytes"] > 0 and row["worst_poll_gap_s"] > 0
    assert row["machine_factor"] > 0
    # `plan` as users run it, beside the search alone; of it, the idle search (its search_time_s)
    assert 0 < row["idle_median_s"] < row["plan_median_s"] and row["plan_exact"] is True
    assert row["plan_top"].startswith("1x4x4") and row["idle_ratio_target"] == 1.5
    assert row["plan_overrun_s"] == 0.0       # (it finds its first strategy well within the limit)


def test_bench_says_when_plan_went_past_its_limit_for_a_first_strategy():
    from amp_tui.core.search.bench import render_markdown

    row = {"scenario": "x", "median_s": 1.0, "target_s": 2.0, "plan_median_s": 2.4, "plan_target_s": 1.6,
           "idle_median_s": 2.3, "idle_target_s": None, "idle_ratio_target": None, "plan_exact": False,
           "plan_gap": 0.216, "plan_overrun_s": 0.8, "meets_target": False, "machine_factor": 2.0,
           "plan_top": "2x4x128 mbs 1, 12.16 s"}
    assert "| gap 21.6%, +0.8s to a first **missed** |" in render_markdown([row])


def test_bench_rows_in_the_documented_order():
    """docs/benchmarks.md's table lists the rows as `amp-tui bench` prints them."""
    from pathlib import Path

    from amp_tui.core.search.bench import BENCHMARKS

    docs = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text()
    listed = [name for name in re.findall(r"^\| ([a-z0-9.-]+) \|", docs, re.M) if name not in ("scenario", "---")]
    assert listed == [b.name for b in BENCHMARKS]


def test_bench_text(capsys):
    code, out, _ = run(capsys, "bench", "--only", "paper-homogeneous", "--runs", "1")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("paper-homogeneous")]
    assert len(rows) == 1
    assert "cancel" in out
    # ok (either), plan exact, ..., the machine factor, plan's best
    assert re.search(r" (yes|NO) +yes +\d+ +\d+ .* \d+\.\d\dx  1x4x4 ", rows[0]) and "machine: a fixed workload" in out
    assert "plan: what `amp-tui plan` runs" in out


def test_presets(capsys):
    listing = run_json(capsys, "presets")
    assert set(PAPER) <= set(listing["scenarios"])
    code, out, _ = run(capsys, "presets")
    assert code == 0 and out.startswith("scenarios:")
    assert all(re.search(rf"^  {name}\s", out, re.M) for name in PAPER)


def test_version_via_python_m():
    done = subprocess.run([sys.executable, "-m", "amp_tui", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == f"amp-tui {__version__}"
