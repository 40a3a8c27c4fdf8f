"""The search's lower bounds (floors.py, order_floors.py): every candidate's floor is at most its best
partition (brute force), with the memory caps, the core-layer slow-down and the bottleneck coupled
with the all-reduce tail in play (mixed layer kinds, binding memory, slow networks), and the search
over every node order and every part of small heterogeneous clusters (3 to 5 groups, idle nodes)
equals brute force."""

import math

import numpy as np
import pytest
from core_builders import IDEAL, brute_force, build, close, examples, layer, node, scenario_dict, scenario_dicts
from hypothesis import given, settings
from hypothesis import strategies as st
from test_core_subclusters import _check_against_brute_force

from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.search.bounds import floors as floors_module
from amp_tui.core.search.bounds.floors import time_floors
from amp_tui.core.search.bounds.order_floors import order_free_floors
from amp_tui.core.search.orders import MAX_LISTED
from amp_tui.core.search.search import enumerate_candidates, search
from amp_tui.core.spec.knobs import knob_choices
from amp_tui.core.spec.scenario import parse_scenario

KINDS = ("embedding", "block", "head", "other")


@st.composite
def mixed_kinds(draw, max_layers=6, max_gpus=8, max_groups=3):
    """A small scenario whose layers have mixed kinds, with node orders searched."""
    spec = draw(scenario_dicts(max_layers=max_layers, max_gpus=max_gpus, max_groups=max_groups))
    for entry in spec["model"]["layers"]:
        entry["kind"] = draw(st.sampled_from(KINDS))
    spec["search"]["reorder_nodes"] = True
    return spec


@settings(max_examples=examples(60), deadline=None)
@given(spec=mixed_kinds())
def test_every_floor_is_below_the_candidates_best_partition(spec):
    _assert_floors_below_brute_force(parse_scenario(spec))


def _assert_floors_below_brute_force(scn) -> None:
    for knobs in knob_choices(scn.training):
        cost = CostModel(scn, knobs)
        candidates = [cost.candidate(*key) for key in enumerate_candidates(scn, knobs=knobs)]
        # (with a limit: the coupled floor too, as the search bounds a family's orders)
        for candidate, floor in zip(candidates, time_floors(candidates, lambda: False, limit=math.inf)):
            best, _ = brute_force(candidate)
            if best is not None:
                assert floor <= best * (1 + 1e-9), (candidate.tp, candidate.pp, candidate.dp, candidate.mbs, floor, best)


@settings(max_examples=examples(25), deadline=None)
@given(spec=mixed_kinds())
def test_floors_count_only_the_tensor_parallel_traffic_overlap_leaves_exposed(spec):
    """Under tp_comm_overlap a stage pays part of its tensor-parallel traffic (heavy here): the
    candidates' floors stay below their best partitions."""
    spec["training"]["tp_comm_overlap"] = True
    for entry in spec["model"]["layers"]:
        entry["tp_comm_bytes"] = 1e9
    _assert_floors_below_brute_force(parse_scenario(spec))


def _heterogeneous(draw, groups: int, max_layers: int, slow_memory: bool):
    """`groups` single-GPU-per-node groups of different GPUs (some with little memory), layers of
    mixed kinds: every node order is a distinct placement."""
    gpus = ["V100", "A10G", "T4", "A100-40GB",
            {"base": "T4", "fp16_tflops": 20.0, "memory": "3 GiB"}]
    nodes = [node(count=draw(st.integers(1, 2)), gpu=gpu, gpus_per_node=1,
                  intra=draw(st.sampled_from([10.0, 100.0])), inter=draw(st.sampled_from([5.0, 25.0, 100.0])))
             for gpu in draw(st.permutations(gpus))[:groups]]
    spec = draw(scenario_dicts(max_layers=max_layers, max_gpus=2, max_groups=1, measured=False))
    spec["cluster"]["nodes"] = nodes
    spec["search"].update(reorder_nodes=True, max_micro_batch_size=2)
    spec["training"]["precision"] = draw(st.sampled_from(["fp16", "fp32"]))
    for entry in spec["model"]["layers"]:
        entry["kind"] = draw(st.sampled_from(KINDS))
    if not slow_memory:
        nodes[:] = [n for n in nodes if not isinstance(n["gpu"], dict)] or nodes
    return spec


