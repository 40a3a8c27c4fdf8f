"""Context parallelism: the tensor- and context-parallel rings of a tp x cp block, and ring
attention's exposed sends (terms/context.py), by hand."""

import numpy as np
import pytest
from core_builders import IDEAL

from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.placement import Nodes
from amp_tui.core.costmodel.terms.compute import attention_forward_time
from amp_tui.core.costmodel.terms.context import exposed_ring_time, ring_steps
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.spec.strategy import Strategy


def gpt(nodes: int = 1, network: str = "200 Gbps"):
    """A small GPT (h 1024, 16 heads, 2,048 tokens) on nodes of 8 A100s."""
    return parse_scenario({
        "name": "t", "cluster": {"nodes": [{"count": nodes, "gpu": "A100-80GB", "gpus_per_node": 8,
                                            "intra_node_bandwidth": "300 GB/s", "inter_node_bandwidth": network}]},
        "model": {"family": "gpt", "hidden_size": 1024, "num_layers": 4, "num_heads": 16,
                  "sequence_length": 2048, "vocab_size": 32000},
        "training": {"global_batch_size": 16, "precision": "bf16"},
        "calibration": IDEAL,
    })


def test_tensor_parallelism_stays_inside_a_node_when_only_the_context_ring_crosses():
    """tp 8 x cp 2 on two nodes of 8: the tensor-parallel rings are each node's 8 GPUs (NVLink);
    the context-parallel rings pair rank i with rank i + 8, 8 flows through each node's network."""
    nodes = Nodes(gpt(nodes=2).cluster, (0,))
    (tp_spb, tp_lat), (cp_spb, cp_lat) = nodes.block_links(np.arange(16)[None, :], cp=2)
    assert tp_spb[0] == pytest.approx(1 / nodes.intra[0])
    assert tp_lat[0] == pytest.approx(nodes.intra_latency[0])
    crossing = nodes.flow_bandwidth(np.arange(8)[None, :], np.arange(8, 16)[None, :]).min()
    assert cp_spb[0] == pytest.approx(1 / crossing)
    assert cp_lat[0] == pytest.approx(nodes.inter_latency[0])
    # without context parallelism the block is one tensor-parallel ring over both nodes (two
    # crossing hops), and there is no context ring
    (whole_spb, _), (none_spb, none_lat) = nodes.block_links(np.arange(16)[None, :], cp=1)
    assert whole_spb[0] == pytest.approx(nodes.ring_links(np.arange(16)[None, :])[0][0])
    assert whole_spb[0] > tp_spb[0] and none_spb[0] == 0 and none_lat[0] == 0


def test_ring_steps_by_hand():
    """tp 2, cp 2, one sample: a block's rank holds 1,024 tokens, K and V of 512 columns each in
    bf16 (no grouped keys); one step is half the rank's attention core."""
    scn = gpt()
    gpu = scn.cluster.nodes[0].gpu
    cost = CostModel(scn)
    kv, step = ring_steps(scn.model, gpu, "bf16", cost.params, tp=2, cp=2, mbs=1)
    blocks = np.array([layer.kind == "block" for layer in scn.model.layers])
    assert kv[blocks] == pytest.approx(1024 * 2 * 512 * 2)
    assert not kv[~blocks].any() and not step[~blocks].any()
    assert step == pytest.approx(attention_forward_time(scn.model, gpu, "bf16", cost.params, 2, 2, 1) / 2)
    assert not ring_steps(scn.model, gpu, "bf16", cost.params, tp=2, cp=1, mbs=1)[0].any()


def test_exposed_ring_time_by_hand():
    kv, step = np.array([1e6, 0.0]), np.array([5e-4, 0.0])
    # 1 GB/s, 10 us: a forward step sends 1.01 ms beside 0.5 ms of attention; a backward step
    # 2.01 ms beside 1.25 ms; three steps on a ring of four
    exposed = exposed_ring_time(kv, step, 4, 1e-9, 1e-5, forward_passes=1.0)
    assert exposed == pytest.approx([3 * (0.51e-3 + 0.76e-3), 0.0])
    recomputed = exposed_ring_time(kv, step, 4, 1e-9, 1e-5, forward_passes=2.0)
    assert recomputed[0] - exposed[0] == pytest.approx(3 * 0.51e-3)
    # a fast link hides every send; no ring without context parallelism
    assert not exposed_ring_time(kv, step, 4, 1e-13, 1e-7, forward_passes=1.0).any()
    assert not exposed_ring_time(kv, step, 1, 1e-9, 1e-5, forward_passes=1.0).any()


def test_a_context_ring_over_a_slow_network_costs_what_its_steps_do_not_hide():
    """tp 1 x cp 2 over two nodes joined by 1 Gbps: the stage's tensor/context communication is
    the ring's exposed sends (no tensor parallelism), layer by layer; over 400 Gbps it is hidden."""
    strategy = Strategy(8, 1, 1, 1, cp=2)
    slow, fast = gpt(nodes=2, network="1 Gbps"), gpt(nodes=2, network="400 Gbps")
    p_slow, p_fast = evaluate(slow, strategy), evaluate(fast, strategy)
    assert p_slow.iteration_time_s > p_fast.iteration_time_s
    cost = CostModel(slow, resolve(strategy, slow.training))
    layout = cost.layout(8, 1, 1, (0,))
    link = (float(layout.stage_cp_seconds_per_byte[0]), float(layout.stage_cp_latency[0]))
    kv, step = cost.ring_steps(0, 8, 1)
    tp_bytes = cost.layer_times(0, 8, 1)[1]
    tp_comm = tp_bytes * layout.stage_tp_seconds_per_byte[0] \
        + np.where(tp_bytes > 0, cost.tp_messages * 2 * 7 * layout.stage_tp_latency[0], 0.0)
    by_hand = tp_comm * cost.tp_exposed + exposed_ring_time(kv, step, 2, *link, forward_passes=1.0)
    assert p_slow.stages[0].tp_comm_s == pytest.approx(float(by_hand.sum()), rel=1e-9)
    assert exposed_ring_time(kv, step, 2, *link, forward_passes=1.0).sum() > 0.1 * p_slow.stages[0].tp_comm_s
