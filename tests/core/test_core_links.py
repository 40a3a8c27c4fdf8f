"""Flows across nodes: one connection reaches at most link_flow_share of the line rate, several
through one interface share its achieved bandwidth (link_efficiency)."""

import numpy as np
import pytest

from amp_tui.core.costmodel.placement import Nodes
from amp_tui.core.spec.params import FAMILIES
from amp_tui.core.spec.scenario import load_scenario

LINE = 50e9 / 8          # g4dn.12xlarge: 50 Gbps


@pytest.fixture(scope="module")
def nodes():
    return Nodes(load_scenario("paper-homogeneous").cluster, (0,))


def test_one_flow_is_capped_below_the_shared_interface(nodes):
    one = nodes.flow_bandwidth(np.array([[0]]), np.array([[4]]))[0, 0]
    assert one == pytest.approx(LINE * FAMILIES["link_flow_share"].default_for("ethernet"))
    assert one < LINE * FAMILIES["link_efficiency"].default_for("ethernet")


def test_four_flows_through_one_interface_share_its_achieved_bandwidth(nodes):
    src, dst = np.arange(4)[None, :], np.arange(4, 8)[None, :]
    four = nodes.flow_bandwidth(src, dst)[0]
    assert four == pytest.approx(np.full(4, LINE * FAMILIES["link_efficiency"].default_for("ethernet") / 4))
    assert four.sum() > nodes.flow_bandwidth(np.array([[0]]), np.array([[4]]))[0, 0]


def test_flows_inside_a_node_are_not_capped(nodes):
    inside = nodes.flow_bandwidth(np.array([[0]]), np.array([[1]]))[0, 0]
    assert inside == pytest.approx(nodes.intra[0])


def test_a_ring_pays_each_hop_latency_once(nodes):
    """A ring over the 4 nodes (16 ranks): 12 hops inside a node, 4 crossing. One chunk's trip pays
    each hop's latency once, so a step costs the mean hop latency, not the crossing latency."""
    ring = np.arange(16)[None, :]
    _, latency = nodes.ring_links(ring)
    assert latency[0] == pytest.approx((12 * nodes.intra_latency[0] + 4 * nodes.inter_latency[0]) / 16)
    assert latency[0] < nodes.inter_latency[0]
    _, inside = nodes.ring_links(np.arange(4)[None, :])
    assert inside[0] == pytest.approx(nodes.intra_latency[0])


def test_an_all_reduce_message_pays_the_cheaper_of_a_ring_and_a_tree_over_the_nodes(nodes):
    """16 ranks on 4 nodes of 4 (PCIe inside, Ethernet across): a ring's 2 x 15 steps of the mean
    hop latency, or a tree over the nodes, 2 x (3 hops inside a node + log2 4 crossings)."""
    intra, inter = nodes.intra_latency[0], nodes.inter_latency[0]
    ring = 2 * 15 * (12 * intra + 4 * inter) / 16
    tree = 2 * (3 * intra + 2 * inter)
    assert tree < ring
    assert nodes.allreduce_latency(np.arange(16)[None, :])[0] == pytest.approx(tree)
    assert nodes.allreduce_latency(np.arange(4)[None, :])[0] == pytest.approx(2 * 3 * intra)
    assert nodes.allreduce_latency(np.arange(1)[None, :])[0] == 0.0


def test_layouts_built_from_shared_stage_terms_equal_those_built_whole():
    """build_layout looks up the terms of stages (and boundaries) met in other orders when every
    stage holds whole nodes: over every order of three groups of unlike nodes and several shapes
    (stages of one, two or three nodes, and of half a node, which are built whole), the layouts
    are the same, array for array, as without the cache, and the cache is hit."""
    import itertools

    from core_builders import build, layer, node

    from amp_tui.core.costmodel.placement import build_layout

    scn = build([node(count=2, gpu="V100", gpus_per_node=4, intra=100.0, inter=10.0),
                 node(count=1, gpu="T4", gpus_per_node=4, intra=25.0, inter=5.0),
                 node(count=3, gpu="A100-40GB", gpus_per_node=4, intra=2400.0, inter=100.0)],
                [layer(flops=1e9, name="l")], 1)
    cluster, params = scn.cluster, scn.params
    shared: dict = {}
    stages = 0
    for order in itertools.permutations(range(3)):
        nodes = Nodes(cluster, order, params)
        for tp, cp, pp, dp in ((1, 1, 6, 4), (2, 1, 3, 4), (4, 1, 3, 2), (2, 2, 2, 3), (2, 1, 12, 1), (1, 1, 2, 12)):
            cached = build_layout(cluster, tp * cp, pp, dp, order, nodes, shared, cp=cp)
            whole = build_layout(cluster, tp * cp, pp, dp, order, nodes, cp=cp)
            stages += pp
            assert cached.stage_groups == whole.stage_groups
            for name, value in vars(whole).items():
                if isinstance(value, np.ndarray):
                    assert np.array_equal(getattr(cached, name), value), (order, tp, cp, pp, dp, name)
    assert 0 < sum(key[0] == "stage" for key in shared) < stages / 2
