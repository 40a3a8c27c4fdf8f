"""Uneven data-parallel shares (terms/shares.py, shares.py) and per-stage tp/dp (stagewise.py):
the terms by hand, the searches against brute force, plan's post-pass, and bad input."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.shares import ReplicaTimes, best_shares, predict_with_shares
from amp_tui.core.costmodel.stagewise import StageWise
from amp_tui.core.costmodel.terms import shares as terms
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.partition.walk import best_per_stage_partition
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy, parse_strategy
from amp_tui.core.spec.validity import validate_strategy
from tests.core.core_builders import (
    IDEAL,
    brute_force,
    build,
    close,
    compositions,
    examples,
    layer,
    node,
)

# -- the shares terms by hand -------------------------------------------------------------------------

def test_best_counts_by_hand():
    # Replica 0: 1 s per micro-batch after a 3 s fill; replica 1: 2 s after 6 s. Six micro-batches:
    # (5, 1) finishes at max(4 x 1 + 3, 0 + 6) = 7 s; (4, 2) at max(6, 8) = 8 s; (6, 0) leaves one idle.
    assert terms.best_counts(6, [1.0, 2.0], [3.0, 6.0]) == (5, 1)
    assert terms.slowest((5, 1), [1.0, 2.0], [3.0, 6.0]) == (0, 7.0)
    assert terms.replica_time(4, 2.0, 6.0) == 12.0
    with pytest.raises(ValueError):
        terms.best_counts(1, [1.0, 1.0], [1.0, 1.0])


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(0.0, 20.0)), min_size=1, max_size=4),
       st.integers(0, 8))
def test_best_counts_is_the_brute_force_optimum(replicas, extra):
    bottleneck, fill = [m for m, _ in replicas], [f for _, f in replicas]
    total = len(replicas) + extra
    got = terms.best_counts(total, bottleneck, fill)
    assert sum(got) == total and min(got) >= 1
    best = min(max(terms.replica_time(n, m, f) for n, m, f in zip(counts, bottleneck, fill))
               for counts in itertools.product(range(1, total + 1), repeat=len(replicas)) if sum(counts) == total)
    assert close(terms.slowest(got, bottleneck, fill)[1], best, 1e-12)


def test_proportional_counts():
    assert terms.proportional_counts(12, [3.0, 1.0]) == (9, 3)
    assert sum(terms.proportional_counts(7, [1.0, 1.0, 5.0])) == 7


# -- shares in the cost model -----------------------------------------------------------------------

def _two_types(**training):
    """One V100 node and one T4 node (one GPU each), four equal layers: pp 1, dp 2 puts the two
    replicas on different GPUs."""
    layers = [layer(params=2e7, flops=4e11, activation_bytes=1e6, output_bytes=1e5) for _ in range(4)]
    return build([node(1, "V100"), node(1, "T4")], layers, 12, calibration=IDEAL, **training)


def test_shares_prediction_by_hand():
    scenario = _two_types()
    cost = CostModel(scenario)
    strategy = Strategy(1, 1, 2, 1, batch_shares=(9, 3))
    p = evaluate(scenario, strategy, cost)
    # pp = 1: each replica's micro-batch takes its GPU's four layers, no sends, no overheads (IDEAL).
    c_v100 = float(cost.layer_times(0, 1, 1)[0].sum())
    c_t4 = float(cost.layer_times(1, 1, 1)[0].sum())
    assert c_t4 > c_v100
    pipeline = max(9 * c_v100, 3 * c_t4)
    assert close(p.steady_state_s + p.fill_drain_s, pipeline)
    assert close(p.iteration_time_s, pipeline + p.dp_and_optimizer_s)
    assert p.num_micro_batches == (9 if 9 * c_v100 >= 3 * c_t4 else 3)
    assert close(sum(p.time_terms().values()), p.iteration_time_s)
    assert p.strategy.batch_shares == (9, 3)
    assert [round(t, 12) for t in p.replica_times_s] == [round(9 * c_v100, 12), round(3 * c_t4, 12)]
    assert p.to_dict()["batch_shares"] == [9, 3]
    # Even shares are the uniform model: the same figure as no shares at all.
    even = evaluate(scenario, replace(strategy, batch_shares=(6, 6)), cost)
    assert close(even.iteration_time_s, evaluate(scenario, Strategy(1, 1, 2, 1), cost).iteration_time_s)
    assert close(even.iteration_time_s, 6 * c_t4 + even.dp_and_optimizer_s)


def test_best_shares_match_brute_force_over_shares():
    scenario = _two_types()
    cost = CostModel(scenario)
    candidate = cost.candidate(1, 1, 2, 1, (0, 1))
    chosen = best_shares(candidate, (4,))
    pipeline = []
    for a in range(1, 12):
        p = predict_with_shares(cost.candidate(1, 1, 2, 1, (0, 1)), (4,), (a, 12 - a))
        pipeline.append((p.steady_state_s + p.fill_drain_s, (a, 12 - a)))
    assert min(pipeline)[1] == chosen
    assert chosen[0] > chosen[1]          # the V100 takes more


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0)])
def test_shares_on_a_pipeline_match_brute_force(order):
    """pp 2, dp 2 over four groups of two types in turn: replicas of each stage on different GPUs;
    the chosen shares are the brute-force best for the partition, per replica timed on its GPUs."""
    layers = [layer(params=1e7, flops=2e11 * (1 + i % 3), activation_bytes=1e6, output_bytes=1e5) for i in range(6)]
    scenario = build([node(1, "V100"), node(1, "T4"), node(1, "V100"), node(1, "T4")], layers, 16, calibration=IDEAL)
    cost = CostModel(scenario)
    times = ReplicaTimes(cost.candidate(1, 2, 2, 2, order))
    assert times.differ()
    for partition in compositions(6, 2):
        chosen = best_shares(cost.candidate(1, 2, 2, 2, order), partition, times)
        runs = [predict_with_shares(cost.candidate(1, 2, 2, 2, order), partition, (2 * a, 16 - 2 * a), times)
                for a in range(1, 8)]
        best = min((p.steady_state_s + p.fill_drain_s, a) for a, p in zip(range(1, 8), runs))
        got = predict_with_shares(cost.candidate(1, 2, 2, 2, order), partition, chosen, times)
        assert close(got.steady_state_s + got.fill_drain_s, best[0])


# -- per-stage degrees ---------------------------------------------------------------------------------

@pytest.mark.parametrize("training, degrees", [
    ({}, (1, 4, 4, 1)), ({}, (2, 2, 4, 2)), ({}, (4, 4, 1, 1)), ({}, (2, 4, 2, 2)),
    ({"zero_stage": 3}, (1, 4, 4, 1)), ({"zero_stage": 3}, (2, 2, 4, 2)),
    ({"zero_stage": 3, "framework": "fsdp"}, (1, 4, 4, 1)),     # weights kept gathered under pipelines
    ({"recompute": "full", "zero_stage": 1}, (2, 4, 2, 2)), ({"context_parallel": 2}, (2, 2, 2, 1))])
def test_equal_per_stage_degrees_are_the_uniform_model(training, degrees):
    """Per-stage degrees that are all equal cost exactly what the uniform model does, techniques too."""
    scenario = load_scenario("paper-het-cluster")
    scenario = replace(scenario, training=replace(scenario.training, **training))
    cost = CostModel(scenario)
    tp, pp, dp, mbs = degrees
    p = evaluate(scenario, Strategy(tp, pp, dp, mbs), cost)
    model = StageWise(cost, replace(p.strategy, stage_tp=(tp,) * pp, stage_dp=(dp,) * pp), p.strategy.placement)
    q = model.predict(p.strategy.partition)
    assert close(q.iteration_time_s, p.iteration_time_s)
    assert [s.memory.total_bytes for s in q.stages] == pytest.approx([s.memory.total_bytes for s in p.stages])
    partition, exact = model.best_partition()
    assert exact and close(model.iteration_time(partition), p.iteration_time_s)


def test_boundary_resplit_by_hand():
    """Stage 0 at dp 2 on GPUs 0-1 of node 0, stage 1 at dp 4 on GPUs 2-5 (node 0's 2, 3 and node 1's
    0, 1): each receiver needs a quarter of the micro-batch; sender 0 feeds receivers 0 and 1 over
    NVLink, sender 1 feeds receivers 2 and 3 across the network, the two flows sharing node 0's NIC."""
    layers = [layer(params=1e6, flops=1e9, activation_bytes=1e3, output_bytes=1e6) for _ in range(4)]
    scenario = build([node(2, "V100", gpus_per_node=4, intra=100.0, inter=10.0)], layers, 8, calibration=IDEAL)
    cost = CostModel(scenario)
    strategy = Strategy(1, 2, 4, 1, stage_tp=(1, 1), stage_dp=(2, 4))
    model = StageWise(cost, strategy, (0,))
    intra, inter = 100e9 / 8, 10e9 / 8
    coef, _ = model._boundary(0)
    assert close(coef, max(0.25 / intra, 0.25 / (inter / 2)))
    # The pipeline micro-batch is 1 x 4 samples; the cut after layer 1 moves 2 x 4 x 1e6 bytes' worth.
    assert close(float(model.cut[0, 2]), 2 * 4 * 1e6 * coef)


