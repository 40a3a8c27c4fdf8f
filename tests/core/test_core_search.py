"""search.py: the ranking equals brute force over every candidate and partition, agrees with evaluate,
is deterministic, cancellable, reports progress, and enumerates each distinct node order once."""

import itertools
import math

import numpy as np
import pytest
from core_builders import brute_force, build, close, examples, layer, node, scenario_dicts
from hypothesis import given, settings
from hypothesis import strategies as st

from amp_tui.core.base.errors import Cancelled
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.orders import node_orders
from amp_tui.core.search.search import enumerate_candidates, search
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy, even_partition
from amp_tui.core.spec.validity import validate_strategy


def _key(strategy: Strategy) -> tuple:
    return (strategy.tp, strategy.pp, strategy.dp, strategy.micro_batch_size, strategy.placement)


def _brute_force_search(scn):
    """{candidate key: best fitting iteration time}, and the best uniform rank-order time."""
    cost = CostModel(scn)
    rank = tuple(range(len(scn.cluster.nodes)))
    best, uniform = {}, None
    for key in enumerate_candidates(scn):
        candidate = cost.candidate(*key)
        time, _ = brute_force(candidate)
        if time is not None:
            best[key] = time
        if key[4] == rank:
            even = candidate.predict(even_partition(candidate.num_layers, candidate.pp))
            if even.fits_memory and (uniform is None or even.iteration_time_s < uniform):
                uniform = even.iteration_time_s
    return best, uniform


@settings(max_examples=examples(40), deadline=None)
@given(spec=scenario_dicts(max_layers=6, max_gpus=8), top=st.integers(1, 6))
def test_search_equals_brute_force(spec, top):
    scn = parse_scenario(spec)
    result = search(scn, top=top)
    best, uniform = _brute_force_search(scn)
    times = [p.iteration_time_s for p in result.strategies]

    # sorted, feasible, one entry per candidate, as many as asked for (or as exist)
    assert times == sorted(times)
    assert all(p.fits_memory for p in result.strategies)
    keys = [_key(p.strategy) for p in result.strategies]
    assert len(set(keys)) == len(keys)
    assert len(result.strategies) == min(top, len(best))
    # the values are the best `top` of brute force over every candidate and every partition
    expected = sorted(best.values())[:top]
    assert all(close(a, b) for a, b in zip(times, expected)), (times, expected)
    for p in result.strategies:
        assert close(p.iteration_time_s, best[_key(p.strategy)])
        # what the search reports is what evaluate predicts for the same strategy, exactly
        validate_strategy(scn, p.strategy)
        assert evaluate(scn, p.strategy).iteration_time_s == p.iteration_time_s
        # and evaluate without a partition finds an equally good one
        unsplit = Strategy(*_key(p.strategy)[:4], placement=p.strategy.placement)
        assert close(evaluate(scn, unsplit).iteration_time_s, p.iteration_time_s)
    # the uniform baseline is the best even split in rank order that fits
    if uniform is None:
        assert result.baseline is None
    else:
        assert result.baseline is not None and close(result.baseline.iteration_time_s, uniform)
        assert result.baseline.strategy.partition == even_partition(scn.model.num_layers, result.baseline.strategy.pp)
        if result.strategies:
            assert result.speedup_vs_baseline >= 1 - 1e-9
    # infeasible: exactly the candidates with no partition that fits, pruned or not, each once
    keys = enumerate_candidates(scn)
    listed = [_key(entry.strategy) for entry in result.infeasible]
    assert sorted(listed, key=repr) == sorted((k for k in keys if k not in best), key=repr)
    for entry in result.infeasible:
        assert entry.reason.startswith("no partition fits") and " over" in entry.reason
        assert entry.strategy.partition == even_partition(scn.model.num_layers, entry.strategy.pp)
    assert result.stats.infeasible == len(result.infeasible)
    assert result.stats.candidates == len(keys)
    assert result.stats.node_orders == len(node_orders(scn).orders)


@settings(max_examples=examples(40), deadline=None)
@given(spec=scenario_dicts(max_layers=8, max_gpus=8))
def test_enumerated_candidates_are_exactly_the_valid_ones(spec):
    scn = parse_scenario(spec)
    n, gbs, layers = scn.cluster.num_gpus, scn.training.global_batch_size, scn.model.num_layers
    per_node = math.gcd(*(g.gpus_per_node for g in scn.cluster.nodes))
    orders = node_orders(scn).orders
    keys = enumerate_candidates(scn)
    assert len(set(keys)) == len(keys)
    expected = set()
    for tp, pp in itertools.product(range(1, n + 1), repeat=2):
        tp_span = n if scn.search.allow_cross_node_tp else per_node   # tp within a node unless allowed
        if n % (tp * pp) or tp_span % tp or pp > layers:
            continue
        dp = n // (tp * pp)
        for mbs in range(1, scn.search.max_micro_batch_size + 1):
            if gbs % (dp * mbs) == 0:
                for order in (orders if pp > 1 or dp > 1 else orders[:1]):
                    expected.add((tp, pp, dp, mbs, order))
    assert set(keys) == expected
    for key in keys:
        validate_strategy(scn, Strategy(*key[:4], placement=key[4]))


