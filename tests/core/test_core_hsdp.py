"""Hybrid sharded data parallelism (HSDP) and the search's choice of HSDP and expert parallelism:
memory and time by hand on a small case, the search against brute force, the world size."""

from __future__ import annotations

import numpy as np
import pytest
from core_builders import GBPS, IDEAL, brute_force_over_knobs, close, examples, scenario_dicts
from hypothesis import given, settings

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.terms.sharding import sharding_group
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import enumerate_candidates, search
from amp_tui.core.spec.knobs import Knobs, describe, expert_choices, knob_choices
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.spec.strategy import Strategy, parse_strategy
from amp_tui.core.spec.validity import validate_strategy

INTRA, INTER = 300.0, 100.0    # GB/s inside a node, Gbps per node across


def two_nodes(**training) -> object:
    """A small GPT on 2 nodes of 4 A100s: an HSDP shard group of 4 data-parallel ranks is one node."""
    return parse_scenario({
        "name": "hsdp", "cluster": {"nodes": [{"count": 2, "gpu": "A100-80GB", "gpus_per_node": 4,
                                               "intra_node_bandwidth": f"{INTRA} GB/s",
                                               "inter_node_bandwidth": f"{INTER} Gbps"}]},
        "model": {"family": "gpt", "hidden_size": 1024, "num_layers": 4, "num_heads": 16,
                  "sequence_length": 2048, "vocab_size": 32000},
        "training": {"global_batch_size": 16, "precision": "bf16", **training},
        "calibration": IDEAL,
    })


def test_hsdp_memory_divides_the_state_by_the_shard_group():
    """Adam in bf16 under Megatron: 2 + 4 (fp32 main gradients, no bf16 copy kept) + 12 bytes per
    parameter; FSDP over dp 8 keeps 1/8 of each, HSDP with groups of 4 keeps 1/4 (replicated
    across the 2 groups)."""
    scn = two_nodes(zero_stage=3)
    params = float(scn.model.columns["params"].sum())
    fsdp, hsdp = (evaluate(scn, Strategy(1, 1, 8, 1, hsdp_shard=shard)).stages[0].memory for shard in (None, 4))
    assert fsdp.weights_bytes == pytest.approx(params * 2 / 8, rel=1e-12)
    assert hsdp.weights_bytes == pytest.approx(params * 2 / 4, rel=1e-12)
    assert hsdp.gradients_bytes == 0.0
    assert hsdp.main_gradients_bytes == pytest.approx(params * 4 / 4, rel=1e-12)
    assert hsdp.optimizer_bytes == pytest.approx(params * 12 / 4, rel=1e-12)
    assert hsdp.activations_bytes == fsdp.activations_bytes
    assert sharding_group(8, 1, 4) == 4 and sharding_group(8, 2, 4) == 8 and sharding_group(8, 2, 0) == 16


def test_hsdp_time_by_hand():
    """Per layer per micro-batch: all-gather forward and backward and reduce-scatter, 3 x params x
    2 bytes x 3/4 over NVLink (the shard ring is one node), exposed beyond the layer's compute;
    after the backward pass, the gradient shard (params x 4 / 4 bytes: Megatron reduces bf16
    training's fp32 main gradients, issue 35) all-reduced between the 2 nodes: a ring of 2 moves it
    once, 4 such rings sharing each node's network."""
    scn = two_nodes(zero_stage=3)
    cost = CostModel(scn, Knobs(zero_stage=3, hsdp_shard=4))
    c = cost.candidate(1, 1, 8, 1, (0,))
    compute, _ = cost.layer_times(0, 1, 1)
    params = scn.model.columns["params"]
    exposed = np.maximum(3 * params * 2 * (3 / 4) / (INTRA * 1e9) - compute, 0.0)
    times, _ = c.stage_layer_times
    assert times[0] == pytest.approx(compute + exposed, rel=1e-12)
    p = c.predict((len(compute),))
    B = p.num_micro_batches
    assert B == 2
    assert p.stages[0].shard_comm_s == pytest.approx(float(exposed.sum()), rel=1e-12)
    replica = float(params.sum()) * 4 / 4 * 4 / (INTER * GBPS)
    assert p.dp_allreduce_s == pytest.approx(replica, rel=1e-12)
    terms = p.time_terms()
    assert terms["HSDP replica all-reduce"] == pytest.approx(replica, rel=1e-12)
    assert terms["ZeRO-3 all-gather/reduce-scatter"] == pytest.approx(B * float(exposed.sum()), rel=1e-12)
    assert sum(terms.values()) == pytest.approx(p.iteration_time_s, rel=1e-12)
    assert p.strategy.hsdp_shard == 4
    # plain FSDP over all 8: the per-layer ring crosses the nodes, and nothing is left after backward
    fsdp = CostModel(scn, Knobs(zero_stage=3)).candidate(1, 1, 8, 1, (0,)).predict((len(compute),))
    assert fsdp.dp_allreduce_s == 0 and "HSDP replica all-reduce" not in fsdp.time_terms()
    assert fsdp.stages[0].shard_comm_s > p.stages[0].shard_comm_s


