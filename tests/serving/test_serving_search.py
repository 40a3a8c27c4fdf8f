"""The search for what is served: against brute force on small clusters, and monotone in machines."""

import itertools

import pytest

from amp_tui.serving.flow.solver import solve
from amp_tui.serving.network import build_network
from amp_tui.serving.placement import Placement
from amp_tui.serving.served import evaluate, search
from amp_tui.serving.spec import parse_serving_scenario

FAST = {"decode_ms_per_layer": {1: 1.0, 64: 2.0}, "prompt_ms_per_layer": {1000: 5.0},
        "kv_tokens_per_layer": {1: 40_000, 2: 15_000, 3: 6_000}}
SLOW = {"decode_ms_per_layer": {1: 4.0, 64: 8.0}, "prompt_ms_per_layer": {1000: 30.0},
        "kv_tokens_per_layer": {1: 20_000, 2: 6_000}}


def scenario(fast: int, slow: int, layers: int = 4):
    nodes = []
    for count, profile, table in ((fast, FAST, {1: 4000, 2: 2000, 3: 1300}), (slow, SLOW, {1: 1000, 2: 450})):
        if count:
            nodes.append({"count": count, "gpu": "T4", "gpus_per_node": 1, "intra_node_bandwidth": "16 GB/s",
                          "inter_node_bandwidth": "1 GB/s", "serving_profile": profile,
                          "serving_throughput": table})
    model = {"name": "toy", "family": "llama", "hidden_size": 512, "num_layers": layers, "num_heads": 8,
             "sequence_length": 128, "vocab_size": 1000}
    return parse_serving_scenario({"name": "toy", "cluster": {"name": "t", "nodes": nodes, "hop_latency": "1 ms"},
                                   "model": model, "serving": {"prompt_tokens": 200, "output_tokens": 100}})


def _search(sc):
    """As run_serve does: the pipeline candidates race the max-flow solver's placement."""
    net = build_network(sc)
    return search(sc, net, time_limit_s=5, starts=[solve(net, time_limit_s=5).placement])[0]


def _brute_force(sc, net) -> float:
    options = [[(0, 0)] + [(a, k) for k in range(1, net.max_layers(m) + 1) for a in range(net.num_layers - k + 1)]
               for m in range(net.num_machines)]
    best = 0.0
    for choice in itertools.product(*options):
        placement = Placement.of([a for a, _ in choice], [k for _, k in choice])
        best = max(best, evaluate(sc, net, placement, window=False).prediction.decode_tokens_per_s)
    return best


@pytest.mark.parametrize("fast,slow", [(1, 2), (2, 1), (3, 0)])
def test_search_comes_close_to_brute_force_on_small_clusters(fast, slow):
    sc = scenario(fast, slow)
    net = build_network(sc)
    best = _brute_force(sc, net)
    served = _search(sc)
    assert best > 0
    assert served.prediction.decode_tokens_per_s <= best + 1e-6        # brute force saw every placement
    assert served.prediction.decode_tokens_per_s >= 0.9 * best


@pytest.mark.parametrize("fast,slow", [(1, 1), (2, 1), (2, 2), (3, 2)])
def test_adding_a_machine_never_lowers_the_predicted_throughput(fast, slow):
    base = _search(scenario(fast, slow))
    for more in (scenario(fast + 1, slow), scenario(fast, slow + 1)):
        served = _search(more)
        assert served.prediction.decode_tokens_per_s >= base.prediction.decode_tokens_per_s - 1e-6


def test_the_pick_is_bounded_by_work_and_does_not_depend_on_the_clock(monkeypatch):
    """The same input gives the same placement however fast the clock runs, until the safety net: a clock far
    past the limit still gets an answer (the first start, the max-flow placement), and says why."""
    import amp_tui.serving.served as served_module

    sc = scenario(2, 2)
    net = build_network(sc)
    start = solve(net, time_limit_s=600).placement
    calm = search(sc, net, time_limit_s=600, starts=[start])
    ticks = iter(range(0, 10 ** 9, 5))                     # a clock 5 s further on at every look: a slow machine
    monkeypatch.setattr(served_module.time, "perf_counter", lambda: float(next(ticks)))
    busy = search(sc, net, time_limit_s=10 ** 8, starts=[start])
    assert busy.served.placement == calm.served.placement and busy.evaluations == calm.evaluations
    assert calm.stopped_by == busy.stopped_by == "converged"
    cut = search(sc, net, time_limit_s=1, starts=[start])
    assert cut.stopped_by == "time limit" and cut.served.placement == start and cut.evaluations == 1