def test_search_is_deterministic():
    scn = load_scenario("paper-het-cluster")
    first, second = search(scn, top=8), search(scn, top=8)
    assert [p.to_dict() for p in first.strategies] == [p.to_dict() for p in second.strategies]
    assert first.baseline == second.baseline
    assert first.infeasible == second.infeasible


@pytest.mark.parametrize("name", ["paper-homogeneous", "paper-het-cluster", "paper-het-model"])
def test_paper_settings(name):
    scn = load_scenario(name)
    result = search(scn, top=5)
    assert len(result.strategies) == 5
    times = [p.iteration_time_s for p in result.strategies]
    assert times == sorted(times)
    for p in result.strategies:
        assert p.fits_memory
        assert evaluate(scn, p.strategy).iteration_time_s == p.iteration_time_s
    assert result.baseline is not None and result.speedup_vs_baseline >= 1


def test_top_1_of_a_wider_search_is_the_same():
    scn = load_scenario("paper-het-model")
    assert search(scn, top=1).strategies[0].iteration_time_s == search(scn, top=10).strategies[0].iteration_time_s


def test_cancel_at_once():
    with pytest.raises(Cancelled):
        search(load_scenario("paper-het-cluster"), should_cancel=lambda: True)


def test_cancel_midway():
    scn = load_scenario("paper-het-model")
    polls = []
    search(scn, should_cancel=lambda: polls.append(1) and False)
    assert len(polls) > 10
    count = 0

    def cancel_halfway():
        nonlocal count
        count += 1
        return count > len(polls) // 2

    with pytest.raises(Cancelled):
        search(scn, should_cancel=cancel_halfway)


def test_progress_goes_from_zero_to_one():
    seen = []
    search(load_scenario("paper-het-cluster"), progress=seen.append)
    assert len(seen) >= 2
    assert all(0 <= f <= 1 for f in seen)
    assert seen == sorted(seen)
    assert seen[-1] == 1.0


TINY = [layer(params=1e6, flops=1e11, activation_bytes=1e6, output_bytes=1e6, width=1024, tokens=1024)] * 4


def test_infeasible_list_does_not_depend_on_top():
    """Pruned candidates are still checked for memory: top 1 and top 50 list the same infeasible ones."""
    scn = load_scenario("paper-het-cluster")
    narrow, wide = search(scn, top=1), search(scn, top=50)
    assert narrow.stats.pruned > wide.stats.pruned
    assert narrow.infeasible == wide.infeasible and len(narrow.infeasible) == narrow.stats.infeasible > 0


def test_nothing_fits_reports_infeasible_with_a_reason():
    tiny = {"base": "V100", "memory": "1 GiB"}
    layers = [layer(params=1e8, flops=1e11, activation_bytes=1e6, output_bytes=1e6, width=1024, tokens=1024)] * 4
    scn = build([node(2, tiny, 1)], layers, 4, runtime_reserve="256 MiB")
    result = search(scn)
    assert result.strategies == () and result.baseline is None and result.speedup_vs_baseline is None
    assert result.infeasible
    assert all(entry.reason for entry in result.infeasible)
    assert len({_key(entry.strategy) for entry in result.infeasible}) == len(enumerate_candidates(scn))


def test_memory_limit_changes_the_winner():
    """A model that runs fastest unsplit but cannot fit on one GPU: the search must pipeline it."""
    layers = [layer(params=4e7, flops=1e9, activation_bytes=1e6, output_bytes=1e8, width=1024, tokens=1024)] * 4
    roomy = build([node(2, {"base": "V100", "memory": "64 GiB"}, 1, inter=1)], layers, 2)
    tight = build([node(2, {"base": "V100", "memory": "2 GiB"}, 1, inter=1)], layers, 2,
                  runtime_reserve="256 MiB")
    assert search(roomy, top=1).strategies[0].strategy.pp == 1
    winner = search(tight, top=1).strategies[0]
    assert winner.strategy.pp == 2 and winner.fits_memory
    assert evaluate(tight, Strategy(1, 1, 2, 1, (4,))).fits_memory is False


