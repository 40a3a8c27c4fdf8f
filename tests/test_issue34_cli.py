"""Issue 34 (every figure says where it comes from) from the command line: one test per item, each
failed before its fix."""

from __future__ import annotations

import pytest

from amp_tui.cli import main
from amp_tui.core.base.yamlio import dump_yaml


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, name: str, data: dict):
    path = tmp_path / name
    path.write_text(dump_yaml(data))
    return path


# Major 5 ------------------------------------------------------------------------------------------
def test_major_5_a_context_parallel_degree_that_divides_no_gpu_count_is_named(capsys, tmp_path):
    """Before: "32 GPUs cannot be split as tp x pp x dp with dp dividing the global batch (512) ...
    Try a global batch of 513 or 30 GPUs", which no batch or GPU count of that kind would fix."""
    path = write(tmp_path, "cp5.yaml", {"cluster": {"nodes": [{"instance": "dgx-a100", "count": 4}]},
                                        "model": {"preset": "gpt2-medium"},
                                        "training": {"global_batch_size": 512, "context_parallel": 5}})
    code, out, _ = run(capsys, "plan", path)
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("no strategy:"))
    assert "Try a global batch" not in line and "513" not in line
    assert "context_parallel 5 divides no GPU count" in line and "nodes of 8 GPUs" in line
    assert "try context_parallel 2, 4 or 8" in line


def test_major_5_context_parallel_and_the_sequence_length(capsys, tmp_path):
    path = write(tmp_path, "cp3.yaml", {"cluster": {"nodes": [{"instance": "p4d.24xlarge", "count": 3}]},
                                        "model": {"preset": "gpt2-medium"},
                                        "training": {"global_batch_size": 24, "context_parallel": 3}})
    code, out, _ = run(capsys, "plan", path, "--use-all-gpus")
    line = next(line for line in out.splitlines() if line.startswith("no strategy:"))
    assert code == 1 and "2 x context_parallel (6) does not divide the sequence length (1024)" in line
    assert "divides no GPU count" not in line            # (3 divides 24)


# Minor: compare ---------------------------------------------------------------------------------------
MY_CLUSTER = {"name": "my-cluster", "cluster": {"nodes": [{"instance": "p4d.24xlarge", "count": 2},
                                                          {"instance": "g5.12xlarge", "count": 4}]},
              "model": {"preset": "llama2-13b"},
              "training": {"global_batch_size": 128, "precision": "bf16", "recompute": "full", "zero_stage": 1}}


def test_minor_compare_flags_a_strategy_that_does_not_fit_or_may_not(capsys, tmp_path):
    """Before: compare set 1x1x32 (57.7 GiB on a 22 GiB A10G) beside 2x1x8 without a word; evaluate
    said OVER. (Issue 35 counts Megatron's fp32 main gradients for bf16: 1x1x32 needs 81.3 GiB, and
    2x1x8, then 37.0 GiB, is over; 2x2x4 at micro-batch 4 is the pick near capacity.)"""
    scenario = write(tmp_path, "my-cluster.yaml", MY_CLUSTER)
    picks = tmp_path / "picks.yaml"
    picks.write_text("- {tp: 2, pp: 2, dp: 4, micro_batch_size: 4, idle: [{group: 1, nodes: 4}]}\n"
                     "- {tp: 1, pp: 1, dp: 32, micro_batch_size: 1}\n")
    code, out, _ = run(capsys, "compare", scenario, picks)
    assert code == 0
    lines = out.splitlines()
    assert ("note: 1x1x32 does not fit in memory: stage 0 (layers 0-41, A10G) needs 81.3 GiB of 22.0 GiB: "
            "59.3 GiB over") in lines
    assert any(line.startswith("note: 2x2x4 may not fit: stage 0 needs 37.2 GiB of 39.6 GiB") for line in lines)
    memory = next(line for line in lines if line.startswith("stage 0 memory"))
    assert "37.2 GiB !" in memory and "81.3 GiB OVER" in memory        # (as evaluate marks them)