@st.composite
def heterogeneous(draw, min_groups=3, max_groups=5, max_layers=5, slow_memory=True):
    return _heterogeneous(draw, draw(st.integers(min_groups, max_groups)), max_layers, slow_memory)


@pytest.mark.slow          # brute force over every node order of heterogeneous clusters; CI runs it
@settings(max_examples=examples(15), deadline=None)
@given(spec=heterogeneous(), top=st.integers(1, 3))
def test_search_over_every_order_equals_brute_force(spec, top):
    spec["search"]["use_all_gpus"] = True
    scn = parse_scenario(spec)
    result = search(scn, top=top)
    assert result.stats.all_node_orders
    cost = CostModel(scn)
    expected = sorted(t for key in enumerate_candidates(scn)
                      if (t := brute_force(cost.candidate(*key))[0]) is not None)[:top]
    got = [p.iteration_time_s for p in result.strategies]
    assert len(got) == len(expected)
    assert all(close(a, b) for a, b in zip(got, expected)), (got, expected)


@settings(max_examples=examples(8), deadline=None)
@given(spec=heterogeneous(max_groups=4, max_layers=4), top=st.integers(1, 3))
def test_idle_search_on_three_to_five_groups_equals_brute_force(spec, top):
    """Every part of the cluster, every order of its groups: the same best `top` as brute force."""
    for group in spec["cluster"]["nodes"]:
        group["count"] = min(group["count"], 2)
    _check_against_brute_force(parse_scenario(spec), top)


def test_the_floors_leave_few_candidates_to_solve_on_a_large_cluster():
    """The memory caps and the core-layer slow-down make the bound tight enough on the 1,024-GPU
    three-type benchmark that fewer than a tenth of its candidates are solved."""
    from amp_tui.core.spec.scenario import load_scenario

    result = search(load_scenario("bench-1024-gpus"))
    assert result.stats.evaluated * 10 < result.stats.candidates, result.stats
    assert result.stats.all_node_orders


@settings(max_examples=examples(25), deadline=None)
@given(spec=heterogeneous(max_groups=4, max_layers=5))
def test_the_order_free_floor_is_below_every_orders_best(spec):
    """order_free_floors bounds every node order of a (tp, pp, dp, micro-batch size) family."""
    spec["search"]["use_all_gpus"] = True
    _assert_order_free_floors_below_brute_force(parse_scenario(spec))


@settings(max_examples=examples(40), deadline=None)
@given(spec=mixed_kinds(max_layers=4))
def test_the_order_free_floor_holds_on_nodes_of_several_gpus(spec):
    """Nodes of 1, 2 and 4 GPUs, tensor parallelism inside them or across: the floor's
    tensor-parallel links (the node's own unless rings may cross nodes) and its all-reduce (at
    most 1 / tp of a node's network link per ring) stay below every order's best partition."""
    spec["search"]["use_all_gpus"] = True
    _assert_order_free_floors_below_brute_force(parse_scenario(spec))


def _assert_order_free_floors_below_brute_force(scn) -> None:
    for knobs in knob_choices(scn.training):
        cost = CostModel(scn, knobs)
        keys = enumerate_candidates(scn, knobs=knobs)
        families = sorted({key[:4] for key in keys})
        floors = dict(zip(families, order_free_floors(cost, families, lambda: False)))
        placed = dict(zip(families, order_free_floors(cost, families, lambda: False, ends=True)))
        for key in keys:
            best, _ = brute_force(cost.candidate(*key))
            if best is not None:
                assert floors[key[:4]] <= best * (1 + 1e-9), (key, floors[key[:4]], best)
                assert placed[key[:4]] <= best * (1 + 1e-9), (key, placed[key[:4]], best)


