"""Placements of shared paths (Helix-like): stages of moderate depth, requests routed over many paths.

The model's layers are cut into D consecutive stages of nearly equal width w (D from 1 up). Each
stage is served by several *units* side by side, and the max-flow router sends a request from any
unit of a stage to any unit of the next, so the paths share machines:

- a machine that can hold the stage's w layers is a unit of its own;
- weaker machines of one group form a chain: k machines holding w / k layers each (k the fewest
  that fit), so a request crosses k of them in that stage (paths differ in depth, as in Helix's
  placements, where a T4 holds 2-4 layers beside an A100 holding 10).

A machine may hold at most cap(K) layers, the most at which its profile keeps K tokens of context
per layer (as in pipelines.py): the KV-room threshold K trades room (requests in flight) for depth.
Units are dealt to the stages strongest first, each to the stage of least flow so far (the units'
flows: the throughput tables, net.capacity, of their weakest piece), so the flow through each
stage is balanced; a group's machines too few for a whole chain stay idle.

Every (D, K) is scored by a screening estimate like pipelines.py's: requests held over the unloaded
round trip, the requests held capped, when the scenario names a benchmark window, at what the run
can admit by the window's end (ramp_requests). The best few go to the serving model (served.py's
race). A cluster of several regions also gets each region's own stages (no request crosses a slow
link), beside the stages over the whole cluster.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from amp_tui.serving.model.compute import FRAGMENTATION
from amp_tui.serving.model.kv import reserve_tokens
from amp_tui.serving.network import Network
from amp_tui.serving.pipelines import layer_cost_s, layer_cap
from amp_tui.serving.placement import Placement

MAX_STAGES = 24
MAX_THRESHOLDS = 16     # KV-room thresholds tried, at most


def _widths(num_layers: int, stages: int) -> list[int]:
    base, extra = divmod(num_layers, stages)
    return [base + (1 if s < extra else 0) for s in range(stages)]


def _pieces(width: int, k: int) -> list[int]:
    return _widths(width, k)


def units_for(machines: list[int], caps: dict[int, int], width: int) -> list[list[int]]:
    """One group's machines as units for a stage of `width` layers, in the given order: k machines each
    (k the fewest whose caps cover the width); those too few for a whole unit are left out."""
    if not machines:
        return []
    cap = min(caps[m] for m in machines)
    if cap <= 0:
        return []
    k = math.ceil(width / cap)
    return [machines[i:i + k] for i in range(0, len(machines) - k + 1, k)]


def deal(groups: list[list[int]], caps: dict[int, int], net: Network, num_layers: int, stages: int):
    """Stages [(width, [unit, ...])], units dealt strongest first to the stage of least flow; None if a
    stage gets no unit."""
    widths = _widths(num_layers, stages)
    wide = max(widths)
    units = []
    for machines in groups:
        for unit in units_for(machines, caps, wide):
            piece = _pieces(wide, len(unit))[0]
            units.append((min(net.capacity(m, piece) for m in unit), unit))
    units.sort(key=lambda fu: (-fu[0], fu[1]))
    flow = [0.0] * stages
    dealt: list[list[list[int]]] = [[] for _ in range(stages)]
    for f, unit in units:
        s = min(range(stages), key=lambda s: (flow[s], s))
        dealt[s].append(unit)
        flow[s] += f
    if any(not d for d in dealt):
        return None
    return list(zip(widths, dealt))


def placement_of(stages, n: int) -> Placement:
    """Stage s starts where stage s - 1 ends; a chain's machines hold its pieces one after another."""
    first = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    position = 0
    for width, units in stages:
        for unit in units:
            at = position
            for m, piece in zip(unit, _pieces(width, len(unit))):
                first[m], count[m] = at, piece
                at += piece
        position += width
    return Placement.of(first, count)