def _per_stage_case():
    layers = [layer(params=3e7 * (1 + i % 2), flops=4e11 * (1 + (i * 7) % 3), activation_bytes=2e8,
                    output_bytes=2e6, tp_comm_bytes=1e6) for i in range(7)]
    nodes = [node(1, "T4", gpus_per_node=4, intra=50.0, inter=50.0), node(2, "V100", gpus_per_node=4, intra=170.0)]
    return build(nodes, layers, 16, calibration={"parameters": {**IDEAL["parameters"], "memory_fragmentation": 0.0}})


def _walk_matches_brute_force(scenario, tps, dps, mbs, order):
    """The per-stage partition walk finds the brute-force best partition (or none where none fits);
    returns (strategy, best time)."""
    strategy = Strategy(max(tps), len(tps), max(dps), mbs, stage_tp=tps, stage_dp=dps)
    validate_strategy(scenario, strategy)
    model = StageWise(CostModel(scenario), strategy, order)
    best_time, _ = brute_force(model)
    partition, exact = model.best_partition()
    assert exact
    # the search's walk over per-stage segment tables (what plan's post-pass runs) agrees
    walked = best_per_stage_partition(model)
    if best_time is None:
        assert partition is None and walked.partition is None
    else:
        assert close(model.iteration_time(partition), best_time, 1e-9) and model.fits(partition)
        assert model.predict(partition).fits_memory
        assert close(model.iteration_time(walked.partition), best_time, 1e-9) and model.fits(walked.partition)
        assert close(walked.iteration_time_s, best_time, 1e-9)
    return strategy, best_time


