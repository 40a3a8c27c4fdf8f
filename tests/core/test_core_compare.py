"""Compare: the named time terms add up to the iteration time, and the sentence names who wins and why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amp_tui.core.plans.compare import Row, compare, explain, mfu, time_terms, tokens_per_s
from amp_tui.core.search.search import search
from amp_tui.core.spec.scenario import load_scenario


@pytest.fixture(scope="module")
def het():
    scenario = load_scenario("paper-het-cluster")
    return scenario, search(scenario)


def test_terms_sum_to_the_iteration_time(het):
    scenario, result = het
    for prediction in (*result.strategies, result.baseline):
        terms = time_terms(prediction)
        assert set(terms) >= {"compute", "tp comm", "pipeline sends", "bubble", "dp all-reduce", "optimizer"}
        assert sum(terms.values()) == pytest.approx(prediction.iteration_time_s, rel=1e-9)
        assert all(value >= 0 for value in terms.values())


def test_comparison_rows_and_sentence(het):
    scenario, result = het
    a, b = result.strategies[0], result.strategies[-1]
    comparison = compare(a, b, scenario)
    iteration = comparison.terms[-1]
    assert iteration.name == "iteration"
    assert iteration.difference == pytest.approx(b.iteration_time_s - a.iteration_time_s)
    # The per-term differences add up to the difference in iteration time.
    assert sum(row.difference for row in comparison.terms[:-1]) == pytest.approx(iteration.difference)
    assert comparison.sentence.startswith(f"{comparison.a_name} is faster by ")
    memory_rows = [row for row in comparison.stages if row.name.endswith("memory")]
    assert len(memory_rows) == max(len(a.stages), len(b.stages))
    assert "difference" in comparison.lines()[2]


def test_baseline_comparison_names_the_winner_either_way(het):
    scenario, result = het
    forward = compare(result.baseline, result.strategies[0], scenario, a_name="uniform")
    backward = compare(result.strategies[0], result.baseline, scenario, b_name="uniform")
    assert forward.sentence.startswith(forward.b_name + " is faster by")
    assert backward.sentence.startswith(backward.a_name + " is faster by")


def test_sentence_names_the_biggest_contributors_with_their_link():
    terms = [Row("compute", 1.0, 1.0, "s"), Row("bubble", 0.30, 0.18, "s"), Row("dp all-reduce", 0.40, 0.75, "s"),
             Row("optimizer", 0.010, 0.011, "s")]
    sentence = explain("1x8x2", "2x4x2", 1.71, 1.94, terms, {"dp all-reduce": "at 10 Gbps"})
    assert sentence == "1x8x2 is faster by 230 ms: 350 ms less dp all-reduce at 10 Gbps, 120 ms more bubble"


def test_equal_times_say_so():
    assert "take the same time" in explain("a", "b", 1.0, 1.0, [])


def test_a_cost_model_with_named_terms_is_picked_up(het):
    """New terms added to the cost model later (as a `terms` mapping) flow through unchanged."""
    scenario, result = het

    class WithTerms:
        def __init__(self, prediction, terms):
            self._p, self.terms = prediction, terms

        def __getattr__(self, name):
            return getattr(self._p, name)

    a = WithTerms(result.strategies[0], {"compute": 1.0, "per-micro-batch overhead": 0.5})
    b = WithTerms(result.strategies[1], {"compute": 1.0, "per-micro-batch overhead": 0.2})
    comparison = compare(a, b)
    assert [row.name for row in comparison.terms] == ["compute", "per-micro-batch overhead", "iteration"]
    assert "per-micro-batch overhead" in comparison.sentence


def test_tokens_per_s_and_mfu_by_hand(het):
    scenario, result = het
    p = result.strategies[0]
    assert tokens_per_s(scenario, p) == pytest.approx(p.samples_per_s * scenario.model.sequence_length)
    flops = 3 * scenario.model.columns["flops"].sum() * scenario.training.global_batch_size
    peak = sum(g.num_gpus * g.gpu.peak_flops_16 for g in scenario.cluster.nodes)
    assert mfu(scenario, p) == pytest.approx(flops / (p.iteration_time_s * peak))
    assert 0 < mfu(scenario, p) < 1
    slower = replace(p, iteration_time_s=2 * p.iteration_time_s)
    assert mfu(scenario, slower) == pytest.approx(mfu(scenario, p) / 2)


def test_the_sentence_names_the_link_of_the_strategy_that_spends_more_on_the_term():
    """Issue 28, minor 2: the link in '552 ms more pipeline sends at 7 Gbps' is the one the larger of
    the two times runs over, and a strategy with idle nodes is laid out on the nodes it uses. Before,
    the slower strategy's links always won ('at 2400 Gbps' where the faster's sends ran at 7 Gbps)."""
    import re

    from amp_tui.core.plans.compare import compare, term_links, time_terms
    from amp_tui.core.search.planner import find_plans
    from amp_tui.core.spec.scenario import load_scenario

    scenario = load_scenario("mixed-a100-a10g-llama2-13b")     # NVLink A100 nodes, PCIe A10G nodes
    ranked = find_plans(scenario, top=12).result.strategies
    named = 0
    for i, a in enumerate(ranked):
        for b in ranked[i + 1:]:
            sentence = compare(a, b, scenario).sentence
            for name, link in re.findall(r"(tp comm|pipeline sends|dp all-reduce) (at [0-9.]+ [GMT]?bps)", sentence):
                spender = a if time_terms(a)[name] > time_terms(b)[name] else b
                assert term_links(scenario, spender)[name] == link, (sentence, a.strategy, b.strategy)
                named += 1
    assert named > 10


def test_mfu_counts_the_gpus_used_not_the_idle_ones():
    """Issue 28, minor 1: paper-het-cluster's top pick leaves the T4 node idle; its MFU divides by the
    12 V100s it runs on. Before, by all 16 GPUs of the cluster."""
    from amp_tui.core.plans.compare import mfu, model_flops_per_iteration
    from amp_tui.core.search.planner import find_plans
    from amp_tui.core.spec.scenario import load_scenario

    scenario = load_scenario("paper-het-cluster")
    top = find_plans(scenario, top=1).result.strategies[0]
    assert top.strategy.idle and top.strategy.num_gpus == 12
    v100 = scenario.cluster.nodes[0].gpu.peak_flops(scenario.training.precision)
    expected = model_flops_per_iteration(scenario) / (top.iteration_time_s * 12 * v100)
    assert mfu(scenario, top) == pytest.approx(expected, rel=1e-12)


def test_a_measured_layer_time_reports_its_tensor_parallel_all_reduces():
    """Issue 28, minor 3: AMP measured GPT-2's layers at tp 2 and 4, all-reduces included; the cost
    model splits such a time into compute and all-reduces, and now reports the all-reduces as
    tensor-parallel comm (before: 0, all of it counted as compute). The total is unchanged."""
    from amp_tui.core.plans.compare import time_terms
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.core.spec.strategy import Strategy

    scenario = load_scenario("paper-homogeneous")
    assert any(2 in by_tp for layer in scenario.model.groups for by_tp in layer.profile.values())
    for tp in (2, 4):
        prediction = evaluate(scenario, Strategy(tp, 2, 8 // tp, 1))
        terms = time_terms(prediction)
        assert terms["tp comm"] > 0.05 * terms["compute"], tp
        assert sum(terms.values()) == pytest.approx(prediction.iteration_time_s, rel=1e-9)
    assert time_terms(evaluate(scenario, Strategy(1, 2, 8, 1)))["tp comm"] == 0
