"""A ratio carried to a GPU nobody measured carries the GPU's part of the measurement: AMP's 2020
times hold the host's time to issue each layer's kernels (the 2020 stack added host and GPU), and
the layer it is carried to pays the host's time again on its own (host_times). Carried whole, an
A10G in place of paper-het-cluster's T4 priced a 4-block stage at 77.6 ms against the T4's measured
71.3 ms, slower than a GPU with half its tensor rate."""

from __future__ import annotations

import numpy as np

from amp_tui.core.costmodel.time_sources import gpu_part
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_preset, parse_scenario
from amp_tui.core.spec.strategy import Strategy


def _cluster(gpu: str | None):
    data = load_preset("scenarios", "paper-het-cluster")
    node = {"instance": "g4dn.12xlarge", "count": 1, **({"gpu": gpu} if gpu else {})}
    data["cluster"] = {"nodes": [{"instance": "p3.8xlarge", "count": 3}, node]}
    return parse_scenario(data)


def test_gpu_part_by_hand():
    # host 3 ms, GPU 5 ms: added (overlap 0) they measure 8 ms; hidden (overlap 1) 5 ms; host-bound
    # with overlap 1 (measured 3 ms, the host's): the measurement is the GPU's upper bound
    seconds, host = np.array([8e-3, 5e-3, 3e-3]), np.array([3e-3, 3e-3, 3e-3])
    assert np.allclose(gpu_part(seconds[:1], host[:1], 0.0), [5e-3])
    assert np.allclose(gpu_part(seconds[1:], host[1:], 1.0), [5e-3, 3e-3])
    # half hidden: 5 + max(3 - 2.5, 0) = 5.5 ms measured gives back 5 ms
    assert np.allclose(gpu_part(np.array([5.5e-3]), np.array([3e-3]), 0.5), [5e-3])
    assert np.allclose(gpu_part(np.array([1e-3]), np.array([3e-3]), 0.0), [1e-4])    # floor: a tenth


def test_an_a10g_in_place_of_the_t4_is_faster_than_the_t4():
    strategy = Strategy(1, 8, 2, 1, partition=(4, 4, 4, 4, 4, 4, 3, 3), placement=(1, 0))
    t4 = evaluate(_cluster(None), strategy).stages[1]
    a10g = evaluate(_cluster("A10G"), strategy).stages[1]
    assert t4.gpu == "T4" and a10g.gpu == "A10G" and a10g.host_s > 0 and t4.host_s == 0
    assert "carried" in a10g.time_source
    assert a10g.stage_time_s < 0.8 * t4.stage_time_s