def test_the_order_free_floor_prices_a_tensor_parallel_send_as_the_cost_model_does():
    """Each of a replica's tp ranks sends its 1/tp share of a boundary's activations: with sends
    inside a node (tp 2, four stages on two 4-GPU nodes, one micro-batch, sends dominating) a
    floor that charged every rank the whole activation lay above the best partition."""
    layers = [layer(flops=1e6, output_bytes=1e10, name=f"l{i}", width=64.0, tokens=1.0) for i in range(8)]
    scn = parse_scenario({
        "name": "sends", "cluster": {"nodes": [node(gpu=gpu, gpus_per_node=4, intra=100.0, inter=100.0)
                                               for gpu in ("V100", "T4")]},
        "model": {"name": "sends", "sequence_length": 1, "layers": layers},
        "training": {"global_batch_size": 1, "precision": "fp16"},
        "search": {"reorder_nodes": True, "use_all_gpus": True}})
    cost = CostModel(scn)
    keys = [key for key in enumerate_candidates(scn) if key[:4] == (2, 4, 1, 1)]
    assert len(keys) == 2
    (floor,) = order_free_floors(cost, [(2, 4, 1, 1)], lambda: False)
    assert floor <= min(brute_force(cost.candidate(*key))[0] for key in keys) * (1 + 1e-9)


@settings(max_examples=examples(15), deadline=None)
@given(spec=heterogeneous(min_groups=3, max_groups=4, max_layers=4), top=st.integers(1, 3),
       listed=st.sampled_from([0, MAX_LISTED]))
def test_a_search_over_few_orders_is_exact_only_when_it_says_so(spec, top, listed):
    """With the orders capped at one, `exact` holds only where the ranking equals the search over
    every order, and otherwise the best found is within the stated gap of the optimum. With the
    other orders listed, the families the bound cannot rule out are enumerated: always exact."""
    import amp_tui.core.search.search as search_module

    spec["search"]["use_all_gpus"] = True
    scn = parse_scenario(spec)
    full = search(scn, top=top)
    original = search_module.node_orders
    search_module.node_orders = lambda scenario: original(scenario, limit=1, listed=listed)
    try:
        capped = search(scn, top=top)
    finally:
        search_module.node_orders = original
    got = [p.iteration_time_s for p in capped.strategies]
    want = [p.iteration_time_s for p in full.strategies]
    if listed:
        assert capped.stats.exact and capped.stats.node_orders == full.stats.node_orders
    if capped.stats.exact:
        assert len(got) == len(want) and all(close(a, b) for a, b in zip(got, want)), (got, want)
    elif want and got:     # (the orders tried may have none that fits; then it is not exact, above)
        gap = capped.stats.orders_gap(got[0])
        assert gap is not None and got[0] <= want[0] * (1 + gap) * (1 + 1e-9)


@st.composite
def network_bound(draw):
    """Two or three groups of different GPUs, nodes of one size (so every stage holds whole nodes
    whenever its GPUs are a multiple of it), layers light on compute and heavy on activations sent
    and parameters all-reduced, and link latencies of up to 5 ms: the order-free floor's sends
    over each group's network interface, its two-boundary interior stages and its all-reduce
    bucket latencies are what sets it."""
    per_node = draw(st.sampled_from([1, 2]))
    names = draw(st.permutations(["V100", "A10G", "T4", "A100-40GB"]))[:draw(st.integers(2, 3))]
    nodes = [node(count=draw(st.integers(1, 2)), gpu=name, gpus_per_node=per_node, intra=100.0,
                  inter=draw(st.sampled_from([1.0, 5.0, 25.0]))) for name in names]
    layers = [layer(params=draw(st.sampled_from([0.0, 1e7, 1e8])), flops=draw(st.sampled_from([1e6, 1e10])),
                    output_bytes=draw(st.sampled_from([1e6, 1e8])), name=f"l{i}", kind="block")
              for i in range(draw(st.integers(2, 4)))]
    inside, across = sorted(draw(st.lists(st.sampled_from([0.0, 1e-4, 1e-3, 5e-3]), min_size=2, max_size=2)))
    latency = {"link_latency_s.nvlink": inside, "link_latency_s.pcie": inside,      # (in the classes' order)
               "link_latency_s.infiniband": across, "link_latency_s.ethernet": across}
    overlap = draw(st.sampled_from([0.0, 0.5]))
    return {**scenario_dict(nodes, layers, draw(st.sampled_from([1, 2, 4])), precision="fp16",
                            search={"reorder_nodes": True, "use_all_gpus": True, "max_micro_batch_size": 2},
                            calibration={"parameters": {**IDEAL["parameters"], **latency,
                                                        "dp_overlap.megatron": overlap}})}


