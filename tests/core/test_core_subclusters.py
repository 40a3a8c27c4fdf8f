"""subclusters.py and objective.py: leaving nodes idle equals brute force over every part of the
cluster, never makes the best plan slower when hardware is added, reports the idle nodes, and the
objectives rank consistently."""

import itertools
import math

import numpy as np
import pytest
from core_builders import brute_force, close, examples, layer, node, node_groups, scenario_dict, scenario_dicts
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.parts import part_scenario
from amp_tui.core.costmodel.placement import Nodes, build_layout
from amp_tui.core.plans.exports import export_plan
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.search.bounds.part_bounds import (
    _core_thresholds,
    _held_tail_floor,
    _send_floors,
    _whole_core_layers_floor,
    part_bounds,
)
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import enumerate_candidates, search
from amp_tui.core.search.part_rows import part_rows
from amp_tui.core.search.subclusters import search_parts
from amp_tui.core.spec.presets import load_preset, preset_names
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy


def _canonical(scn, counts) -> tuple:
    """Parts that only swap the counts of interchangeable groups are one part."""
    return tuple(sorted((repr(g.hardware_key()), g.price_per_hour, g.count, n)
                        for g, n in zip(scn.cluster.nodes, counts) if n))


def _price(scn, counts):
    prices = [g.price_per_hour for g, n in zip(scn.cluster.nodes, counts) if n]
    return None if None in prices else sum(p * n for p, n in zip((g.price_per_hour for g in scn.cluster.nodes), counts) if n)


def _brute_force_parts(scn, objective=Objective()):
    """Objective weight x best time of every candidate on every part of the cluster, ascending, and
    per part (by _canonical) its best time."""
    values, best_of_part, seen = [], {}, set()
    for counts in itertools.product(*(range(g.count + 1) for g in scn.cluster.nodes)):
        key = _canonical(scn, counts)
        if not any(counts) or key in seen:
            continue
        seen.add(key)
        price = _price(scn, counts)
        if not objective.admits(price):
            continue
        part, _ = part_scenario(scn, counts)
        cost = CostModel(part)
        for candidate_key in enumerate_candidates(part):
            time, _ = brute_force(cost.candidate(*candidate_key))
            if time is not None:
                values.append(objective.scale(price) * time)
                best_of_part[key] = min(best_of_part.get(key, math.inf), time)
    return sorted(values), best_of_part


def _check_against_brute_force(scn, top, objective=Objective()):
    result, info = search_parts(scn, objective, top=top)
    expected, best_of_part = _brute_force_parts(scn, objective)
    got = [objective.scale(p.cost_per_hour_usd) * p.iteration_time_s for p in result.strategies]
    assert info.exact
    assert len(got) == min(top, len(expected))
    assert all(close(a, b) for a, b in zip(got, expected[:top])), (got, expected[:top])
    for p in result.strategies:
        # each strategy re-evaluates exactly on the whole cluster, idle nodes and all
        assert evaluate(scn, p.strategy).iteration_time_s == p.iteration_time_s
        counts = tuple(g.count - dict(p.strategy.idle or ()).get(i, 0) for i, g in enumerate(scn.cluster.nodes))
        assert p.strategy.num_gpus == p.to_dict()["gpus_used"] == sum(
            n * g.gpus_per_node for n, g in zip(counts, scn.cluster.nodes))
        assert p.iteration_time_s >= best_of_part[_canonical(scn, counts)] * (1 - 1e-9)
    return result


def _priced(spec, prices):
    for group, price in zip(spec["cluster"]["nodes"], prices):
        group["price_per_hour"] = price
    return spec


@settings(max_examples=examples(30), deadline=None)
@given(spec=scenario_dicts(max_layers=5, max_gpus=6), top=st.integers(1, 4))
def test_idle_search_equals_brute_force_over_every_part(spec, top):
    _check_against_brute_force(parse_scenario(spec), top)


@settings(max_examples=examples(20), deadline=None)
@given(spec=scenario_dicts(max_layers=5, max_gpus=6), top=st.integers(1, 3),
       prices=st.lists(st.sampled_from([0.5, 1.0, 3.0, 12.0]), min_size=3, max_size=3),
       kind=st.sampled_from(["time", "cost"]), budget=st.sampled_from([None, 2.0, 6.0, 40.0]))