def test_hsdp_replica_all_reduce_pays_latency_per_bucket():
    alpha = 1e-3
    scn = parse_scenario({**two_nodes(zero_stage=3).to_dict(),
                          "calibration": {"parameters": {**IDEAL["parameters"], "link_latency_s.infiniband": alpha}}})
    p = evaluate(scn, Strategy(1, 1, 8, 1, zero_stage=3, hsdp_shard=4))
    params = float(scn.model.columns["params"].sum())
    bucket = params * 4 / 4 / 25e6          # the fp32 gradient shard's bytes (issue 35), 25 MB buckets
    link = scn.cluster.nodes[0].inter_link_class
    assert link == "infiniband"
    # a ring of 2 across the nodes: reduce and broadcast, one crossing each way (ring and tree alike)
    replica = params * 4 / 4 * 4 / (INTER * GBPS) + 2 * alpha * (bucket + 1)
    assert p.dp_allreduce_s == pytest.approx(replica, rel=1e-9)


@pytest.mark.parametrize("strategy, training, reason", [
    (Strategy(1, 1, 8, 1, hsdp_shard=3), {"zero_stage": 3}, "divide dp"),
    (Strategy(1, 1, 8, 1, hsdp_shard=8), {"zero_stage": 3}, "plain FSDP"),
    (Strategy(1, 1, 8, 1, hsdp_shard=4), {"zero_stage": 1}, "zero_stage 3"),
])
def test_hsdp_errors_name_the_field(strategy, training, reason):
    with pytest.raises(SpecError) as info:
        validate_strategy(two_nodes(**training), strategy)
    assert info.value.field == "strategy.hsdp_shard" and reason in info.value.reason


def test_hsdp_training_field():
    with pytest.raises(SpecError) as info:
        two_nodes(data_parallel_shard=4)                  # ZeRO 0 has nothing to shard
    assert info.value.field == "training.data_parallel_shard"
    fixed = two_nodes(zero_stage=3, data_parallel_shard=4)
    assert evaluate(fixed, Strategy(1, 1, 8, 1)).strategy.hsdp_shard == 4     # inherited
    with pytest.raises(SpecError) as info:
        validate_strategy(fixed, Strategy(2, 1, 2, 1, idle=((0, 1),)))          # dp 2: no room for groups of 4
    assert info.value.field == "strategy.hsdp_shard"
    assert parse_scenario(fixed.to_dict()).training == fixed.training
    strategy = parse_strategy({"tp": 1, "pp": 1, "dp": 8, "micro_batch_size": 1, "hsdp_shard": 4})
    assert strategy.hsdp_shard == 4 and parse_strategy(strategy.to_dict()) == strategy


def test_plan_output_says_hsdp_and_ep_are_chosen_by_the_search():
    scn = two_nodes(zero_stage="auto", data_parallel_shard="auto")
    text = describe(scn.training, scn.model)
    assert "chosen by the search: zero_stage, hsdp_shard" in text and "ep" not in text.split(";")[1]
    assert "hsdp" not in describe(two_nodes().training, two_nodes().model)
    moe = moe_scenario()
    assert describe(moe.training, moe.model).endswith("chosen by the search: ep")
    assert ", ep 2; chosen by the search: none" in describe(moe_scenario(expert_parallel=2).training, moe.model)
    # HSDP goes with ZeRO-3 only: 3 stages x 5 groups, less the 4 HSDP groups of stages 0 and 1
    assert len(knob_choices(scn.training)) == 3 * 5 - 2 * 4


