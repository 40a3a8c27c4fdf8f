"""pricing.py: dollars per hour of the nodes a strategy uses and per million tokens, checked by hand."""

import math

import pytest
from core_builders import layer, node, scenario_dict

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.pricing import cost_per_hour_usd, cost_unit, priced
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.hardware import instance_catalog
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy

PRICED = ("g4dn.12xlarge", "g4dn.metal", "p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge",
          "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "g5.12xlarge", "g5.48xlarge", "g6.12xlarge",
          "a2-highgpu-8g", "a3-highgpu-8g", "ND96asr_v4")


def test_every_rented_instance_has_a_price_and_owned_ones_none():
    catalog = instance_catalog()
    for name in PRICED:
        assert catalog[name]["price_per_hour"] > 0, name
    assert "price_per_hour" not in catalog["dgx-a100"] and "price_per_hour" not in catalog["dgx-h100"]


def test_cost_of_the_mixed_aws_fleet_by_hand():
    # 2 x p4d.24xlarge at $32.7726 + 4 x g5.12xlarge at $5.672 = $88.2332 per hour
    scn = load_scenario("mixed-a100-a10g-llama2-13b")
    best = search(scn, top=1).strategies[0]
    assert math.isclose(best.cost_per_hour_usd, 2 * 32.7726 + 4 * 5.672)
    # LLaMA-2 13B: 4096 tokens per sample
    tokens_per_hour = best.samples_per_s * 4096 * 3600
    assert math.isclose(best.cost_per_million_tokens_usd, best.cost_per_hour_usd / tokens_per_hour * 1e6)
    assert cost_unit(scn) == "tokens"
    assert best.to_dict()["cost_per_hour_usd"] == best.cost_per_hour_usd


def test_idle_nodes_are_not_charged_and_a_group_price_overrides_the_catalog():
    scn = parse_scenario(scenario_dict(
        [{"instance": "p3.8xlarge", "count": 3, "price_per_hour": 4.0}, {"instance": "g4dn.12xlarge", "count": 2}],
        [layer(params=1e6, flops=1e9, activation_bytes=1e3, output_bytes=1e3)] * 4, 8))
    assert cost_per_hour_usd(scn, Strategy(1, 1, 20, 1)) == 3 * 4.0 + 2 * 3.912
    assert cost_per_hour_usd(scn, Strategy(1, 1, 12, 1, idle=((1, 2),))) == 12.0
    assert cost_per_hour_usd(scn, Strategy(1, 1, 8, 1, idle=((0, 1), (1, 1)))) == 2 * 4.0 + 3.912


def test_an_unpriced_node_leaves_the_cost_unknown_and_a_layer_model_counts_samples():
    scn = parse_scenario(scenario_dict([node(count=2, gpu="V100", gpus_per_node=2)],
                                       [layer(params=1e6, flops=1e9, activation_bytes=1e3, output_bytes=1e3)] * 4, 8))
    prediction = evaluate(scn, Strategy(1, 1, 4, 1))
    assert prediction.cost_per_hour_usd is None and prediction.cost_per_million_tokens_usd is None
    assert prediction.to_dict()["cost_per_hour_usd"] is None
    assert cost_unit(scn) == "samples"
    with_price = parse_scenario(scenario_dict([node(count=2, gpu="V100", gpus_per_node=2) | {"price_per_hour": 3.0}],
                                              [layer(params=1e6, flops=1e9, activation_bytes=1e3, output_bytes=1e3)] * 4, 8))
    p = priced(with_price, prediction)
    assert p.cost_per_hour_usd == 6.0
    assert math.isclose(p.cost_per_million_tokens_usd, 6.0 / (p.samples_per_s * 3600) * 1e6)


def test_a_bad_price_is_refused_naming_the_field():
    with pytest.raises(SpecError, match=r"cluster.nodes\[0\].price_per_hour"):
        parse_scenario(scenario_dict([node() | {"price_per_hour": -1}], [layer(params=1, flops=1)], 1))