# Minor: empty and malformed YAML ----------------------------------------------------------------------
def one_error_line(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1, (code, out, err)
    return err.strip()


@pytest.mark.parametrize("command", ["plan", "evaluate", "compare", "calibrate"])
def test_minor_an_empty_yaml_file_is_called_empty(capsys, tmp_path, command):
    """Before: "scenario: 'NoneType': expected a mapping with cluster, model and training"."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n\n")
    argv = [command, empty] if command == "plan" else [command, "paper-homogeneous", empty]
    line = one_error_line(capsys, *argv)
    assert "NoneType" not in line
    assert line.startswith(f"amp-tui: error: file: '{empty}': is empty (no YAML value in it") and "expected" in line


def test_minor_a_yaml_syntax_error_names_its_position_as_the_field_and_quotes_the_line(capsys, tmp_path):
    """Before: "broken.yaml: 'line 3, column 4': malformed YAML: ...", the position shown as the value."""
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\ncluster: 1\n  model: 2\n")
    line = one_error_line(capsys, "plan", broken)
    assert line == (f"amp-tui: error: {broken} (line 3, column 8): 'model: 2': malformed YAML: "
                    "mapping values are not allowed in this context")
    broken.write_text("name: x\ncluster:\n  nodes: [\nmodel: foo\n")
    line = one_error_line(capsys, "plan", broken)
    assert line == (f"amp-tui: error: {broken} (line 5, column 1): malformed YAML: did not find expected ',' or ']' "
                    "(while parsing a flow sequence from line 3)")


def test_minor_one_source_is_not_1_sources(capsys):
    """Before: "macro (1 sources)" under `validate --source amp-homogeneous`."""
    code, out, _ = run(capsys, "validate", "--source", "amp-homogeneous")
    assert code == 0 and "macro (1 source) " in out and "sources)" not in out


def test_minor_the_micro_batch_count_has_one_name(capsys):
    code, out, _ = run(capsys, "plan", "paper-homogeneous", "--top", "1")
    header = next(line for line in out.splitlines() if line.startswith("rank  "))
    assert header.split()[6:8] == ["mbs", "B"]         # (as the dashboard's table calls them)


# Minor: a swapped GPU keeps no instance price ----------------------------------------------------------
SWAPPED = {"name": "swap", "cluster": {"nodes": [{"instance": "p3.8xlarge", "count": 2},
                                                 {"instance": "g4dn.12xlarge", "count": 1, "gpu": "A10G"}]},
           "model": {"preset": "gpt2-medium"}, "training": {"global_batch_size": 32}}


def test_minor_an_instance_whose_gpu_is_swapped_has_no_price_unless_given():
    """Before: a g4dn.12xlarge given A10Gs kept the g4dn's $3.91/hour (its T4s' price)."""
    from amp_tui.core.spec.scenario import parse_scenario

    swapped = parse_scenario(SWAPPED)
    assert swapped.cluster.nodes[1].price_per_hour is None
    assert swapped.cluster.nodes[0].price_per_hour is not None      # (the p3.8xlarge is as listed)
    same = parse_scenario({**SWAPPED, "cluster": {"nodes": [{"instance": "g4dn.12xlarge", "gpu": "T4"}]}})
    assert same.cluster.nodes[0].price_per_hour is not None         # (the instance's own GPU)
    given = {"instance": "g4dn.12xlarge", "gpu": "A10G", "price_per_hour": 5.0}
    assert parse_scenario({**SWAPPED, "cluster": {"nodes": [given]}}).cluster.nodes[0].price_per_hour == 5.0
    assert parse_scenario(swapped.to_dict()) == swapped              # (the round trip keeps it unknown)


def test_minor_plan_says_why_a_swapped_gpu_has_no_price(capsys, tmp_path):
    code, out, _ = run(capsys, "plan", write(tmp_path, "swap.yaml", SWAPPED), "--top", "3")
    assert code == 0
    assert ("note: no price for cluster.nodes[1] (g4dn.12xlarge): its price is for T4s, not A10G; set "
            "price_per_hour to price it") in out.splitlines()