# -- the search chooses HSDP and ep: against brute force ---------------------------------------------

TINY_MOE = {"family": "llama", "hidden_size": 8, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
            "ffn_hidden_size": 16, "sequence_length": 4, "vocab_size": 32, "num_experts": 4, "top_k": 2}


def moe_scenario(**training):
    return parse_scenario({
        "name": "moe",
        "cluster": {"nodes": [{"count": 2, "gpu": "H100", "gpus_per_node": 4, "intra_node_bandwidth": "450 GB/s",
                               "inter_node_bandwidth": "400 Gbps"}]},
        "model": TINY_MOE,
        "training": {"global_batch_size": 8, "precision": "bf16", **training}})


def _check_against_brute_force(scn, top: int = 6):
    best = brute_force_over_knobs(scn)
    result = search(scn, top=top)
    times = [p.iteration_time_s for p in result.strategies]
    expected = sorted(best.values())[:top]
    assert len(times) == len(expected)
    assert all(close(a, b) for a, b in zip(times, expected)), (times, expected)
    for p in result.strategies:
        s = p.strategy
        assert s.num_gpus == s.tp * (s.cp or 1) * s.pp * s.dp == scn.cluster.num_gpus   # ep and HSDP within
        assert (s.ep or 1) == 1 or (s.dp * (s.cp or 1)) % s.ep == 0
        assert not s.hsdp_shard or (s.dp % s.hsdp_shard == 0 and s.hsdp_shard < s.dp and s.zero_stage == 3)
        validate_strategy(scn, s)
        assert evaluate(scn, s).iteration_time_s == p.iteration_time_s
    return result, best


def test_search_chooses_ep_and_hsdp_exactly_on_a_small_moe():
    scn = moe_scenario(zero_stage="auto", data_parallel_shard="auto")
    assert expert_choices(scn.model) == (1, 2, 4)
    result, best = _check_against_brute_force(scn)
    tried = {(k.ep, k.hsdp_shard) for *_, k in best}
    assert {ep for ep, _ in tried} == {1, 2, 4} and {h for _, h in tried} >= {0, 2, 4}
    # the best of each ep is what the search reports for it when asked for everything
    everything = search(scn, top=len(best))
    for ep in (1, 2, 4):
        ours = min(p.iteration_time_s for p in everything.strategies if (p.strategy.ep or 1) == ep)
        theirs = min(t for key, t in best.items() if key[-1].ep == ep)
        assert close(ours, theirs)


def test_search_keeps_ep_and_hsdp_fixed_when_the_user_fixes_them():
    scn = moe_scenario(zero_stage=3, data_parallel_shard=2, expert_parallel=2)
    result, _ = _check_against_brute_force(scn, top=3)
    assert result.strategies and all(p.strategy.ep == 2 and p.strategy.hsdp_shard == 2 for p in result.strategies)


@pytest.mark.slow          # brute force over every HSDP and ep setting: minutes on 2 cores; CI runs it
@settings(max_examples=examples(15), deadline=None)
@given(spec=scenario_dicts(max_layers=4, max_gpus=8))
def test_search_with_hsdp_equals_brute_force(spec):
    spec["model"]["sequence_length"] = 8
    spec["training"].update(zero_stage="auto", data_parallel_shard="auto", recompute="auto")
    spec["training"]["global_batch_size"] = 8
    _check_against_brute_force(parse_scenario(spec), top=4)


