"""`amp-tui validate --runs FILE`: a measured-runs file of one's own, in the published schema, is
replayed and scored per source; AMP's other trials (its heterogeneous cluster and model, whatever
their ids) replay the paper's presets on the nodes they name, with their stage bounds; runs on
mixed GPUs get the partition their engine would run; a bad file gets one line and exit 2, and a
bad run is kept out with why while the others are scored."""

from __future__ import annotations

import copy
import json
import os

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_tui.cli import main
from amp_tui.core.base.errors import SpecError
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.core.spec.strategy import Strategy
from amp_tui.core.validation.replay import report, run_validation
from amp_tui.core.validation.runs import (
    AMP_OTHER,
    cases_of,
    load_cases,
    load_runs,
    parse_run,
    source_key,
)


def _amp_run(run_id: str, cluster: dict, model: str = "GPT-2 medium (AMP)", bounds=(0, 8, 16, 23, 30),
             dp: int = 4, mbs: int = 1, gbs: int = 32, seconds: float = 1.5) -> dict:
    """An AMP trial in the schema of the published homogeneous ones."""
    return {"id": run_id, "group": "amp-other", "source": {"title": "Li, Wang, Xing, Zhang: AMP (NeurIPS 2022)"},
            "model": {"name": model}, "cluster": cluster,
            "training": {"framework": "DeepSpeed pipeline engine", "precision": "fp16", "tp": 1,
                         "pp": len(bounds) - 1, "dp": dp, "micro_batch": mbs, "global_batch": gbs,
                         "recompute": "none", "zero": "none", "stage_bounds_over_amp_entries": list(bounds)},
            "measured": {"iteration_time_s": seconds, "failed": False}}


HET_CLUSTER = {"name": "3 x AWS p3.8xlarge + 1 x AWS g4dn.12xlarge", "num_gpus": 16, "gpus_per_node": 4,
               "heterogeneous": True}


@pytest.mark.parametrize("cluster", [
    HET_CLUSTER,
    {**HET_CLUSTER, "name": "AMP's heterogeneous cluster", "gpu_mix": "12x V100 + 4x T4"},
    {**HET_CLUSTER, "name": "mixed", "gpu_mix": [{"gpu": "V100", "num_gpus": 12}, {"gpu": "T4", "num_gpus": 4}]},
])
def test_an_amp_heterogeneous_cluster_trial_replays_the_paper_preset_on_its_nodes(cluster):
    case = parse_run(_amp_run("amp-het-cluster-07", cluster))
    assert case.source == AMP_OTHER and case.heterogeneous and not case.data_gaps
    preset = load_scenario("paper-het-cluster")
    assert [(g.instance, g.count) for g in case.scenario.cluster.nodes] == [("p3.8xlarge", 3), ("g4dn.12xlarge", 1)]
    assert case.scenario.model.num_layers == 30 and case.strategy.partition == (8, 8, 7, 7)
    # the same prediction as the preset evaluated by hand: AMP's measured layers, DeepSpeed's training
    by_hand = evaluate(preset, Strategy(tp=1, pp=4, dp=4, micro_batch_size=1, partition=(8, 8, 7, 7)))
    assert evaluate(case.scenario, case.strategy).iteration_time_s == pytest.approx(by_hand.iteration_time_s, rel=1e-12)


def test_the_order_a_trial_lists_its_gpus_in_is_the_order_ranks_fill_them():
    t4_first = parse_run(_amp_run("amp-x", {**HET_CLUSTER, "gpu_mix": "4x T4 + 12x V100"}))
    assert [g.gpu.name for g in t4_first.scenario.cluster.nodes] == ["T4", "V100"]