@settings(max_examples=examples(40), deadline=None)
@given(spec=network_bound())
def test_the_order_free_floor_holds_where_sends_and_all_reduces_dominate(spec):
    _assert_order_free_floors_below_brute_force(parse_scenario(spec))


def test_the_first_and_last_stages_hold_the_first_and_last_layers_in_the_floor():
    """An embedding three blocks long ahead of four blocks and a head, on two stages, eight
    micro-batches: the first stage holds the embedding whatever the partition, so the bottleneck
    is four blocks' time (embedding and a block, or the four blocks), not the 3.5 an even share of
    the work gives. The floor reaches the best partition there, and stays below it."""
    block = 1e13
    layers = ([layer(flops=3 * block, name="embedding", kind="embedding")]
              + [layer(flops=block, name=f"block{i}", kind="block") for i in range(4)]
              + [layer(flops=1.0, name="head", kind="head")])
    scn = build([node(count=2, gpu="V100")], layers, 8, calibration=IDEAL)
    cost = CostModel(scn)
    candidate = cost.candidate(1, 2, 1, 1, (0,))
    (floor,) = time_floors([candidate], lambda: False)
    best, partition = brute_force(candidate)
    assert partition in ((1, 5), (2, 4))
    assert best * (1 - 1e-6) <= floor <= best * (1 + 1e-9), (floor, best)


def test_the_family_floor_with_the_ends_placed_reaches_a_send_bound_pipeline():
    """Four single-GPU nodes of three types, four light layers each sending 1 GB, eight
    micro-batches: every interior stage sends across two boundaries, the ends across one. With the
    ends placed, the floor over every order reaches the best order's time (and stays below it);
    without, it counts one boundary per stage and falls well short."""
    layers = [layer(flops=1e6, output_bytes=1e9, name=f"l{i}", kind="block") for i in range(4)]
    scn = build([node(gpu=gpu, inter=10.0) for gpu in ("V100", "T4", "A10G", "V100")], layers, 8,
                calibration=IDEAL, search={"reorder_nodes": True, "use_all_gpus": True})
    cost = CostModel(scn)
    keys = [key for key in enumerate_candidates(scn) if key[:4] == (1, 4, 1, 1)]
    best = min(brute_force(cost.candidate(*key))[0] for key in keys)
    (placed,) = order_free_floors(cost, [(1, 4, 1, 1)], lambda: False, ends=True)
    (plain,) = order_free_floors(cost, [(1, 4, 1, 1)], lambda: False)
    assert best * (1 - 1e-6) <= placed <= best * (1 + 1e-9), (placed, best)
    assert plain < 0.7 * best


@st.composite
def tail_bound(draw):
    """Two or three GPU types on nodes of one or two GPUs, a few heavy layers (an embedding and a
    head at the ends at times) whose gradients all-reduce over slow networks, with or without
    backward hiding part of it, and the latencies and fixed costs of the default model: the
    coupled floor (whole layers on the stages a bottleneck allows, their all-reduce after) is
    what sets many candidates' floors here."""
    per_node = draw(st.sampled_from([1, 2]))
    names = draw(st.permutations(["V100", "A10G", "T4", "A100-40GB"]))[:draw(st.integers(2, 3))]
    nodes = [node(count=draw(st.integers(1, 2)), gpu=name, gpus_per_node=per_node, intra=100.0,
                  inter=draw(st.sampled_from([1.0, 10.0, 100.0]))) for name in names]
    blocks = draw(st.integers(2, 6))
    kinds = ["block"] * blocks
    if draw(st.booleans()):
        kinds = ["embedding"] + kinds + ["head"]
    layers = [layer(params=draw(st.sampled_from([1e7, 1e8, 3e8])), flops=draw(st.sampled_from([1e11, 1e12, 4e12])),
                    activation_bytes=1e6, output_bytes=1e6, name=f"l{i}", kind=kind)
              for i, kind in enumerate(kinds)]
    overlap = draw(st.sampled_from([0.0, 0.5, 1.0]))
    return scenario_dict(nodes, layers, draw(st.sampled_from([2, 4, 8])), precision="fp16",
                         search={"reorder_nodes": True, "max_micro_batch_size": 2},
                         calibration={"parameters": {"dp_overlap.megatron": overlap}})