def test_objectives_equal_brute_force(spec, top, prices, kind, budget):
    scn = parse_scenario(_priced(spec, prices))
    objective = Objective(kind, budget)
    result = _check_against_brute_force(scn, top, objective)
    for p in result.strategies:
        assert budget is None or p.cost_per_hour_usd <= budget + 1e-9
    # cost ranking never returns a strategy costing more per token than the time-optimal one
    if kind == "cost" and result.strategies:
        fastest = search_parts(scn, Objective("time", budget), top=1)[0].strategies[0]
        assert result.strategies[0].cost_per_million_tokens_usd <= fastest.cost_per_million_tokens_usd * (1 + 1e-9)


@settings(max_examples=examples(30), deadline=None)
@given(spec=scenario_dicts(max_layers=5, max_gpus=6, max_groups=2), extra=node_groups(max_gpus=3, max_groups=1))
def test_adding_a_node_group_never_makes_the_best_plan_slower(spec, extra):
    base = parse_scenario(spec)
    spec["cluster"]["nodes"] += extra
    try:
        bigger = parse_scenario(spec)
    except SpecError:           # the added GPU does not support the training precision
        assume(False)
    before = search_parts(base, top=1)[0].strategies
    after = search_parts(bigger, top=1)[0].strategies
    if before:
        assert after and after[0].iteration_time_s <= before[0].iteration_time_s * (1 + 1e-12)


def test_use_all_gpus_is_the_whole_cluster_search():
    scn = load_scenario("bench-128-gpus")
    whole = parse_scenario({**scn.to_dict(), "search": {**scn.search.to_dict(), "use_all_gpus": True}})
    result, info = search_parts(whole, top=3)
    plain = search(scn, top=3)
    assert [p.iteration_time_s for p in result.strategies] == [p.iteration_time_s for p in plain.strategies]
    assert all(not p.strategy.idle for p in result.strategies) and info.searched == 1


def test_a_best_plan_with_idle_nodes_reports_them_and_equals_the_search_without_them():
    """bench-128-gpus: the 64 A10G slow the 64 A100 down; leaving them idle is faster."""
    scn = load_scenario("bench-128-gpus")
    result, info = search_parts(scn, top=3)
    best = result.strategies[0]
    assert best.strategy.idle == ((1, 8),)
    assert best.to_dict()["idle"] == [{"group": 1, "nodes": 8}] and best.to_dict()["gpus_used"] == 64
    without, _ = part_scenario(scn, (8, 0))
    assert best.iteration_time_s == search(without, top=1).strategies[0].iteration_time_s
    assert best.iteration_time_s < search(scn, top=1).strategies[0].iteration_time_s
    assert evaluate(scn, best.strategy).iteration_time_s == best.iteration_time_s
    # only the used nodes are charged
    assert math.isclose(best.cost_per_hour_usd, 8 * 32.7726)


def _with_added(name: str, group: dict):
    data = load_preset("scenarios", name)
    cluster = data["cluster"]
    if isinstance(cluster, dict) and "preset" in cluster:
        cluster = load_preset("clusters", cluster["preset"])
    data["cluster"] = {"nodes": [*cluster["nodes"], group]}
    return parse_scenario(data)


SLOW_NODE = {"fp16": {"instance": "p3.2xlarge", "count": 1},          # one V100
             "bf16": {"gpu": "A10G", "gpus_per_node": 1, "count": 1, "intra_node_bandwidth": "100 Gbps",
                      "inter_node_bandwidth": "25 Gbps"},
             "fp8": {"gpu": "L4", "gpus_per_node": 1, "count": 1, "intra_node_bandwidth": "100 Gbps",
                     "inter_node_bandwidth": "25 Gbps"}}     # the slowest GPU with fp8


# The 1024- and 2048-GPU benchmarks take seconds each (see `amp-tui bench`); the README reports them.
@pytest.mark.parametrize("name", [n for n in preset_names("scenarios") if not n.startswith(("bench-1024", "bench-2048"))
                                  and "training" in load_preset("scenarios", n)])   # serving ones: tests/serving
def test_presets_with_a_single_slow_node_added_are_never_slower(name):
    """One GPU more breaks the divisibility of the GPU count; a slow one could drag a stage down."""
    scn = load_scenario(name)
    bigger = _with_added(name, SLOW_NODE[scn.training.precision])
    before = search_parts(scn, top=1)[0].strategies[0]
    after = search_parts(bigger, top=1)[0].strategies[0]
    assert after.iteration_time_s <= before.iteration_time_s