def test_an_amp_heterogeneous_model_trial_replays_transgan_with_its_56_entries():
    cluster = {"name": "4 x AWS p3.8xlarge", "gpu": "V100", "num_gpus": 16, "gpus_per_node": 4}
    run = _amp_run("amp-heterogeneous-model-12", cluster, model="TransGAN generator", bounds=(0, 20, 56), dp=8,
                   gbs=64)
    case = parse_run(run)
    preset = load_scenario("paper-het-model")
    assert case.source == AMP_OTHER and not case.heterogeneous and not case.data_gaps
    assert case.scenario.model.name == preset.model.name and case.scenario.model.num_layers == 56
    assert case.scenario.training.global_batch_size == 64 and case.strategy.partition == (20, 36)
    wrong = parse_run({**run, "training": {**run["training"], "stage_bounds_over_amp_entries": [0, 20, 30]}})
    assert case.scenario is not None and wrong.scenario is None
    assert any("stage_bounds_over_amp_entries" in gap for gap in wrong.data_gaps)


def test_the_published_amp_runs_are_still_their_own_source():
    runs = [run for run in load_runs() if str(run["id"]).startswith("amp-")]
    assert runs and {source_key(run) for run in runs} == {"amp-homogeneous"}


def _write(tmp_path, runs) -> str:
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": runs}))
    return str(path)


