"""Max flow of a placement, checked against cases worked out by hand."""

import numpy as np
import pytest
from serving_builders import scenario

from amp_tui.serving.network import build_network, coverage, max_flow
from amp_tui.serving.placement import Placement
from amp_tui.serving.routes import decompose


def test_two_stage_pipeline_with_parallel_machines():
    # Machines: A (100/s at 6 layers) on 0-5; B and C (30/s each at 6 layers) on 6-11.
    # Flow: A can pass 100 but B + C take only 60, so the max flow is 60.
    sc = scenario([(1, {k: 600 / k for k in range(1, 7)}, None), (2, {k: 180 / k for k in range(1, 7)}, None)])
    net = build_network(sc)
    flow = max_flow(net, [0, 6, 6], [6, 6, 6])
    assert flow.value == pytest.approx(60, rel=1e-6)
    assert flow.machine == pytest.approx([60, 30, 30], rel=1e-6)


def test_helix_rule_lets_a_machine_start_inside_its_range():
    # A holds 0-5 (50/s), B holds 3-11 (40/s): B runs 6-11 after A, so the flow is 40.
    # Without Helix's rule (B must start where A ends) there would be no path at all.
    sc = scenario([(1, {6: 50.0, **{k: 50.0 for k in range(1, 6)}}, None),
                   (1, {k: 40.0 for k in range(1, 10)}, None)])
    net = build_network(sc)
    assert max_flow(net, [0, 3], [6, 9]).value == pytest.approx(40, rel=1e-6)
    assert max_flow(net, [0, 7], [6, 5]).value == 0   # a gap at layer 6: nothing gets through


def test_slow_link_between_regions_binds():
    # Two regions joined by 8 kB/s; a token between layers is hidden 512 x 2 bytes = 1024 B,
    # so the link carries 8000 / 1024 = 7.8125 tokens/s per pair of machines.
    sc = scenario([(1, {6: 100.0, **{k: 100.0 for k in range(1, 6)}}, "a"),
                   (2, {6: 100.0, **{k: 100.0 for k in range(1, 6)}}, "b")],
                  links=[{"between": ["a", "b"], "bandwidth": "8 kB/s"}], coordinator={"region": "a"})
    net = build_network(sc)
    flow = max_flow(net, [0, 6, 6], [6, 6, 6])
    assert flow.value == pytest.approx(2 * 8000 / 1024, rel=1e-5)   # two pairs of machines


def test_coverage_is_the_layer_cut():
    sc = scenario([(3, {k: 12.0 / k for k in range(1, 13)}, None)])
    net = build_network(sc)
    first, count = np.array([0, 0, 4]), np.array([4, 12, 8])
    assert list(coverage(net, first, count)) == pytest.approx([3 + 1] * 4 + [1 + 1.5] * 8)
    assert max_flow(net, first, count).value == pytest.approx(2.5, rel=1e-6)


def test_routes_add_up_to_the_flow():
    sc = scenario([(1, {k: 600 / k for k in range(1, 7)}, None), (2, {k: 180 / k for k in range(1, 7)}, None)])
    net = build_network(sc)
    placement = Placement.of([0, 6, 6], [6, 6, 6])
    flow = max_flow(net, *placement.arrays())
    routes = decompose(flow, placement)
    assert sum(r.tokens_per_s for r in routes) == pytest.approx(flow.value, rel=1e-6)
    assert sum(r.share for r in routes) == pytest.approx(1.0)
    assert {r.machines for r in routes} == {(0, 1), (0, 2)}
    assert all(r.layers == ((0, 5), (6, 11)) for r in routes)