def screening_score(stages, placement: Placement, net: Network, profiles, cost, serving, hop_s: float) -> float:
    """Requests admitted over the unloaded round trip (decode tokens/s, roughly): a stage's time is its
    units' times (a chain's pieces one after another, a hop between them) weighted by their flows."""
    first, count = placement.arrays()
    room = np.zeros(net.num_layers)
    for m in np.flatnonzero(count):
        room[first[m]:first[m] + count[m]] += profiles[m].kv_tokens(int(count[m]))
    if room.min() <= 0:
        return 0.0
    admitted = serving.kv_fill * float(room.min()) / reserve_tokens(serving)
    trip = hop_s
    bottleneck = math.inf
    for width, units in stages:
        flows = np.array([min(net.capacity(m, int(count[m])) for m in unit) for unit in units])
        if flows.sum() <= 0:
            return 0.0
        bottleneck = min(bottleneck, float(flows.sum()))
        times = np.array([FRAGMENTATION * sum(count[m] * cost[m] for m in unit) + len(unit) * hop_s
                          for unit in units])
        trip += float((flows * times).sum() / flows.sum())
    if serving.benchmark is not None:
        admitted = min(admitted, ramp_requests(serving, bottleneck))
    return admitted / trip


def ramp_requests(serving, flow_tokens_per_s: float) -> float:
    """Requests a benchmark run can hold by the end of its window: it starts with the initial requests
    and admits one more per finished prompt, prompts going at most at the flow's pace."""
    warmup, window, initial = serving.benchmark
    return initial + flow_tokens_per_s / serving.prompt_tokens * (warmup + window)


def _grids(net: Network, machines: list[int], caps, stages: int):
    """Stages over `machines` (a region, or the cluster), or None."""
    by_group: dict[int, list[int]] = {}
    for m in machines:
        by_group.setdefault(int(net.machine_group[m]), []).append(m)
    return deal(list(by_group.values()), caps, net, net.num_layers, stages)


def candidates(net: Network, profiles, serving, keep: int = 12,
               stop: Callable[[], bool] | None = None) -> list[Placement]:
    """The best `keep` shared-path placements by the screening estimate, best first; `stop` (polled
    for every stage count) ends the generation with what it has."""
    n, L = net.num_machines, net.num_layers
    cost = {m: layer_cost_s(profiles[m], serving) for m in range(n)}
    most = {m: net.max_layers(m) for m in range(n)}
    thresholds = sorted({profiles[m].kv_tokens(k) for m in range(n) for k in range(1, most[m] + 1)}, reverse=True)
    if len(thresholds) > MAX_THRESHOLDS:     # a fixed share of them, evenly: the work does not grow with the kinds
        thresholds = [thresholds[round(i * (len(thresholds) - 1) / (MAX_THRESHOLDS - 1))] for i in range(MAX_THRESHOLDS)]
    regions = sorted(set(net.machine_region))
    plans = [[list(range(n))]]
    if len(regions) > 1:
        plans.append([[m for m in range(n) if net.machine_region[m] == r] for r in regions])
    hop_s = float(np.median(net.link_latency_s)) if net.link_latency_s is not None else 0.0
    scored: dict[tuple, tuple[float, Placement]] = {}
    for threshold in thresholds:
        caps = {m: layer_cap(profiles[m], most[m], threshold) for m in range(n)}
        for d in range(1, min(MAX_STAGES, L) + 1):
            if stop is not None and stop():
                return _best(scored, keep)
            for plan in plans:
                grids = [g for block in plan if (g := _grids(net, block, caps, d))]
                if not grids:
                    continue
                placement = _union([placement_of(g, n) for g in grids])
                key = (placement.first, placement.count)
                if key not in scored:
                    # regions serving apart: their estimates add up
                    score = sum(screening_score(g, placement_of(g, n), net, profiles, cost, serving, hop_s)
                                for g in grids)
                    scored[key] = (score, placement)
    return _best(scored, keep)


def _best(scored: dict, keep: int) -> list[Placement]:
    return [p for _, p in sorted(scored.values(), key=lambda sp: -sp[0])[:keep]]


def _union(placements: list[Placement]) -> Placement:
    first = np.zeros(len(placements[0].count), dtype=np.int64)
    count = np.zeros(len(placements[0].count), dtype=np.int64)
    for p in placements:
        f, c = p.arrays()
        first[c > 0], count[c > 0] = f[c > 0], c[c > 0]
    return Placement.of(first, count)