def test_evaluate_without_partition_when_nothing_fits():
    """No partition fits: evaluate predicts the even split and says why (it used to raise TypeError)."""
    layers = [layer(params=4e7, flops=1e9, activation_bytes=1e6, output_bytes=1e8, width=1024, tokens=1024)] * 4
    tight = build([node(2, {"base": "V100", "memory": "2 GiB"}, 1, inter=1)], layers, 2,
                  runtime_reserve="256 MiB")
    prediction = evaluate(tight, Strategy(1, 1, 2, 1))
    assert prediction.fits_memory is False
    assert prediction.strategy.partition == (4,)
    assert "stage 0" in prediction.reason and "over" in prediction.reason


def test_a_scenario_without_candidates_gives_an_empty_result():
    """3 GPUs, global batch 1, 2 layers: dp must be 1 and pp = 3 exceeds the layers; nothing to rank."""
    scn = build([node(3, "V100", 1)], TINY[:2], 1)
    assert enumerate_candidates(scn) == []
    seen = []
    result = search(scn, progress=seen.append)
    assert result.strategies == () and result.baseline is None and result.infeasible == ()
    assert result.stats.candidates == 0
    assert seen[-1] == 1.0


@pytest.mark.parametrize("model", ["gpt3-6.7b", "gpt3-175b", "llama2-70b"])
def test_megatron_territory_keeps_tensor_parallelism_inside_nodes(model):
    """16 DGX A100 nodes (8 A100 80 GB on NVSwitch each, InfiniBand between). Even when allowed to
    span nodes, tensor parallelism stays inside one in every ranked plan, and every plan fits; the
    models too big for data parallelism alone are split by tensor and pipeline parallelism, as
    Megatron-LM's experience would have it."""
    scn = parse_scenario({
        "name": f"dgx-{model}", "cluster": {"nodes": [{"instance": "dgx-a100", "count": 16}]},
        "model": {"preset": model},
        "training": {"global_batch_size": 512, "precision": "bf16", "zero_stage": 1},
        "search": {"allow_cross_node_tp": True},
    })
    assert any(key[0] > 8 for key in enumerate_candidates(scn))     # tp across nodes was on offer
    result = search(scn, top=5)
    assert len(result.strategies) == 5
    cost = CostModel(scn)
    nvswitch = 1.0 / scn.cluster.nodes[0].intra_node_bandwidth
    for p in result.strategies:
        s = p.strategy
        assert s.tp <= 8 and p.fits_memory
        if s.tp > 1:     # every stage's tensor-parallel ring runs over NVSwitch
            layout = cost.layout(s.tp, s.pp, s.dp, s.placement)
            assert np.allclose(layout.stage_tp_seconds_per_byte, nvswitch)
    best = result.strategies[0].strategy
    if model != "gpt3-6.7b":
        assert best.tp > 1 and best.pp > 1


def test_near_ties_are_listed_in_the_order_of_the_times_reported():
    """Two strategies tie up to the last bits, and the partition solve and the prediction sum the
    same terms in different orders (found by CI's hypothesis run): the list follows what it reports."""
    def layer(name, params, output, tp_bytes=None):
        return {"params": params, "flops": 1e10, "activation_bytes": 0.0, "output_bytes": output, "name": name,
                "width": 64.0, "tokens": 1.0, **({"tp_comm_bytes": tp_bytes} if tp_bytes else {})}
    scn = parse_scenario({
        "name": "tie", "cluster": {"nodes": [
            {"count": 2, "gpu": "T4", "gpus_per_node": 1, "intra_node_bandwidth": 1.0, "inter_node_bandwidth": 100.0},
            {"count": 2, "gpu": "T4", "gpus_per_node": 2, "intra_node_bandwidth": 170.0, "inter_node_bandwidth": 1.0}]},
        "model": {"name": "tie", "sequence_length": 1, "layers": [
            layer("l0", 19e6, 2e5, 1e5), layer("l1", 0.0, 1e5), layer("l2", 4.5e6, 1e5, 1e5), layer("l3", 0.0, 1e5),
            layer("l4", 0.0, 1e5)]},
        "training": {"global_batch_size": 1, "precision": "fp16", "optimizer": "adam", "schedule": "1f1b",
                     "recompute": "none", "zero_stage": 0, "runtime_reserve": "256 MiB"},
        "search": {"max_micro_batch_size": 64, "reorder_nodes": True, "allow_cross_node_tp": True}})
    times = [p.iteration_time_s for p in search(scn, top=3).strategies]
    assert len(times) == 3 and times == sorted(times)
