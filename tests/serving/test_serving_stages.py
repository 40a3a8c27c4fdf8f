"""The shared-path (stage) family: placements by hand, their validity, and the search's pick against the
older families."""

import pytest
from test_serving_search import scenario

from amp_tui.serving import pipelines, stages
from amp_tui.serving.baselines import all_baselines
from amp_tui.serving.flow.solver import solve
from amp_tui.serving.network import build_network, max_flow
from amp_tui.serving.routes import decompose
from amp_tui.serving.served import evaluate, machine_profiles, search


def test_a_stage_deals_strong_machines_alone_and_weak_ones_in_chains():
    # 2 fast machines (hold up to 3 layers), 4 slow ones (up to 2); 6 layers in 2 stages of 3
    sc = scenario(2, 4, layers=6)
    net = build_network(sc)
    caps = {m: net.max_layers(m) for m in range(net.num_machines)}
    fast, slow = [0, 1], [2, 3, 4, 5]
    assert stages.units_for(fast, caps, 3) == [[0], [1]]
    assert stages.units_for(slow, caps, 3) == [[2, 3], [4, 5]]       # 2 layers at most: chains of 2
    assert stages.units_for(slow[:3], caps, 3) == [[2, 3]]           # the odd one out stays idle
    dealt = stages.deal([fast, slow], caps, net, 6, 2)
    # fast units carry 1300 tokens/s at 3 layers, slow chains 1000 (a piece of 2): one of each per stage
    assert [w for w, _ in dealt] == [3, 3]
    assert sorted(map(sorted, (map(tuple, units) for _, units in dealt))) == [[(0,), (2, 3)], [(1,), (4, 5)]]
    placement = stages.placement_of(dealt, net.num_machines)
    first, count = placement.arrays()
    assert list(count) == [3, 3, 2, 1, 2, 1]
    # machine 0 holds layers 0-2; the chain beside it holds 0-1 and 2; the second stage 3-5
    assert (first[0], first[2], first[3]) == (0, 0, 2) and (first[1], first[4], first[5]) == (3, 3, 5)


def test_a_stage_with_no_unit_is_no_placement():
    sc = scenario(1, 0, layers=6)
    net = build_network(sc)
    caps = {0: net.max_layers(0)}
    assert stages.deal([[0]], caps, net, 6, 2) is None        # one machine cannot fill two stages


@pytest.mark.parametrize("fast,slow,layers", [(2, 4, 6), (3, 3, 5), (1, 6, 4), (4, 6, 8)])
def test_every_candidate_is_valid_and_every_route_covers_the_model(fast, slow, layers):
    sc = scenario(fast, slow, layers=layers)
    net = build_network(sc)
    profiles = machine_profiles(sc, net)
    found = stages.candidates(net, profiles, sc.serving, keep=100)
    assert found
    for placement in found:
        first, count = placement.arrays()
        for m in range(net.num_machines):
            if count[m]:
                assert first[m] + count[m] <= layers
                assert count[m] <= net.max_layers(m)
                assert profiles[m].kv_tokens(int(count[m])) > 0           # its weights leave KV room
        flow = max_flow(net, first, count)
        assert flow.value > 0
        routes = decompose(flow, placement)
        assert routes
        for route in routes:
            covered = [layer for a, b in route.layers for layer in range(a, b + 1)]
            assert covered == list(range(layers))                        # each layer once, in order
        served = evaluate(sc, net, placement, profiles, window=False)
        assert served.prediction.decode_tokens_per_s > 0


def test_the_search_does_at_least_as_well_as_the_older_families():
    # many weak machines beside a few strong ones: the older families' best, predicted, is the bar
    sc = scenario(2, 8, layers=6)
    net = build_network(sc)
    profiles = machine_profiles(sc, net)
    flow_placement = solve(net, time_limit_s=2).placement
    older = [p for _, p in pipelines.candidates(net, profiles, sc.serving)] + [flow_placement] + \
        [p for p, _ in all_baselines(net, [int(g) for g in net.machine_group]).values()]
    bar = max(evaluate(sc, net, p, profiles, window=False).prediction.decode_tokens_per_s for p in older)
    served = search(sc, net, time_limit_s=5, starts=[flow_placement]).served
    assert served.prediction.decode_tokens_per_s >= bar - 1e-6
    shared = max(evaluate(sc, net, p, profiles, window=False).prediction.decode_tokens_per_s
                 for p in stages.candidates(net, profiles, sc.serving))
    assert served.prediction.decode_tokens_per_s >= shared - 1e-6


def test_candidates_stop_when_told():
    sc = scenario(4, 6, layers=8)
    net = build_network(sc)
    profiles = machine_profiles(sc, net)
    assert stages.candidates(net, profiles, sc.serving, stop=lambda: True) == []
    polls = []
    full = stages.candidates(net, profiles, sc.serving, keep=100, stop=lambda: polls.append(1) and False)
    half = len(polls) // 2
    polls.clear()
    some = stages.candidates(net, profiles, sc.serving, keep=100, stop=lambda: polls.append(1) or len(polls) > half)
    assert len(polls) == half + 1                                   # it stopped at the first poll told to
    assert len(some) < len(full)
    assert {(p.first, p.count) for p in some} <= {(p.first, p.count) for p in full}
