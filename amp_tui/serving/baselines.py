"""The placements Helix compares against, as amp-tui builds them.

- Petals-like: machines join one by one; each takes as many layers as it can hold, on the range
  whose summed capacity so far is least.
- Swarm-like: the model in equal stages; every machine serves one stage, stages balanced by summed
  capacity (strongest machine to the weakest stage). The stage count that flows most is kept.
- Separate pipelines: the machines of each GPU type form one pipeline of their own, the layers
  spread evenly over them; a type too small to hold the model stays idle.
"""

from __future__ import annotations

import numpy as np

from amp_tui.serving.network import Network, coverage, max_flow
from amp_tui.serving.placement import Placement


def petals(net: Network) -> Placement:
    L = net.num_layers
    first = np.zeros(net.num_machines, dtype=np.int64)
    count = np.zeros(net.num_machines, dtype=np.int64)
    cov = np.zeros(L)
    for m in range(net.num_machines):
        k = min(net.max_layers(m), L)
        if k <= 0:
            continue
        windows = np.convolve(cov, np.ones(k), mode="valid")   # summed capacity of each k-layer range
        start = int(np.argmin(windows))
        first[m], count[m] = start, k
        cov[start:start + k] += net.capacity(m, k)
    return Placement.of(first, count)


def _stage_bounds(num_layers: int, stages: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, num_layers, stages + 1).round().astype(int)
    return list(zip(edges[:-1], edges[1:]))


def swarm(net: Network) -> Placement:
    L, n = net.num_layers, net.num_machines
    best, best_value = Placement.of([0] * n, [0] * n), 0.0
    for stages in range(1, min(n, L) + 1):
        bounds = _stage_bounds(L, stages)
        longest = max(b - a for a, b in bounds)
        usable = [m for m in range(n) if net.max_layers(m) >= longest]
        if len(usable) < stages:
            continue
        first = np.zeros(n, dtype=np.int64)
        count = np.zeros(n, dtype=np.int64)
        total = np.zeros(stages)
        for m in sorted(usable, key=lambda m: -net.capacity(m, longest)):
            s = int(np.argmin(total))
            first[m], count[m] = bounds[s][0], bounds[s][1] - bounds[s][0]
            total[s] += net.capacity(m, int(count[m]))
        placement = Placement.of(first, count)
        value = float(coverage(net, first, count).min())
        if value > best_value:
            best, best_value = placement, value
    return best


def separate_pipelines(net: Network, gpu_type: list) -> Placement:
    """`gpu_type[m]`: a key naming machine m's type (machines of equal keys share one pipeline)."""
    L, n = net.num_layers, net.num_machines
    first = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    for key in dict.fromkeys(gpu_type):
        members = [m for m in range(n) if gpu_type[m] == key]
        bounds = _stage_bounds(L, min(len(members), L))
        if all(net.max_layers(m) >= b - a for m, (a, b) in zip(members, bounds)):
            for m, (a, b) in zip(members, bounds):
                first[m], count[m] = a, b - a
    return Placement.of(first, count)


def all_baselines(net: Network, gpu_type: list) -> dict[str, tuple[Placement, float]]:
    out = {}
    for name, placement in (("petals", petals(net)), ("swarm", swarm(net)),
                            ("separate_pipelines", separate_pipelines(net, gpu_type))):
        out[name] = (placement, max_flow(net, *placement.arrays()).value)
    return out
