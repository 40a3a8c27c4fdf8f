"""`amp-tui validate`: metrics on hand-made data, runs parsed into scenarios and strategies, the
report's shape, error ceilings on the public measured runs, and the error bands."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from amp_tui.cli import main
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.validation import metrics
from amp_tui.core.validation.bands import (BANDS_FILE, band_basis, band_class, compute_bands, load_bands, uncertainty,
                                          write_bands)
from amp_tui.core.validation.replay import report, run_validation
from amp_tui.core.validation.runs import (
    AMP_OTHER,
    HONOURED,
    RUNS_FILE,
    SOURCE_KEYS,
    is_model_gap,
    load_cases,
    load_runs,
    source_key,
    unsupported,
)

# Today's figures on the public set plus a small margin: MAPE and top-pick ceilings (fractions,
# ratios) and Spearman floors per source and for the macro average, and the least runs each must replay (so that a
# ceiling is never met by replaying nothing). Tighten them as the cost model improves; when
# HONOURED widens, more runs replay and these move with them.
# Issue 26 set the parameters only one source informs from physics instead of fitting them
# (backward_ratio 2, T4's half_work: AMP's), so AMP's in-sample error is no longer a fit to AMP alone
# (its leave-one-source-out error, tests/test_validate_loso.py, was the honest figure all along);
# the refit with the H200 blocks moved A100's and InfiniBand's figures, which swaps one pair of
# near-equal SC21 runs (Spearman 0.78 -> 0.66) and ranks llm-foundry's 512-GPU run first in one
# group (1.03x the fastest).
# Issue 35 set A100's, H100's, H200's and GH200's peak fractions from GEMM microbenchmarks times one
# fitted gemm_training_share (no longer fitted per GPU: the refit that raised A100's to 0.758 made
# held-back A100 runs worse): A100-80GB's is 0.711, so the large Megatron runs on A100 (SC21,
# Korthikanti et al.) are now predicted about 6% slow (8.5% and 9.6%, were 6.2% and 5.8%); AMP's
# rose 7.9% -> 8.8% with the 2020 stack's host time and the refit; the macro 7.4% -> 8.4%.
CEILINGS = {
    "amp-homogeneous": {"mape": 0.09, "spearman": 0.96, "top_pick": 1.02, "replayed": 52},
    "megatron-sc21": {"mape": 0.09, "spearman": 0.65, "replayed": 16},
    "korthikanti": {"mape": 0.10, "replayed": 8},
    "llmfoundry": {"mape": 0.075, "spearman": 0.95, "top_pick": 1.035, "replayed": 216},
    "nemo": {"mape": 0.095, "replayed": 109},
    "torchtitan": {"mape": 0.095, "spearman": 0.95, "top_pick": 1.02, "memory_mape": 0.12, "replayed": 45},
    "macro": {"mape": 0.085, "spearman": 0.90, "top_pick": 1.02},
}
# Of the runs that ran out of memory (AMP's 5 failed runs and torchtitan's 2): AMP's 4x4x1 at
# micro-batch 32 on T4 (predicted 14.3 of 14.8 GiB usable), which needs no more memory than the
# 1x4x4 at micro-batch 8 that ran.
OOM_PREDICTED_TO_FIT = 1
RAN_PREDICTED_OOM = 0          # of the runs that ran


@pytest.fixture(scope="module")
def strict():
    return run_validation()


@pytest.fixture(scope="module")
def strict_report(strict):
    return report(strict)


@pytest.fixture(scope="module")
def cases():
    return {case.id: case for case in load_cases()}


# -- metrics on hand-made data ----------------------------------------------------------------

def test_error_measures_on_hand_made_pairs():
    predicted, measured = [110.0, 90.0, 150.0, 100.0], [100.0, 100.0, 100.0, 100.0]
    assert metrics.mape(predicted, measured) == pytest.approx((0.1 + 0.1 + 0.5 + 0.0) / 4)
    assert metrics.median_ape(predicted, measured) == pytest.approx(0.1)
    assert metrics.share_within(predicted, measured, 0.10) == pytest.approx(0.75)   # 10% exactly counts
    assert metrics.share_within(predicted, measured, 0.25) == pytest.approx(0.75)
    assert metrics.median_error([50.0, 100.0, 300.0], [100.0, 100.0, 100.0]) == pytest.approx(0.0)
    assert metrics.median_error([50.0, 60.0, 300.0], [100.0, 100.0, 100.0]) == pytest.approx(-0.4)
    assert metrics.mape([], []) is None and metrics.share_within([], [], 0.1) is None
    with pytest.raises(ValueError):
        metrics.mape([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        metrics.mape([1.0], [0.0])


def test_average_ranks_share_ties():
    assert metrics.average_ranks([10, 20, 20, 30]).tolist() == [1, 2.5, 2.5, 4]
    assert metrics.average_ranks([3, 1, 2]).tolist() == [3, 1, 2]
    assert metrics.average_ranks([5, 5, 5]).tolist() == [2, 2, 2]


def test_spearman_with_ties_and_degenerate_inputs():
    assert metrics.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert metrics.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): 4.5 / sqrt(4.5 * 5)
    assert metrics.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert metrics.spearman([1, 1, 1], [1, 2, 3]) is None
    assert metrics.spearman([1], [1]) is None


def test_median_group_spearman_counts_groups_of_three_or_more():
    groups = {"a": ([1, 2, 3], [1, 2, 3]),          # 1
              "b": ([1, 2, 3], [3, 2, 1]),          # -1
              "c": ([1, 2, 3, 4], [1, 2, 4, 3]),    # 0.8
              "small": ([1, 2], [2, 1]),            # too few runs
              "flat": ([1, 1, 1], [1, 2, 3])}       # undefined
    rho, counted = metrics.median_group_spearman(groups)
    assert counted == 3 and rho == pytest.approx(0.8)
    assert metrics.median_group_spearman({}) == (None, 0)


def test_top_pick_is_the_measured_cost_of_trusting_the_prediction():
    assert metrics.top_pick_ratio([3.0, 1.0, 2.0], [2.0, 2.2, 2.0]) == pytest.approx(1.1)
    assert metrics.top_pick_ratio([1.0, 2.0], [5.0, 6.0]) == 1.0
    assert metrics.top_pick_ratio([], []) is None
    groups = {"right": ([1, 2, 3], [1, 2, 3]), "wrong": ([1, 2, 3], [3, 2, 1.5]), "small": ([1, 2], [9, 1])}
    assert metrics.worst_group_top_pick(groups) == pytest.approx(2.0)


def test_memory_agreement_and_macro():
    counts = metrics.memory_agreement([True, True, False, False, False], [True, False, True, False, True])
    assert counts == {"oom_runs": 2, "oom_predicted_to_fit": 1, "ran_runs": 3, "ran_predicted_oom": 1}
    assert metrics.macro([0.1, None, 0.3]) == pytest.approx(0.2)
    assert metrics.macro([None]) is None


# -- runs as replay cases ---------------------------------------------------------------------

def test_source_keys_cover_the_published_sources():
    counts = {key: 0 for key in SOURCE_KEYS}
    for run in load_runs():
        counts[source_key(run)] += 1
    # (AMP's other trials are not among the published runs)
    assert counts == {"amp-homogeneous": 52, "megatron-sc21": 22, "korthikanti": 14, "llmfoundry": 216,
                      "nemo": 118, "torchtitan": 45, "llama3": 3, AMP_OTHER: 0}


def test_amp_run_replays_the_paper_preset_with_its_stage_bounds(cases):
    case = cases["amp-homogeneous-03"]
    assert case.scenario.name == "paper-homogeneous"
    s = case.strategy
    assert (s.tp, s.pp, s.dp, s.micro_batch_size, s.partition) == (1, 2, 8, 1, (15, 15))
    assert case.measured.iteration_time_s == 1.28 and case.amp_predicted_s is not None
    assert unsupported(case) == []
    failed = cases["amp-homogeneous-02"]
    assert failed.measured.out_of_memory and failed.measured.iteration_time_s is None


def test_megatron_run_builds_a_dgx_a100_cluster_and_megatrons_split(cases):
    case = cases["megatron-sc21-t2-ptd-174.6B-384gpu"]
    node = case.scenario.cluster.nodes[0]
    assert (node.count, node.gpu.name, node.gpus_per_node) == (48, "A100-80GB", 8)
    assert node.intra_node_bandwidth == pytest.approx(300e9)          # NVSwitch, per direction
    assert node.inter_node_bandwidth == pytest.approx(1600e9 / 8)     # 8 x 200 Gb/s HDR
    model = case.scenario.model
    assert model.family == "gpt" and model.shape["flash_attention"] is False
    assert model.total_params == pytest.approx(174.6e9, rel=0.01)
    s = case.strategy
    assert (s.tp, s.pp, s.dp, s.recompute) == (8, 12, 4, "full")
    assert s.partition == (9,) + (8,) * 10 + (9,)   # 96 blocks evenly; embedding first, head last
    assert case.scenario.training.precision == "fp16" and unsupported(case) == []


@pytest.mark.parametrize("mix", [
    [{"gpu": "A100-SXM4-40GB", "num_gpus": 8, "gpus_per_node": 8, "intra_node": "NVLink"},
     {"gpu": "GeForce RTX 3090", "num_gpus": 8, "gpus_per_node": 4, "intra_node": "PCIe 4.0 x16"}],
    "8x A100-SXM4-40GB + 8x RTX 3090",
    {"A100 40GB": 8, "RTX 3090": 8},
])
def test_a_heterogeneous_run_becomes_one_node_group_per_gpu_type(mix):
    """A held-back run on a mixed cluster states its parts in cluster.gpu_mix: ranks fill them in order."""
    import copy

    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.validation.runs import load_runs, parse_run
    run = copy.deepcopy(next(r for r in load_runs() if r["id"] == "llmfoundry-L75"))
    run["cluster"].update(num_gpus=16, gpus_per_node=4, heterogeneous=True, gpu_mix=mix,
                          intra_node="PCIe 4.0 x16", inter_node="100 Gbps", gpu_mem_gb=None)
    run["training"].update(dp=16, global_batch=256)
    case = parse_run(run)
    assert case.data_gaps == () and case.heterogeneous
    nodes = case.scenario.cluster.nodes
    assert [(g.gpu.name, g.count * g.gpus_per_node) for g in nodes] == [("A100-40GB", 8), ("RTX-3090", 8)]
    assert nodes[1].intra_node_bandwidth == pytest.approx(256e9 / 8)     # PCIe 4.0 x16: 32 GB/s
    assert evaluate(case.scenario, case.strategy).iteration_time_s > 0


@pytest.mark.parametrize("label, name", [
    ("Tesla P100-PCIE-16GB", "P100-PCIe"), ("P100 SXM2", "P100"), ("TITAN V", "TITAN-V"), ("Titan RTX", "TITAN-RTX"),
    ("GeForce RTX 2080 Ti", "RTX-2080Ti"), ("RTX 3060", "RTX-3060"), ("A30", "A30"), ("RTX 6000 Ada", "RTX-6000-Ada"),
    ("RTX A6000", "RTX-A6000"), ("V100 PCIe 16GB", "V100-PCIe"), ("V100-SXM2-32GB", "V100-32GB"), ("MI210", "MI210"),
    ("A40", "A40"), ("A100 40GB", "A100-40GB"), ("NVIDIA A10", "A10"), ("A10G", "A10G"), ("L40", "L40"),
    ("L40S", "L40S"), ("GeForce RTX 2060", "RTX-2060"), ("Quadro P4000", "Quadro-P4000"), ("NVIDIA H20", "H20"),
    ("H200 SXM", "H200"), ("H800", "H100"),
])
def test_gpus_of_mixed_clusters_are_in_the_catalog(label, name):
    """The cards heterogeneous-cluster papers mix: a run naming one is replayed on its figures."""
    from amp_tui.core.spec.hardware import gpu_catalog
    from amp_tui.core.validation.cluster_labels import catalog_gpu
    assert catalog_gpu(label) == name and name in gpu_catalog()


def test_a_card_without_bf16_refuses_it():
    from amp_tui.core.base.errors import SpecError
    from amp_tui.core.spec.scenario import parse_scenario
    spec = {"cluster": {"nodes": [{"count": 2, "gpu": "RTX-2080Ti", "gpus_per_node": 4,
                                   "intra_node_bandwidth": "16 GB/s", "inter_node_bandwidth": "10 Gbps"}]},
            "model": {"preset": "gpt2-medium"}, "training": {"global_batch_size": 8}}
    assert parse_scenario(spec).cluster.nodes[0].gpu.name == "RTX-2080Ti"
    with pytest.raises(SpecError, match="bf16"):
        parse_scenario({**spec, "training": {"global_batch_size": 8, "precision": "bf16"}})


def test_a_gpu_mix_that_does_not_add_up_is_a_data_gap():
    import copy

    from amp_tui.core.validation.runs import load_runs, parse_run
    run = copy.deepcopy(next(r for r in load_runs() if r["id"] == "llmfoundry-L75"))
    run["cluster"].update(heterogeneous=True, gpu_mix="4x A100 + 2x V100")
    case = parse_run(run)
    assert case.scenario is None and any("gpu_mix" in gap for gap in case.data_gaps)


def test_interleaving_needs_pipeline_stages(cases):
    flat = cases["megatron-sc21-t1-1.7B"]      # "interleaved schedule used", but pp = 1
    assert flat.virtual_stages == 1 and flat.strategy.micro_batch_size == 1 and unsupported(flat) == []
    deep = cases["megatron-sc21-t1-39.1B"]     # pp = 2, depth not stated
    assert deep.virtual_stages is None
    assert unsupported(deep) == ["interleaving depth not stated"]     # a gap in the data: the model interleaves


def test_llmfoundry_fsdp_is_zero_3_and_shard_grad_op_is_zero_2(cases):
    full = cases["llmfoundry-L75"]
    assert (full.zero_stage, full.precision, full.recompute) == (3, "bf16", "full")
    assert unsupported(full) == []          # the cost model honours ZeRO-3 now
    assert full.scenario.training.framework == "fsdp"
    assert full.scenario.model.shape["flash_attention"] is True
    assert full.measured.time_basis == "derived" and full.measured.iteration_time_s == pytest.approx(16.268)
    grad_op = [c for c in cases.values() if c.source == "llmfoundry" and c.zero_stage == 2]
    assert len(grad_op) == 6 and all(unsupported(c) == [] for c in grad_op)


def test_nemo_gb300_run_maps_fp8_sp_and_interleaving(cases):
    case = cases["mbridge-26.06-DGX-GB300-LLAMA3.1_405B-main-L100"]
    assert (case.precision, case.zero_stage, case.sequence_parallel, case.virtual_stages) == ("fp8", 1, True, 4)
    assert unsupported(case) == []          # fp8, SP and interleaving are all honoured now
    gpu = case.scenario.cluster.nodes[0].gpu
    assert gpu.peak_flops_8 > gpu.peak_flops_16 > 0 and gpu.memory_bytes == pytest.approx(279e9)
    s = case.strategy
    assert (s.tp, s.pp, s.dp, s.virtual_stages, s.sequence_parallel) == (4, 8, 8, 4, True)
    assert case.scenario.model.family == "llama" and case.scenario.model.shape["num_kv_heads"] == 8
    # 256 GPUs in trays of 4 span NVL72 domains: a domain of 64 (16 trays) is one node, NVLink
    # inside, and its network is its trays' NICs together (16 x 4 x 800 Gb/s) ...
    group = case.scenario.cluster.nodes[0]
    assert (group.count, group.gpus_per_node) == (4, 64)
    assert group.intra_node_bandwidth == pytest.approx(900e9)
    assert group.inter_node_bandwidth == pytest.approx(16 * 3200e9 / 8)
    # ... 64 GPUs fit in one: NVLink all the way (when trays talked over their NICs, the 405B
    # ZeRO-3 run on 128 GB200s was predicted 2.4x too slow).
    small = next(c for c in cases.values() if c.gpu == "GB200" and c.scenario and c.scenario.cluster.num_gpus == 64)
    assert [(g.count, g.gpus_per_node) for g in small.scenario.cluster.nodes] == [(1, 64)]


def test_torchtitan_run_keeps_its_memory_and_fsdp(cases):
    case = cases["torchtitan-202412-t1-L27"]
    assert (case.zero_stage, case.recompute) == (3, "selective")
    assert case.measured.peak_memory_bytes == pytest.approx(82.4 * 2**30)
    # Grand Teton's 500 W H100: its own catalog entry, six 16 GiB HBM stacks
    assert case.scenario.cluster.nodes[0].gpu.name == "H100-96GB-500W"
    assert case.scenario.cluster.nodes[0].gpu.memory_bytes == pytest.approx(96 * 2**30)
    assert unsupported(case) == []           # ZeRO-3 and selective recomputation are honoured
    # The batch is per data-parallel rank; a pipeline splits it into pp micro-batches.
    piped = cases["torchtitan-202412-t6-L66"]
    assert (piped.strategy.pp, piped.strategy.micro_batch_size, piped.scenario.training.global_batch_size) == (8, 1, 64)


def test_times_derived_from_throughput_follow_the_sources_conventions(cases):
    # torchtitan: tokens/s per GPU; the batch of 16 is per data-parallel rank (dp 32, 256 GPUs).
    tokens = cases["torchtitan-asynctp-70B-None-bfloat16-vanilla_TP"]
    assert tokens.measured.iteration_time_s == pytest.approx(16 * 32 * 8192 / (597.3 * 256))
    assert "tokens/s" in tokens.measured.time_basis
    # NeMo long-sequence: model TFLOP/s only. Llama 2 7B at 4K on 4 GPUs, 768 TFLOP/s, batch 1024:
    # 6 x (matmul parameters + output layer) + 12 l h s FLOPs per token.
    h, l, f, v, s = 4096, 32, 11008, 32000, 4096
    per_token = 6 * (l * (4 * h * h + 3 * h * f) + v * h) + 12 * l * h * s
    flops = cases["nemo-longseq-LLAMA2-7B-4K"]
    assert flops.measured.iteration_time_s == pytest.approx(1024 * s * per_token / (768e12 * 4))
    assert "TFLOP/s" in flops.measured.time_basis


def test_a_run_without_a_group_is_grouped_by_model_and_cluster(cases):
    from amp_tui.core.validation.runs import parse_run

    run = next(r for r in load_runs() if r["id"] == "llmfoundry-L75")
    case = parse_run({k: v for k, v in run.items() if k != "group"})
    assert case.group == "llmfoundry: MPT-70b on MosaicML platform"


def test_llama3_run_names_what_its_source_leaves_out(cases):
    case = cases["llama3-405b-t4-8192gpu-cp1"]
    assert case.zero_stage == 2 and case.virtual_stages is None
    assert "interleaving depth not stated" in unsupported(case)
    assert any("micro-batch" in note for note in case.assumptions)


def test_widening_the_honoured_set_is_enough_to_replay_a_run(cases):
    narrower = {**HONOURED, "precision": HONOURED["precision"] - {"fp8"}}
    only_fp8 = [c for c in cases.values() if unsupported(c, narrower) == ["needs fp8"]]
    assert only_fp8                           # what fp8 alone kept out before the model honoured it
    assert all(unsupported(c) == [] and c.scenario is not None for c in only_fp8)


def test_nvfp4_runs_replay_at_the_fp4_rate(cases):
    fp4 = [c for c in cases.values() if c.precision == "fp4"]
    assert len(fp4) == 18 and all(c.gpu in ("GB200", "GB300") for c in fp4)
    replayed = [c for c in fp4 if not unsupported(c)]
    assert len(replayed) == 17 and all(c.scenario.training.precision == "fp4" for c in replayed)
    # The same recipe in fp8 and in NVFP4 (GB300, Llama 3.1 405B, 4x8x8 v4): NVFP4 predicted faster.
    fp8, nvfp4 = (cases[f"mbridge-26.06-DGX-GB300-LLAMA3.1_405B-main-L{n}"] for n in (100, 102))
    assert evaluate(nvfp4.scenario, nvfp4.strategy).iteration_time_s < evaluate(fp8.scenario, fp8.strategy).iteration_time_s


def test_a_run_whose_stated_degrees_cannot_hold_the_weights_is_a_data_gap(cases):
    """Llama 3 70B on 64 GB300s with tp = pp = 1 and only the distributed optimizer needs 282 GB of
    16-bit weights and gradients per GPU: its row must have left FSDP out."""
    case = cases["mbridge-26.02.01-DGX-GB300-LLAMA3_70B-main-L399"]
    assert any("cannot hold the 16-bit weights" in reason for reason in unsupported(case))


# -- the whole public set ---------------------------------------------------------------------

def test_every_run_is_replayed_or_listed_with_a_reason(strict):
    ids = [str(run["id"]) for run in load_runs()]
    seen = [r.case.id for r in strict.replayed] + [s.case.id for s in strict.skipped]
    assert len(ids) == 470 and sorted(seen) == sorted(ids)
    assert all(s.reasons for s in strict.skipped)


def test_error_ceilings_hold_on_the_public_set(strict_report):
    for source, ceiling in CEILINGS.items():
        row = strict_report["macro"] if source == "macro" else strict_report["sources"][source]
        assert row["mape"] <= ceiling["mape"], source
        if "spearman" in ceiling:
            assert row["spearman"] >= ceiling["spearman"], source
        if "top_pick" in ceiling:
            assert row["top_pick"] <= ceiling["top_pick"], source
        if "replayed" in ceiling:
            assert row["replayed"] >= ceiling["replayed"], source
        if "memory_mape" in ceiling:
            assert row["memory_mape"] <= ceiling["memory_mape"], source
    everything = strict_report["all_runs"]
    assert everything["oom_predicted_to_fit"] <= OOM_PREDICTED_TO_FIT
    assert everything["ran_predicted_oom"] <= RAN_PREDICTED_OOM


def test_validate_json_is_strict_and_complete(capsys):
    assert main(["validate", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    assert set(rep["sources"]) == set(SOURCE_KEYS) - {AMP_OTHER}      # every source with runs
    row = rep["sources"]["amp-homogeneous"]
    for key in ("runs", "replayed", "mape", "median_ape", "bias", "within_10", "within_25", "spearman",
                "spearman_groups", "top_pick", "memory_mape", "oom_runs", "oom_predicted_to_fit", "ran_predicted_oom"):
        assert key in row
    assert row["amp_model"]["mape"] > 0
    assert rep["macro"]["sources"] >= 4
    assert rep["runs"] == rep["replayed"] + rep["not_replayed"]["runs"] == 470
    assert rep["sources"]["llama3"]["mape"] is None         # nothing replayed: null, not NaN
    result = rep["results"][0]
    assert result["error"] == pytest.approx(result["predicted_s"] / result["measured_s"] - 1)


def test_validate_text_source_filter_and_errors(capsys):
    assert main(["validate", "--source", "llmfoundry", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "llmfoundry" in out and "amp-homogeneous" not in out
    assert "replayed runs:" in out and "llmfoundry-L87" in out and "1x1x512 mbs8 z2  " in out
    assert main(["validate", "--source", "nemo", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "cannot hold the 16-bit weights" in out and "amp-homogeneous" not in out
    assert main(["validate", "--source", "nope"]) == 2
    assert "--source: 'nope'" in capsys.readouterr().err
    assert main(["validate", "--write-bands", "--approximate"]) == 2


def test_approximate_replay_covers_more_runs_but_is_marked(strict):
    approximate = run_validation(approximate=True)
    assert approximate.approximate
    # it adds exactly the runs kept out only by techniques the model does not honour (none today)
    model_only = {s.case.id for s in strict.skipped if all(is_model_gap(r) for r in s.reasons)}
    assert {r.case.id for r in approximate.replayed} == {r.case.id for r in strict.replayed} | model_only
    with pytest.raises(ValueError):
        compute_bands(approximate)


def test_shipped_runs_match_the_shared_reference():
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "measured_runs.yaml"
    if not shared.is_file():
        shared = Path("/work/shared/reference/measured_runs.yaml")
    if not shared.is_file():
        pytest.skip("the shared reference folder is not beside this checkout")
    shipped = RUNS_FILE.read_text(encoding="utf-8")
    assert shipped.startswith("# Copied unchanged from")
    assert shipped.split("\n", 1)[1] == shared.read_text(encoding="utf-8")


# -- error bands ------------------------------------------------------------------------------

def test_committed_error_bands_are_current(strict):
    """A cost model change moves these: run `amp-tui validate --write-bands` and commit the file."""
    assert compute_bands(strict) == load_bands(BANDS_FILE)


def test_write_bands_round_trips(tmp_path, strict):
    bands = compute_bands(strict)
    path = write_bands(bands, tmp_path / "bands.yaml")
    assert load_bands(path) == bands


def test_a_band_says_what_it_is_built_from_and_none_is_borrowed():
    """Issue 34: a mixed cluster showed "±8% (uncalibrated: validate's error on published
    ampere/heterogeneous runs)" though no heterogeneous run was ever replayed (the band was the
    widest of its GPUs' homogeneous ones). A band comes from its own class's replayed runs, says
    which and how many, and where there are none, or too few, there is no band and it says so."""
    bands = {"replayed": 60, "classes": {
        "turing/homogeneous": {"band": 0.4, "runs": 40, "gpus": {"T4": 40}},
        "volta/homogeneous": {"band": 0.1, "runs": 17, "gpus": {"V100": 17}},
        "hopper/homogeneous": {"band": None, "runs": 3, "gpus": {"H100": 3}}}}
    homogeneous = load_scenario("paper-homogeneous")
    het = load_scenario("paper-het-cluster")
    assert band_class(homogeneous) == "turing/homogeneous" and band_class(het) == "turing+volta/heterogeneous"
    assert uncertainty(homogeneous, bands) == 0.4
    assert band_basis(homogeneous, bands) == "uncalibrated: validate's error on 40 published turing/homogeneous runs (T4)"
    assert uncertainty(het, bands) is None
    assert band_basis(het, bands) == "none of validate's 60 published runs is on mixed GPUs; calibrate fits one to yours"
    h100 = parse_scenario({"cluster": {"nodes": [{"instance": "p5.48xlarge"}]}, "model": "llama3-8b",
                           "training": {"global_batch_size": 64, "precision": "bf16"}})
    assert uncertainty(h100, bands) is None
    assert band_basis(h100, bands) == "validate replays only 3 published hopper/homogeneous runs; a band needs 5"
    a10g = parse_scenario({"cluster": {"nodes": [{"instance": "g5.12xlarge", "count": 2}]}, "model": "gpt2-medium",
                           "training": {"global_batch_size": 32}})
    assert uncertainty(a10g, bands) is None
    assert band_basis(a10g, bands) == "validate has replayed no published ampere/homogeneous run"
    ampere = {"replayed": 9, "classes": {"ampere/homogeneous": {"band": 0.2, "runs": 9, "gpus": {"A100-80GB": 9}}}}
    assert uncertainty(a10g, ampere) == 0.2         # the generation's band, and it says whose runs
    assert band_basis(a10g, ampere) == ("uncalibrated: validate's error on 9 published ampere/homogeneous runs "
                                        "(A100-80GB; none on A10G)")
    assert 0 < uncertainty(homogeneous) < 1 and uncertainty(het) is None        # from the committed file
    assert "none of validate's 446 published runs" in band_basis(het)


def test_the_committed_bands_count_every_class_and_every_run(strict):
    bands = load_bands(BANDS_FILE)
    assert bands["replayed"] == len(strict.replayed) == 446
    assert sum(c["runs"] for c in bands["classes"].values()) == sum(1 for r in strict.replayed
                                                                    if r.case.measured.iteration_time_s)
    assert not any(key.endswith("/heterogeneous") for key in bands["classes"])


def test_the_readme_says_how_many_runs_were_replayed_and_of_which_kind(strict):
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert "checked against 470" not in readme
    assert f"{len(strict.replayed)} published runs" in readme and "none on mixed GPUs" in readme
    assert f"±{uncertainty(load_scenario('paper-homogeneous')):.0%} on AMP's T4 cluster" in readme


def test_validation_imports_no_ui_package():
    import subprocess
    import sys

    check = ("import amp_tui.core.validation.bands, amp_tui.core.validation.replay, sys; "
             "assert not {'textual', 'rich'} & {m.split('.')[0] for m in sys.modules}")
    done = subprocess.run([sys.executable, "-c", check], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_trays_as_large_as_an_nvlink_domain_stay_nodes():
    """A run stating trays of 72 or more GPUs (no smaller domain divides them) keeps them as
    nodes instead of failing on an empty choice of domain."""
    from amp_tui.core.validation.cluster_labels import _nvlink_domain
    assert _nvlink_domain(288, 144, "1600 Gbps", []) == (144, "1600 Gbps")
    assert _nvlink_domain(128, 4, "1600 Gbps", []) == (64, "25600 Gbps")


def test_torchtitan_rows_keep_their_schedule_and_async_tp(cases):
    """The quoted rows say "Interleaved 1F1B" (torchtitan's default: 2 stages per rank without split
    points) and "AsyncTP" (tensor-parallel collectives overlapped); read as plain 1F1B and plain TP,
    the two runs of each pair were predicted alike although one ran 28% (14%) faster."""
    interleaved, plain = cases["torchtitan-202412-t5-L60"], cases["torchtitan-202412-t5-L59"]
    assert (interleaved.strategy.virtual_stages, plain.strategy.virtual_stages) == (2, 1)
    assert any("2 stages per rank" in note for note in interleaved.assumptions)
    overlapped, vanilla = cases["torchtitan-202412-t4-L53"], cases["torchtitan-202412-t4-L52"]
    assert overlapped.scenario.training.tp_comm_overlap and not vanilla.scenario.training.tp_comm_overlap
    assert not cases["torchtitan-asynctp-70B-float8-tensorwise-vanilla_TP"].scenario.training.tp_comm_overlap
    assert cases["torchtitan-asynctp-70B-float8-tensorwise-async_TP"].scenario.training.tp_comm_overlap