def test_validate_runs_scores_a_file_of_ones_own_with_new_sources(tmp_path, capsys):
    mine = copy.deepcopy(next(run for run in load_runs() if source_key(run) == "llmfoundry"))
    mine["id"] = "my-lab-01"
    mine["source"] = {"title": "My lab, our own cluster"}
    runs = [mine, _amp_run("amp-het-cluster-01", HET_CLUSTER), _amp_run("amp-het-cluster-02", HET_CLUSTER, dp=2,
                                                                        bounds=(0, 4, 8, 12, 16, 20, 24, 27, 30))]
    path = _write(tmp_path, runs)
    assert main(["validate", "--runs", path]) == 0
    assert capsys.readouterr().out.startswith(f"cost model against the measured runs of {path}: 3 of 3 runs replayed")
    assert main(["validate", "--runs", path, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["runs"] == 3 and rep["replayed"] == 3
    assert list(rep["sources"]) == [AMP_OTHER, "my-lab"]
    assert rep["sources"][AMP_OTHER]["replayed"] == 2 and rep["macro"]["sources"] == 2
    # the same figures as replaying the cases directly, and --source picks a new source
    direct = report(run_validation(cases=load_cases(tmp_path / "runs.yaml")))
    assert direct["sources"] == rep["sources"]
    assert main(["validate", "--runs", path, "--source", "my-lab"]) == 0
    out = capsys.readouterr().out
    assert "my-lab" in out and AMP_OTHER not in out


def test_a_run_with_a_field_of_another_kind_is_not_replayed_and_the_others_are(tmp_path, capsys):
    odd = _amp_run("metis-like-01", HET_CLUSTER)
    odd["training"]["tp"] = [1, 2]      # per-stage degrees: two for its four stages
    path = _write(tmp_path, [odd, _amp_run("amp-het-cluster-01", HET_CLUSTER)])
    assert main(["validate", "--runs", path, "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 runs replayed" in out and "metis-like-01" in out and "cannot be read" in out and "training.tp" in out


@pytest.mark.parametrize("content, field", [
    ("runs: [1, 2]", "runs[0]"),
    ("just text", "measured runs"),
    ("runs: [{id: x", "bad.yaml (line 2, column 1)"),     # a syntax error: the file and where (issue 34)
])
def test_a_bad_runs_file_gets_one_line_and_exit_2(tmp_path, capsys, content, field):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    assert main(["validate", "--runs", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err


def test_validate_runs_refuses_to_write_bands_or_fit(tmp_path, capsys):
    path = _write(tmp_path, [_amp_run("amp-het-cluster-01", HET_CLUSTER)])
    assert main(["validate", "--runs", path, "--write-bands"]) == 2
    assert main(["validate", "--runs", path, "--fit"]) == 2
    assert main(["validate", "--runs", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def _mixed_run(framework: str, **training) -> dict:
    """A run on 8 A100 + 8 V100 in the published schema, its parts each with their own links."""
    return {"id": "mixed-01", "source": {"title": "A heterogeneous-training paper"},
            "model": {"name": "GPT 1.3B", "layers": 24, "hidden": 2048, "heads": 16, "vocab": 50257, "seq_len": 2048},
            "cluster": {"name": "8 A100 + 8 V100", "num_gpus": 16, "heterogeneous": True, "gpu_mix": [
                {"gpu": "A100-SXM4-40GB", "num_gpus": 8, "gpus_per_node": 8, "intra_node": "600 GB/s",
                 "inter_node": "100 Gbps"},
                {"gpu": "V100-SXM2-32GB", "num_gpus": 8, "gpus_per_node": 8, "intra_node": "300 GB/s",
                 "inter_node": "100 Gbps"}]},
            "training": {"framework": framework, "precision": "fp16", "tp": 1, "pp": 2, "dp": 8, "micro_batch": 4,
                         "global_batch": 128, "recompute": "none", **training},
            "measured": {"iteration_time_s": 1.0}}


def test_a_planner_for_mixed_gpus_is_replayed_with_the_best_partition_a_stock_engine_with_the_even_one():
    planner, stock = parse_run(_mixed_run("Metis on Alpa")), parse_run(_mixed_run("Megatron-LM"))
    assert planner.heterogeneous and not planner.data_gaps and not stock.data_gaps
    assert [g.gpu.name for g in planner.scenario.cluster.nodes] == ["A100-40GB", "V100-32GB"]
    assert planner.strategy.partition is None and any("best for its degrees" in a for a in planner.assumptions)
    assert stock.strategy.partition == (13, 13)        # 12 blocks each, the embedding first, the head last
    balanced = evaluate(planner.scenario, planner.strategy)
    even = evaluate(stock.scenario, stock.strategy)
    # the A100 stage takes more layers, and the iteration is faster than the even split's
    assert balanced.strategy.partition[0] > balanced.strategy.partition[1]
    assert balanced.iteration_time_s < even.iteration_time_s


def test_stated_blocks_per_stage_are_the_partition():
    case = parse_run(_mixed_run("Megatron-LM", layers_per_stage=[15, 9]))
    assert case.strategy.partition == (16, 10)
    bad = parse_run(_mixed_run("Megatron-LM", layers_per_stage=[15, 8]))
    assert bad.scenario is None and any("layers_per_stage" in gap for gap in bad.data_gaps)


def test_per_stage_degrees_are_replayed_as_a_strategy_file_states_them():
    """A planner that gives each GPU type's stages their own degrees (Metis): tp and dp as lists
    of one per stage, pp their length where not stated; the GPU count is the stages' sum."""
    run = _mixed_run("Metis on Alpa", tp=[2, 1], dp=[4, 8])
    del run["training"]["pp"]
    case = parse_run(run)
    assert not case.data_gaps and case.strategy.pp == 2
    assert (case.strategy.stage_tp, case.strategy.stage_dp) == ((2, 1), (4, 8))
    assert any("per-stage degrees" in note for note in case.assumptions)
    by_hand = evaluate(case.scenario, Strategy(tp=2, pp=2, dp=8, micro_batch_size=4, stage_tp=(2, 1), stage_dp=(4, 8)))
    (replayed,) = run_validation(cases=[case]).replayed
    assert replayed.predicted_s == pytest.approx(by_hand.iteration_time_s, rel=1e-12)
    # 2 x 4 + 2 x 8 GPUs are not the 16 the run states; three stages need three entries
    assert "parallel degrees do not multiply to the stated GPU count" in parse_run(
        _mixed_run("Metis", tp=[2, 2], dp=[4, 8])).data_gaps
    with pytest.raises(SpecError, match="training.tp.*needs 3 entries"):
        parse_run(_mixed_run("Metis", tp=[2, 1], dp=[4, 8], pp=3))


def test_batch_shares_are_replayed_and_a_share_that_does_not_add_up_is_kept_out():
    """HetPipe-style uneven shares: the A100 replicas take 10 samples each, the V100 ones 6."""
    shares = [10] * 8 + [6] * 8
    case = parse_run(_mixed_run("HetPipe on PyTorch", pp=1, dp=16, micro_batch=2, batch_shares=shares))
    assert not case.data_gaps and case.strategy.batch_shares == tuple(shares)
    by_hand = evaluate(case.scenario, Strategy(tp=1, pp=1, dp=16, micro_batch_size=2, batch_shares=tuple(shares)))
    even = evaluate(case.scenario, Strategy(tp=1, pp=1, dp=16, micro_batch_size=2))
    (replayed,) = run_validation(cases=[case]).replayed
    assert replayed.predicted_s == pytest.approx(by_hand.iteration_time_s, rel=1e-12)
    assert by_hand.iteration_time_s < even.iteration_time_s     # the V100s no longer set the pace alone
    short = parse_run(_mixed_run("HetPipe on PyTorch", pp=1, dp=16, micro_batch=2, batch_shares=[10] * 16))
    (skipped,) = run_validation(cases=[short]).skipped
    assert any("batch_shares" in reason for reason in skipped.reasons)


def test_hopper_export_versions_replay_on_their_parents_figures_with_their_nvlink():
    """H20 (its own catalog entry on the HGX board's NVSwitch) beside H800 (the H100's compute with
    NVLink cut to 200 GB/s per direction)."""
    run = _mixed_run("Megatron-LM")
    run["cluster"] = {"name": "H20 + H800", "num_gpus": 16, "heterogeneous": True, "gpu_mix": [
        {"gpu": "NVIDIA H20", "num_gpus": 8, "gpus_per_node": 8, "intra_node": "NVLink", "inter_node": "400 Gbps"},
        {"gpu": "H800 SXM", "num_gpus": 8, "gpus_per_node": 8, "intra_node": "NVLink", "inter_node": "400 Gbps"}]}
    case = parse_run(run)
    assert not case.data_gaps
    (h20, h800) = case.scenario.cluster.nodes
    assert (h20.gpu.name, h800.gpu.name) == ("H20", "H100")
    assert h20.intra_node_bandwidth == pytest.approx(450e9) and h800.intra_node_bandwidth == pytest.approx(200e9)
    assert h20.gpu.peak_flops_16 < h800.gpu.peak_flops_16 / 6


@pytest.mark.parametrize("framework, balanced", [
    ("Megatron-LM on Ampere GPUs", False), ("DeepSpeed", False), ("HetPipe on PyTorch", True),
    ("a heterogeneity-aware scheduler over Megatron-LM", True), ("our system", True)])
def test_which_engines_split_evenly_on_mixed_gpus(framework, balanced):
    assert (parse_run(_mixed_run(framework)).strategy.partition is None) == balanced


def test_a_gpu_mix_may_name_instances_and_count_their_nodes():
    case = parse_run({**_mixed_run("Megatron-LM"), "cluster": {
        "name": "AWS", "num_gpus": 32, "heterogeneous": True, "gpu_mix": "2 x p4d.24xlarge + 4 x AWS g5.12xlarge"}})
    groups = case.scenario.cluster.nodes
    assert [(g.gpu.name, g.count, g.gpus_per_node) for g in groups] == [("A100-40GB", 2, 8), ("A10G", 4, 4)]
    preset = load_scenario("mixed-a100-a10g-llama2-13b").cluster.nodes      # the same instances, from the catalog
    assert [(g.intra_node_bandwidth, g.inter_node_bandwidth) for g in groups] == \
        [(g.intra_node_bandwidth, g.inter_node_bandwidth) for g in preset[:2]]


def test_an_amp_trial_without_stage_bounds_gets_the_best_partition_and_an_id_like_ampere_is_not_amp():
    run = _amp_run("amp-het-cluster-09", HET_CLUSTER)
    del run["training"]["stage_bounds_over_amp_entries"]
    case = parse_run(run)
    assert case.source == AMP_OTHER and case.strategy.partition is None and not case.data_gaps
    assert any("stage bounds not stated" in note for note in case.assumptions)
    other = {**run, "id": "ampere-bench-01", "source": {"title": "a benchmark on Ampere"}}
    assert source_key(other) != AMP_OTHER


def test_a_runs_file_must_be_a_regular_file_within_its_limit(tmp_path, capsys, monkeypatch):
    import amp_tui.core.validation.runs as runs_module

    assert main(["validate", "--runs", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    path = _write(tmp_path, [_amp_run("amp-het-cluster-01", HET_CLUSTER)])
    monkeypatch.setattr(runs_module, "MAX_RUNS_FILE_BYTES", 100)
    load_runs.cache_clear()
    assert main(["validate", "--runs", path]) == 2
    assert "larger than the limit of 100 bytes" in capsys.readouterr().err


@pytest.mark.parametrize("section, key, value, reason", [
    ("training", "micro_batch", 0, "training.micro_batch"),
    ("training", "tp", 0, "training.tp"),
    ("training", "pp", 10**30, "training.pp"),
    ("cluster", "num_gpus", 0, "cluster.num_gpus"),
    ("model", "heads", 0, None),
    ("measured", "iteration_time_s", -1.0, "not a positive number"),
    ("measured", "iteration_time_s", float("nan"), "not a positive number"),
])
def test_a_run_with_a_value_out_of_range_is_kept_out_with_why(tmp_path, capsys, section, key, value, reason):
    """Found by fuzzing: these divided by zero, enumerated 10^30 stages or scored a negative time."""
    run = _mixed_run("Megatron-LM")
    run[section][key] = value
    path = _write(tmp_path, [run, _amp_run("amp-het-cluster-01", HET_CLUSTER)])
    assert main(["validate", "--runs", path, "--verbose"]) == 0
    out = capsys.readouterr().out
    if reason is not None:
        assert "1 of 2 runs replayed" in out and reason in out


_ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([10**30, 2**70, 1.5, -0.5]),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                        st.sampled_from(["16x A100 + 8x T4", "2 x p4d.24xlarge", "NVLink", "0 Gbps", "fp8", "full"]),
                        st.lists(st.integers(-1, 40), max_size=4), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                                      max_size=2))


@settings(max_examples=60 * int(os.environ.get("AMP_HYPOTHESIS_SCALE", "1")), deadline=None)
@given(index=st.integers(0, 10**6), edits=st.lists(
    st.tuples(st.sampled_from(["model", "cluster", "training", "measured", "derived", "source"]),
              st.sampled_from(["name", "layers", "hidden", "heads", "vocab", "seq_len", "gpu", "num_gpus",
                               "gpus_per_node", "intra_node", "inter_node", "gpu_mix", "framework", "precision",
                               "tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "batch_shares",
                               "recompute",
                               "zero", "layers_per_stage", "stage_bounds_over_amp_entries", "iteration_time_s",
                               "tokens_per_s_per_gpu", "tflops_per_gpu", "peak_mem_gb", "oom", "title"]),
              _ODD_VALUES), min_size=1, max_size=3))
def test_no_run_a_file_can_hold_crashes_the_replay(index, edits):
    """Any published run with up to three fields set to odd values (wrong kinds, zero, negative,
    huge, NaN): it is read, or kept out with why; the replay scores the rest, never raises."""
    runs = load_runs()
    run = copy.deepcopy(runs[index % len(runs)])
    for section, key, value in edits:
        if not isinstance(run.get(section), dict):
            run[section] = {}
        run[section][key] = value
    run["id"] = "fuzzed"
    validation = run_validation(cases=cases_of([run]))
    assert len(validation.replayed) + len(validation.skipped) == 1
    report(validation)          # (and the scores of whatever replayed)
