"""The placement search against brute force on small clusters, its bound, and monotonicity."""

import itertools

import numpy as np
import pytest
from serving_builders import scenario

from amp_tui.serving.network import build_network, max_flow
from amp_tui.serving.flow.solver import solve, upper_bound


def _brute_force(net) -> float:
    """The best min-coverage over every placement (machines of a group taken as a multiset);
    equal to the best max flow when links never bind."""
    L = net.num_layers
    per_group = []
    for g in np.unique(net.machine_group):
        n = int((net.machine_group == g).sum())
        table = net.tables[g]
        options = [np.zeros(L)]
        for k in range(1, len(table)):
            for s in range(L - k + 1):
                v = np.zeros(L)
                v[s:s + k] = table[k]
                options.append(v)
        options = np.array(options)
        combos = np.array([options[list(c)].sum(axis=0)
                           for c in itertools.combinations_with_replacement(range(len(options)), n)])
        per_group.append(combos)
    head = per_group[0]
    for combos in per_group[1:-1]:
        head = np.unique((head[:, None, :] + combos[None, :, :]).reshape(-1, L), axis=0)
    if len(per_group) == 1:
        return float(head.min(axis=1).max())
    last = per_group[-1]
    return max(float((row + last).min(axis=1).max()) for row in head)


CASES = [
    ([(2, {1: 90.0, 2: 40.0, 3: 25.0, 4: 16.0}, None), (2, {1: 50.0, 2: 30.0, 3: 18.0}, None)], 12),
    ([(3, {1: 60.0, 2: 31.0, 3: 20.0}, None), (3, {1: 20.0, 2: 15.0}, None)], 8),
    ([(1, {k: 120.0 / k for k in range(1, 7)}, None), (3, {1: 35.0, 2: 17.0, 3: 12.0}, None)], 10),
    ([(2, {1: 100.0, 2: 45.0, 3: 33.0, 4: 20.0}, None), (2, {1: 70.0, 2: 38.0}, None),
      (2, {1: 30.0, 2: 29.0, 3: 10.0}, None)], 6),
    ([(3, {1: 50.0, 2: 26.0}, None), (3, {1: 40.0, 2: 18.0}, None)], 12),
]


@pytest.mark.parametrize("groups, layers", CASES)
def test_solver_matches_brute_force(groups, layers):
    net = build_network(scenario(groups, layers))
    assert net.links_never_bind
    best = _brute_force(net)
    solution = solve(net, time_limit_s=5)
    assert solution.upper_bound >= best - 1e-6, "the bound must hold for every placement"
    assert max_flow(net, *solution.placement.arrays()).value == pytest.approx(solution.throughput, rel=1e-6)
    assert solution.throughput == pytest.approx(best, rel=1e-4)


@pytest.mark.parametrize("groups, layers", CASES)
def test_adding_a_machine_never_lowers_the_best(groups, layers):
    before = solve(build_network(scenario(groups, layers)), time_limit_s=5).throughput
    count, table, region = groups[-1]
    after = solve(build_network(scenario([*groups[:-1], (count + 1, table, region)], layers)), time_limit_s=5)
    assert after.throughput >= before - 1e-6


@pytest.mark.parametrize("name", ["helix-single24-llama2-70b",
                                  pytest.param("helix-hetero42-llama2-70b", marks=pytest.mark.slow)])  # (CI runs it)
def test_adding_a_machine_to_a_helix_cluster_never_lowers_the_flow(name):
    from amp_tui.serving.spec import load_serving_scenario, with_group_count

    sc = load_serving_scenario(name)
    before = solve(build_network(sc), time_limit_s=600).throughput     # bounded by its steps, not the clock
    for group in range(len(sc.groups)):
        grown = with_group_count(sc, group, sc.groups[group].count + 1)
        assert solve(build_network(grown), time_limit_s=600).throughput >= before - 1e-6, sc.groups[group].label


def test_simple_bound_is_not_below_the_configuration_bound_answer():
    net = build_network(scenario(*CASES[0]))
    assert upper_bound(net) >= solve(net).upper_bound - 1e-9


def test_solver_matches_brute_force_when_slow_links_bind():
    # Two regions joined by 20 kB/s: 19.5 tokens/s per pair of machines (1024 bytes per token), and
    # neither region holds the model alone, so requests must cross and the links bind.
    groups = [(2, {1: 60.0, 2: 35.0}, "a"), (1, {1: 50.0, 2: 30.0, 3: 22.0}, "b")]
    layers = 6
    net = build_network(scenario(groups, layers, links=[{"between": ["a", "b"], "bandwidth": "20 kB/s"}],
                                 coordinator={"region": "a"}))
    assert not net.links_never_bind
    per_machine = [[(0, 0)] + [(s, k) for k in range(1, net.max_layers(m) + 1) for s in range(layers - k + 1)]
                   for m in range(net.num_machines)]
    best = 0.0
    for combo in itertools.product(*per_machine):
        first, count = zip(*combo)
        best = max(best, max_flow(net, first, count).value)
    solution = solve(net, time_limit_s=5)
    assert solution.upper_bound >= best - 1e-6
    assert solution.throughput == pytest.approx(best, rel=1e-4)


def test_helix_clusters_are_solved_within_five_percent_of_the_bound():
    from amp_tui.serving.spec import load_serving_scenario

    for name in ("helix-single24-llama2-70b", "helix-geo3x24-llama2-70b", "helix-hetero42-llama2-70b"):
        solution = solve(build_network(load_serving_scenario(name)), time_limit_s=600)     # bounded by its steps
        assert solution.gap <= 0.05, name