@pytest.mark.parametrize("tps, dps, mbs", [((1, 2, 2), (4, 2, 2), 1), ((2, 1, 4), (2, 4, 1), 1),
                                           ((1, 4), (4, 2), 2), ((4, 1, 1, 2), (1, 4, 2, 1), 1)])
def test_per_stage_partition_matches_brute_force(tps, dps, mbs):
    scenario = _per_stage_case()
    strategy, best_time = _walk_matches_brute_force(scenario, tps, dps, mbs, (0, 1))
    if best_time is not None:
        assert close(evaluate(scenario, strategy, CostModel(scenario)).iteration_time_s, best_time)


def test_per_stage_memory_binds_in_brute_force():
    """Shrunk GPU memory: some partitions no longer fit, and the search still agrees with brute force."""
    scenario = _per_stage_case()
    strategy = Strategy(2, 3, 4, 1, stage_tp=(1, 2, 2), stage_dp=(4, 2, 2))
    whole = StageWise(CostModel(scenario), strategy, (0, 1))
    need = sorted(max(st.memory.total_bytes for st in whole.predict(p).stages) for p in compositions(7, 3))
    usable = need[len(need) // 2]          # half the partitions fit
    groups = tuple(replace(g, gpu=replace(g.gpu, usable_memory_bytes=usable)) for g in scenario.cluster.nodes)
    scenario = replace(scenario, cluster=replace(scenario.cluster, nodes=groups))
    model = StageWise(CostModel(scenario), strategy, (0, 1))
    fitting = [p for p in compositions(7, 3) if model.predict(p).fits_memory]
    assert 0 < len(fitting) < 15
    best_time, _ = brute_force(model)
    partition, _ = model.best_partition()
    assert close(model.iteration_time(partition), best_time)


def test_post_pass_per_stage_layouts_match_brute_force():
    """The post-pass's per-stage step (layouts one GPU type per stage, pruned by the strategy's
    time) finds the brute-force best over the same layouts, micro-batches and every partition."""
    from amp_tui.core.costmodel.stagewise import micro_batch_sizes, typed_stage_degrees
    from amp_tui.core.search.uneven import _per_stage

    scenario = _per_stage_case()        # 4 T4 then 8 V100
    cost = CostModel(scenario)
    strategy = Strategy(1, 2, 4, 1, partition=(4, 3), placement=(0, 1))   # pipeline micro-batch 4
    layouts = typed_stage_degrees(scenario, 2, (0, 1))
    assert layouts and all(len(set(t)) > 1 or len(set(d)) > 1 for t, d in layouts)
    best = None
    for tps, dps in layouts:
        for mbs in micro_batch_sizes(scenario, dps):
            if mbs * max(dps) not in (2, 4, 8):
                continue
            s = Strategy(max(tps), 2, max(dps), mbs, stage_tp=tps if len(set(tps)) > 1 else None,
                         stage_dp=dps if len(set(dps)) > 1 else None, placement=(0, 1))
            try:
                validate_strategy(scenario, s)
            except SpecError:
                continue
            time, _ = brute_force(StageWise(cost, s, (0, 1)))
            if time is not None and (best is None or time < best):
                best = time
    found, tried = _per_stage(scenario, cost, strategy, float("inf"))
    assert tried > 0
    assert (found is None) == (best is None)
    if best is not None:
        assert close(found.iteration_time_s, best)
        assert found.strategy.per_stage and all(len(st.gpu_types) == 1 for st in found.stages)


# -- plan's post-pass -------------------------------------------------------------------------------

def test_plan_finds_batch_shares_where_they_win(uneven_shares_scenario):
    from amp_tui.core.search.subclusters import search_parts
    from amp_tui.core.search.uneven import improve

    scenario = load_scenario(uneven_shares_scenario)     # gradients reduced in bf16 (conftest)
    result, _ = search_parts(scenario, top=3)
    improved, search = improve(scenario, result)
    best = improved.strategies[0]
    assert best.strategy.batch_shares and len(set(best.strategy.batch_shares)) > 1
    assert best.iteration_time_s < result.strategies[0].iteration_time_s
    assert search.found >= 1 and "heuristically" in search.note
    # It re-evaluates exactly from its own fields.
    again = evaluate(scenario, best.strategy)
    assert close(again.iteration_time_s, best.iteration_time_s)


def test_plan_finds_per_stage_degrees_where_they_win():
    """On 8 A100 + 8 A10G with every GPU used (GPT-3 1.3B, global batch 32), stages with their own
    tp and dp, each on one GPU type, beat every uniform strategy the exact search finds by more
    than MIN_GAIN; on AMP's mixed cluster the per-stage plan's 0.1% is not worth listing."""
    from amp_tui.core.search.search import search
    from amp_tui.core.search.uneven import MIN_GAIN, improve

    het = replace(load_scenario("paper-het-cluster"), search=replace(load_scenario("paper-het-cluster").search,
                                                                      use_all_gpus=True))
    het_result = search(het, top=5, details=False)
    assert improve(het, het_result)[0].strategies[0] is het_result.strategies[0]
    scenario = parse_scenario({"name": "t", "cluster": {"nodes": [{"instance": "p4de.24xlarge", "count": 1},
                                                                  {"instance": "g5.12xlarge", "count": 2}]},
                               "model": {"preset": "gpt3-1.3b"}, "training": {"global_batch_size": 32},
                               "search": {"use_all_gpus": True}})
    result = search(scenario, top=5, details=False)
    improved, _ = improve(scenario, result)
    per_stage = [p for p in improved.strategies if p.strategy.per_stage]
    assert per_stage and per_stage[0].iteration_time_s < result.strategies[0].iteration_time_s * (1 - MIN_GAIN)
    s = per_stage[0].strategy
    assert all(len(st.gpu_types) == 1 for st in per_stage[0].stages)
    assert close(evaluate(scenario, s).iteration_time_s, per_stage[0].iteration_time_s)


# -- input -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, field, words", [
    ({"tp": 1, "pp": 1, "dp": 2, "batch_shares": [9, 4]}, "strategy.batch_shares", "sums to 13"),
    ({"tp": 1, "pp": 1, "dp": 2, "batch_shares": [12]}, "strategy.batch_shares", "needs 2 entries"),
    ({"tp": 1, "pp": 1, "dp": 2, "micro_batch_size": 2, "batch_shares": [9, 3]}, "strategy.batch_shares[0]",
     "multiple of micro_batch_size"),
    ({"tp": [1, 1, 1], "pp": 2, "dp": 1}, "strategy.tp", "needs 2 entries"),
    ({"tp": 1, "pp": 2, "dp": [1, 2]}, "strategy.tp*dp", "must equal the GPU count"),
    ({"tp": 1, "pp": 2, "dp": [1, 1, 1]}, "strategy.dp", "needs 2 entries"),
])
def test_bad_input_names_the_field(fields, field, words):
    scenario = _two_types()
    value = {"micro_batch_size": 1, **fields}
    with pytest.raises(SpecError) as err:
        validate_strategy(scenario, parse_strategy(value))
    assert err.value.field == field and words in err.value.reason
    assert "\n" not in str(err.value)