@pytest.mark.parametrize("name, group", [
    ("mixed-a100-a10g-llama2-13b", {"instance": "p3.8xlarge", "count": 1}),
    ("dgx-a100-gpt3-13b", {"instance": "g4dn.12xlarge", "count": 1}),
])
def test_the_issues_examples_are_no_longer_slower(name, group):
    scn = load_scenario(name)
    scn = parse_scenario({**scn.to_dict(), "training": {**scn.to_dict()["training"], "precision": "fp16"}})
    data = scn.to_dict()
    data["cluster"]["nodes"].append(group)
    bigger = parse_scenario(data)
    assert (search_parts(bigger, top=1)[0].strategies[0].iteration_time_s
            <= search_parts(scn, top=1)[0].strategies[0].iteration_time_s)


def test_bounds_are_below_every_part_best():
    scn = load_scenario("bench-128-gpus")
    rows = np.array([[8, 8], [8, 0], [4, 4], [1, 7], [8, 3], [2, 0]])
    bounds = part_bounds(scn, rows)
    for counts, bound in zip(rows.tolist(), bounds):
        part, _ = part_scenario(scn, counts)
        found = search(part, top=1).strategies
        assert found and bound <= found[0].iteration_time_s


@pytest.mark.parametrize("name", ["paper-het-cluster", "bench-128-gpus"])
def test_a_limited_bound_is_the_full_one_below_the_limit_and_reaches_it_above(name):
    """With a limit, the bounding skips what cannot fall below it (e.g. every dp of a tensor-
    parallel degree and micro-batch size whose quick bound reaches it): the bound stays a lower
    bound (at most the full one), equals the full one where that is below the limit, and reaches
    the limit elsewhere."""
    scn = load_scenario(name)
    rows, _ = part_rows(scn)
    cost = CostModel(scn)
    full = part_bounds(scn, rows, cost)
    finite = np.sort(full[np.isfinite(full)])
    for limit in (finite[0], finite[len(finite) // 3], finite[-1] * 1.01, np.resize(finite, len(rows))):
        limited = part_bounds(scn, rows, cost, limit=limit)
        below = full < limit
        assert (limited <= full).all()
        assert (limited[below] == full[below]).all()
        assert (limited[~below] >= np.broadcast_to(limit, full.shape)[~below]).all()


@pytest.mark.slow          # brute force over every part of the cluster, 40 cases; CI runs it
@settings(max_examples=examples(40), deadline=None)
@given(spec=scenario_dicts(max_layers=8, max_gpus=6), framework=st.sampled_from(["megatron", "deepspeed"]))
def test_every_part_bound_is_below_that_parts_brute_force_best(spec, framework):
    """Each bound on its own, not only the ranking it leads to: a bound above its part's best
    would go unnoticed in the searches whenever that part cannot enter the top N anyway. (Under
    DeepSpeed nothing hides the gradient all-reduce, and the bound counts it.)"""
    spec["training"]["framework"] = framework
    scn = parse_scenario(spec)
    rows = np.array([counts for counts in itertools.product(*(range(g.count + 1) for g in scn.cluster.nodes))
                     if any(counts)])
    _, best_of_part = _brute_force_parts(scn)
    for counts, bound in zip(rows.tolist(), part_bounds(scn, rows)):
        best = best_of_part.get(_canonical(scn, counts), math.inf)
        assert bound <= best * (1 + 1e-9), (counts, bound, best)


@settings(max_examples=examples(60), deadline=None)
@given(times=st.lists(st.floats(0.1, 4.0), min_size=1, max_size=3),
       stages=st.lists(st.integers(0, 3), min_size=3, max_size=3), layers=st.integers(1, 9))
def test_the_whole_core_layers_floor_is_the_least_bottleneck_of_identical_layers(times, stages, layers):
    """With identical core layers, stage counts per group as given and the groups in ascending
    time, the floor is exactly the least bottleneck of any whole-layer split (brute force over
    every split); a fractional count of layers would put it lower (e.g. 2 fast stages and one 2.5
    times slower: 7 layers need 3, not 7 / 2.4)."""
    stages = stages[:len(times)]
    assume(sum(stages) > 0)
    v = np.array(times)[:, None] * np.ones((1, layers))
    order, values, held = _core_thresholds(v, np.ones(layers, dtype=bool))
    new = np.array([stages[g] for g in order])[None, :]
    paces = [t for t, n in zip(times, stages) for _ in range(n)]
    splits = (np.diff((-1, *bars, layers + len(paces) - 1)) - 1         # stars and bars: every split
              for bars in itertools.combinations(range(layers + len(paces) - 1), len(paces) - 1))
    best = min(max(k * t for k, t in zip(split, paces)) for split in splits)
    assert close(float(_whole_core_layers_floor(values, held, new)[0]), best)


def test_the_whole_core_layers_floor_counts_whole_layers():
    order, values, held = _core_thresholds(np.array([[2.5] * 7, [1.0] * 7]), np.ones(7, dtype=bool))
    assert order.tolist() == [1, 0]
    assert close(float(_whole_core_layers_floor(values, held, np.array([[2, 1]]))[0]), 3.0)


@settings(max_examples=examples(60), deadline=None)
@given(room=st.lists(st.integers(0, 4), min_size=1, max_size=3), stages=st.lists(st.integers(0, 2), min_size=3,
                                                                                 max_size=3),
       coef=st.lists(st.floats(0.1, 3.0), min_size=1, max_size=3), count=st.integers(1, 6))
def test_the_held_tail_floor_is_the_least_tail_of_a_whole_layer_split(room, stages, coef, count):
    """One group per class, the compute classes and the tail's in the same order: the floor is
    the least max e_s l_s of any split of `count` layers with l_s at most its stage's room (brute
    force), or inf when the rooms cannot hold them."""
    n = min(len(room), len(coef))
    room, stages, coef = sorted(room[:n], reverse=True), stages[:n], sorted(coef[:n])
    assume(sum(stages) > 0)
    gpus = np.array([stages])          # one GPU per stage
    pp = np.array([sum(stages)])
    (floor,) = _held_tail_floor(np.array([room]), np.array([stages]), np.array(coef), gpus, 1, pp, 2.0, count)
    caps = [r for r, k in zip(room, stages) for _ in range(k)]
    tails = [2.0 * c for c, k in zip(coef, stages) for _ in range(k)]
    splits = [split for split in itertools.product(*(range(c + 1) for c in caps)) if sum(split) == count]
    best = min((max(l * t for l, t in zip(split, tails)) for split in splits), default=math.inf)
    assert floor == best if best == math.inf else close(float(floor), best, rel=1e-8)


@settings(max_examples=examples(60), deadline=None)
@given(groups=node_groups(max_gpus=12), data=st.data())
def test_the_send_floor_is_below_every_layouts_cheapest_boundary(groups, data):
    """Per stage size tp x dp, the send floor of a part using every group lies below the cheapest
    boundary's send (bytes over its slowest flow, plus its latency each way) of every layout in
    every order, equals it on one group of one-GPU nodes (every send crosses the network, one flow
    per node), and stays at the fastest link's where a boundary can stay inside a node."""
    scn = parse_scenario(scenario_dict(groups, [layer(params=1.0, flops=1.0)] * 2, 1))
    cluster, params = scn.cluster, scn.params
    whole = Nodes(cluster, tuple(range(len(cluster.nodes))), params)
    gpn = np.array([g.gpus_per_node for g in cluster.nodes])
    inter = np.array([float(whole.inter[whole.node_group == g].max()) for g in range(len(gpn))])
    inter_flow = np.array([float(whole.inter_flow[whole.node_group == g].max()) for g in range(len(gpn))])
    floors = _send_floors(whole, np.ones((1, len(gpn)), dtype=bool), gpn, inter, inter_flow)
    unit = data.draw(st.sampled_from([0.0, 1e3, 1e6, 1e9]))
    order = tuple(data.draw(st.permutations(range(len(gpn)))))
    for per_stage in range(1, cluster.num_gpus // 2 + 1):
        tp = data.draw(st.sampled_from([d for d in (1, 2, 4) if per_stage % d == 0]))
        (floor,) = floors(unit, per_stage, np.array([0]))
        for pp in range(2, cluster.num_gpus // per_stage + 1):
            layout = build_layout(cluster, tp, pp, per_stage // tp, order, Nodes(cluster, order, params))
            sends = unit * layout.boundary_seconds_per_byte + 2.0 * layout.boundary_latency
            assert floor <= sends.min() * (1 + 1e-12), (per_stage, pp, floor, sends)
            if len(gpn) == 1 and gpn[0] == 1:
                assert close(floor, sends.min())
        if per_stage < gpn.max():
            assert close(floor, unit / max(whole.intra.max(), whole.inter.max()) + 2.0 * min(
                whole.intra_latency.min(), whole.inter_latency.min()))


def test_a_part_bound_counts_an_all_reduce_nothing_hides():
    """Two single-GPU nodes on a slow network and one heavy layer: data parallelism is forced and
    DeepSpeed's all-reduce, which no backward pass hides, is nearly all of the iteration; the
    bound counts it (and stays below the best)."""
    spec = {"name": "all-reduce", "cluster": {"nodes": [node(count=2, gpu="V100", inter=1.0)]},
            "model": {"name": "one layer", "sequence_length": 1,
                      "layers": [layer(params=2e8, flops=1e9, output_bytes=1e3, name="l0", width=64.0, tokens=1.0)]},
            "training": {"global_batch_size": 2, "precision": "fp16", "framework": "deepspeed", "zero_stage": 0}}
    scn = parse_scenario(spec)
    best = search(scn, top=1).strategies[0]
    assert best.dp_allreduce_s > 0.9 * best.iteration_time_s
    (bound,) = part_bounds(scn, np.array([[2]]))
    assert 0.9 * best.iteration_time_s <= bound <= best.iteration_time_s


def test_a_part_bound_counts_the_state_each_replica_holds():
    """512 H100 of the 1,000-layer benchmark: with tp 1 and dp 512 the compute bound is 9.9 s, but
    no stage of 63 B parameters' state fits there; every replica holds a copy of the weights and
    gradients, so dp is at most 128 and the bound rises to within 10% of the part's best (14.3 s)."""
    scn = load_scenario("bench-1024-gpus-1000-layers")
    counts = (64, 0, 0)
    part, _ = part_scenario(scn, counts)
    best = search(part, top=1).strategies[0].iteration_time_s
    (bound,) = part_bounds(scn, np.array([counts]))
    assert 0.9 * best <= bound <= best


def test_evaluate_refuses_impossible_idle_nodes():
    scn = load_scenario("bench-128-gpus")
    with pytest.raises(SpecError, match=r"strategy.idle.*node group 1 has 8 nodes"):
        evaluate(scn, Strategy(1, 1, 64, 8, idle=((1, 9),)))
    with pytest.raises(SpecError, match=r"strategy.idle.*no such node group"):
        evaluate(scn, Strategy(1, 1, 64, 8, idle=((2, 1),)))
    with pytest.raises(SpecError, match=r"tp\*pp\*dp.*64 of 128, the rest idle"):
        evaluate(scn, Strategy(1, 1, 128, 1, idle=((1, 8),)))


def test_objective_needs_prices_and_a_positive_budget():
    scn = load_scenario("dgx-a100-gpt3-13b")     # DGX nodes have no price
    with pytest.raises(SpecError, match=r"cluster.nodes\[0\].price_per_hour"):
        search_parts(scn, Objective("cost"))
    with pytest.raises(SpecError, match="budget"):
        Objective("time", 0.0)
    with pytest.raises(SpecError, match="objective"):
        Objective("speed")


def test_a_budget_below_every_node_leaves_nothing():
    scn = load_scenario("paper-homogeneous")
    result, _ = search_parts(scn, Objective("time", 1.0))
    assert result.strategies == ()


def test_exports_cover_only_the_used_nodes():
    scn = load_scenario("bench-128-gpus")
    best = search_parts(scn, top=1)[0].strategies[0]
    plan = Plan(scn, best.strategy, best.to_dict(), "test", "now")
    export = export_plan(plan, "rankmap")
    csv = export.files["rankmap.csv"].splitlines()
    assert len(csv) == 1 + 64 and "A10G" not in export.files["rankmap.csv"]
    assert "leaves 8 x g5.48xlarge (group 1) idle" in export.notes[0]
    hostfile = export_plan(plan, "deepspeed").files
    assert not any("node-8" in text for text in hostfile.values())


def test_a_model_without_flops_still_finds_its_strategies():
    """Layers with parameters but no compute: the bound falls back to 0 and the parts are searched."""
    scn = parse_scenario(scenario_dict([node(count=2, gpu="V100", gpus_per_node=2)],
                                       [layer(params=1e6, output_bytes=1e3)] * 4, 8))
    result, info = search_parts(scn, top=3)
    assert result.strategies and info.exact
    assert result.strategies[0].iteration_time_s <= search(scn, top=1).strategies[0].iteration_time_s


def test_progress_rises_from_the_whole_clusters_search_to_one():
    """The bar moves during the whole cluster's search (its first 40%), then with the parts, never
    back; before, it sat at 0 through the whole cluster's search and the parts' bounds."""
    seen: list[float] = []
    search_parts(load_scenario("paper-het-cluster"), progress=seen.append)
    assert seen[0] == 0.0 and seen[-1] == 1.0
    assert all(a <= b for a, b in zip(seen, seen[1:]))
    assert any(0.0 < f < 0.4 for f in seen) and any(0.4 < f < 1.0 for f in seen)