@settings(max_examples=examples(40), deadline=None)
@given(spec=tail_bound())
def test_the_coupled_floor_is_below_the_candidates_best_partition_where_all_reduces_dominate(spec):
    _assert_floors_below_brute_force(parse_scenario(spec))


def test_the_coupled_floor_makes_the_slow_network_stage_all_reduce_what_the_slow_gpus_cannot_hold():
    """Two stages of two data-parallel replicas: A100s whose all-reduce crosses a 1 Gbps network,
    then V100s six times slower (three layers fit in their memory) on a fast one; six heavy
    blocks, four micro-batches. The V100 stage takes a second block only at twice a block's time
    there, so below that bottleneck the A100s hold five blocks and all-reduce them: the best
    partition, (5, 1), pays that. The coupled floor reaches 90% of it and stays below; without it
    (the tail's parameters spread over the stages fractionally) the floor is under 40%."""
    layers = [layer(params=3e8, flops=1e12, output_bytes=1e3, name=f"b{i}", kind="block") for i in range(6)]
    # (these layers are read as one token wide, where gemm_half_dim sets their speed: the 48 the
    # premise was written under, whatever the fitted default)
    scn = build([node(count=2, gpu="A100-40GB", inter=1.0), node(count=2, gpu="V100", inter=100.0)], layers, 8,
                calibration={"parameters": {**IDEAL["parameters"], "gemm_half_dim": 48.0}}, precision="fp16")
    candidate = CostModel(scn).candidate(1, 2, 2, 1, (0, 1))
    best, partition = brute_force(candidate)
    (floor,) = time_floors([candidate], lambda: False, limit=math.inf)
    (uncoupled,) = time_floors([candidate], lambda: False)
    assert partition == (5, 1)
    assert 0.9 * best <= floor <= best * (1 + 1e-9), (floor, best)
    assert uncoupled < 0.4 * best, (uncoupled, best)


def test_a_slow_gpu_in_the_middle_of_the_pipeline_holds_a_block_in_the_floor(monkeypatch):
    """V100, a GPU thirteen times slower, V100, on three stages; a light embedding and head
    around eight blocks: the middle stage holds a block whatever the partition (the embedding and
    the head are the ends'), so the bottleneck is at least a block's time there. The floor reaches
    85% of the best partition and stays below it; with the middle stage given the cheapest layer
    it falls under 40%."""
    layers = ([layer(flops=1e9, name="embedding", kind="embedding")]
              + [layer(flops=1e13, name=f"block{i}", kind="block") for i in range(8)]
              + [layer(flops=1e9, name="head", kind="head")])
    scn = build([node(gpu="V100"), node(gpu={"base": "T4", "fp16_tflops": 10.0}), node(gpu="V100")], layers, 8,
                calibration=IDEAL, precision="fp16")
    candidate = CostModel(scn).candidate(1, 3, 1, 1, (0, 1, 2))
    best, _ = brute_force(candidate)
    (floor,) = time_floors([candidate], lambda: False)
    monkeypatch.setattr(floors_module, "_lone_layers", lambda times: np.zeros(times.shape[:2]))
    (anywhere,) = time_floors([candidate], lambda: False)
    assert 0.85 * best <= floor <= best * (1 + 1e-9), (floor, best)
    assert anywhere < 0.4 * best, (anywhere, best)