def test_per_stage_degrees_refuse_hsdp():
    """The per-stage model shards ZeRO-3 over each stage's dp: an HSDP group is refused, not ignored."""
    scenario = _per_stage_case().with_training(zero_stage=3)
    strategy = Strategy(2, 3, 4, 1, stage_tp=(1, 2, 2), stage_dp=(4, 2, 2), hsdp_shard=2)
    with pytest.raises(SpecError) as err:
        validate_strategy(scenario, strategy)
    assert err.value.field == "strategy.hsdp_shard" and "HSDP" in err.value.reason


def test_per_stage_dp_must_divide_the_pipeline_micro_batch():
    scenario = _per_stage_case()      # 12 GPUs; the pipeline's micro-batch is 1 x max(dp) = 5 samples
    with pytest.raises(SpecError) as err:
        validate_strategy(scenario, parse_strategy({"tp": [1, 1, 1], "pp": 3, "dp": [4, 3, 5], "micro_batch_size": 1}))
    assert (err.value.field, err.value.value) == ("strategy.dp[0]", 4) and "micro-batch" in err.value.reason


def test_equal_lists_are_the_uniform_strategy_and_lists_round_trip():
    s = parse_strategy({"tp": [2, 2], "pp": 2, "dp": [4, 4], "micro_batch_size": 1})
    assert s == Strategy(2, 2, 4, 1)
    s = parse_strategy({"tp": [1, 2], "pp": 2, "dp": [4, 2], "micro_batch_size": 1, "batch_shares": None})
    assert s.tps == (1, 2) and s.dps == (4, 2) and s.num_gpus == 8 and s.label == "1/2x2x4/2"
    assert parse_strategy(s.to_dict()) == s


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.tuples(st.floats(1e6, 6e7), st.floats(1e10, 8e11), st.floats(1e6, 4e8), st.floats(1e4, 4e6)),
                min_size=3, max_size=6),
       st.sampled_from([((1, 2, 2), (4, 2, 2), 1), ((2, 1, 4), (2, 4, 1), 1), ((1, 4), (4, 2), 2),
                        ((4, 2), (1, 4), 1), ((2, 2, 4), (2, 2, 1), 2)]),
       st.sampled_from([(0, 1), (1, 0)]), st.sampled_from([0, 1, 3]), st.floats(0.05, 1.0))
def test_per_stage_partition_matches_brute_force_on_random_models(shape, degrees, order, zero, memory_scale):
    """Random layer sizes, per-stage degrees, placements, ZeRO stages and GPU memory: the exact walk
    finds the brute-force best over every partition that fits (or that none fits)."""
    tps, dps, mbs = degrees
    if len(shape) < len(tps):
        return
    layers = [layer(params=p, flops=f, activation_bytes=a, output_bytes=o, tp_comm_bytes=o) for p, f, a, o in shape]
    nodes = [node(1, "T4", gpus_per_node=4, intra=50.0, inter=50.0), node(2, "V100", gpus_per_node=4, intra=170.0)]
    scenario = build(nodes, layers, 16, zero_stage=zero)
    groups = tuple(replace(g, gpu=replace(g.gpu, usable_memory_bytes=g.gpu.usable_memory_bytes * memory_scale))
                   for g in scenario.cluster.nodes)
    scenario = replace(scenario, cluster=replace(scenario.cluster, nodes=groups))
    _walk_matches_brute_force(scenario, tps, dps, mbs, order)