def test_enumeration_leaves_out_what_ep_and_hsdp_cannot_run():
    scn = moe_scenario(zero_stage=3)
    for knobs in (Knobs(zero_stage=3, ep=4), Knobs(zero_stage=3, hsdp_shard=4)):
        keys = enumerate_candidates(scn, knobs=knobs)
        assert keys
        for tp, pp, dp, *_ in keys:
            assert dp % 4 == 0 and (not knobs.hsdp_shard or dp > 4)
    assert {dp for _, _, dp, *_ in enumerate_candidates(scn, knobs=Knobs(zero_stage=3, hsdp_shard=4))} == {8}
    # ep 4 needs dp x cp a multiple of 4: dp 1 and 2 (tp 8 and 4) drop out, dp 4 and 8 stay
    assert {dp for _, _, dp, *_ in enumerate_candidates(scn, knobs=Knobs(zero_stage=3))} >= {1, 2}
    assert {dp for _, _, dp, *_ in enumerate_candidates(scn, knobs=Knobs(zero_stage=3, ep=4))} <= {4, 8}


def test_compare_names_the_zero3_traffic_apart_from_tensor_parallelism():
    from amp_tui.core.plans.compare import time_terms

    scn = two_nodes(zero_stage=3)
    p = evaluate(scn, Strategy(1, 1, 8, 1))          # plain FSDP across the two nodes: exposed traffic
    terms = time_terms(p)
    b = p.stages[p.bottleneck_stage]
    assert b.shard_comm_s > 0 and b.tp_comm_s == 0
    assert terms["ZeRO-3 comm"] == pytest.approx(p.num_micro_batches * b.shard_comm_s, rel=1e-12)
    assert sum(terms.values()) == pytest.approx(p.iteration_time_s, rel=1e-12)


def test_memory_bound_counts_the_experts_one_gpu_keeps():
    """Mixtral 8x7B over ep 8 keeps an eighth of each MoE layer's experts per GPU: the search's
    necessary memory condition must not prune a candidate that has a fitting partition."""
    from amp_tui.core.search.bounds.floors import memory_shortfall
    from amp_tui.core.search.partition.walk import best_partition

    scn = parse_scenario({"name": "m", "cluster": {"nodes": [{"count": 4, "gpu": "H100", "gpus_per_node": 8,
                                                              "intra_node_bandwidth": "450 GB/s",
                                                              "inter_node_bandwidth": "3200 Gbps"}]},
                          "model": {"preset": "mixtral-8x7b"},
                          "training": {"global_batch_size": 32, "precision": "bf16", "recompute": "full"}})
    c = CostModel(scn, Knobs(recompute="full", ep=8)).candidate(4, 1, 8, 1, (0,))
    assert best_partition(c).partition is not None
    assert memory_shortfall(c) is None


def test_compare_reads_zero3_traffic_as_nothing_for_a_strategy_without_it():
    from amp_tui.core.plans.compare import compare

    scn = two_nodes(zero_stage="auto")
    fsdp = evaluate(scn, Strategy(1, 1, 8, 1, zero_stage=3))
    ddp = evaluate(scn, Strategy(1, 1, 8, 1, zero_stage=0))
    rows = {row.name: row for row in compare(ddp, fsdp).terms}
    assert rows["ZeRO-3 comm"].a == 0.0 and rows["ZeRO-3 comm"].b > 0


def test_deepspeed_zero3_gathers_cross_nodes_at_each_gpus_share_of_the_network():
    """FSDP's per-layer ring over both nodes moves a layer at the crossing flow's rate (the node's
    whole network); DeepSpeed's module-by-module gathers move each GPU's at its share, 1/4 of a
    node of 4 GPUs. Inside one node the two frameworks' rings are the same."""
    def shard_seconds_per_byte(framework: str, dp: int) -> float:
        scn = two_nodes(zero_stage=3, framework=framework)
        candidate = CostModel(scn, Knobs(zero_stage=3)).candidate(1, 1, dp, 1, (0,))
        return candidate.stage_hardware[0][3][0] * dp / (dp - 1)

    fsdp, deepspeed = (shard_seconds_per_byte(f, 8) for f in ("fsdp", "deepspeed"))
    assert fsdp == pytest.approx(1 / (INTER * GBPS), rel=1e-12)
    assert deepspeed == pytest.approx(4 / (INTER * GBPS), rel=1e-12)
    assert shard_seconds_per_byte("fsdp", 4) == pytest.approx(shard_seconds_per_byte("deepspeed", 4), rel=1e-12)
