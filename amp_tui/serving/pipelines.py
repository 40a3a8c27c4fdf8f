"""Placements built as disjoint pipelines, each a chain of machines that covers the model once.

A pipeline is what an engine runs as one instance (vLLM's pipeline parallelism with an uneven split),
and it is where the serving model's two prices meet: the fewer layers a machine holds, the more KV
room it keeps per layer (more requests in flight), but the more machines a token crosses.

Candidates, for p pipelines and a KV-room threshold K (tokens per layer):
- each node group's machines are dealt round robin to the p pipelines;
- in a pipeline, a machine may hold up to cap(K) layers, the most at which its profile keeps K
  tokens per layer; the layers go to the machines that step fastest per layer first (decode step at
  a typical batch plus its share of prompt work), each up to its cap, the rest stay idle;
- layers are then spread evenly over the chosen machines of a group (the same total, more room);
- a pipeline that cannot cover the model at K leaves its machines idle.

Every (p, K) is scored by a screening estimate (requests admitted over the unloaded round trip), the
best few by the serving model itself (predict.py); serve.py adds the max-flow solver's placement and
the baselines to the race.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from amp_tui.serving.model.compute import FRAGMENTATION
from amp_tui.serving.model.kv import reserve_tokens
from amp_tui.serving.network import Network
from amp_tui.serving.placement import Placement

TYPICAL_BATCH = 16       # decode sequences per step for the screening estimate
MAX_PIPELINES = 8


def layer_cost_s(profile, serving) -> float:
    """Seconds per layer per decode token's round, with its request's share of prompt work."""
    return profile.decode_step_s(TYPICAL_BATCH) + profile.prompt_step_s(serving.prompt_tokens) / serving.output_tokens


def layer_cap(profile, most: int, threshold: float) -> int:
    """Most layers (<= most) at which the machine keeps `threshold` tokens of room per layer."""
    best = 0
    for k in range(1, most + 1):
        if profile.kv_tokens(k) >= threshold:
            best = k
    return best


def _fill(machines: list[int], caps: dict[int, int], cost: dict[int, float], group: np.ndarray,
          num_layers: int) -> dict[int, int] | None:
    """Layers per machine of one pipeline, or None if it cannot cover the model."""
    order = sorted((m for m in machines if caps[m] > 0), key=lambda m: (cost[m], -caps[m], m))
    if sum(caps[m] for m in order) < num_layers:
        return None
    held, left = {}, num_layers
    for m in order:
        if left <= 0:
            break
        held[m] = min(caps[m], left)
        left -= held[m]
    # the same layers spread evenly over the chosen machines of each group: more room per layer
    by_group: dict[int, list[int]] = {}
    for m in held:
        by_group.setdefault(int(group[m]), []).append(m)
    for members in by_group.values():
        total = sum(held[m] for m in members)
        base, extra = divmod(total, len(members))
        for i, m in enumerate(sorted(members)):
            held[m] = base + (1 if i < extra else 0)
    return held


def _stack(pipelines: list[dict[int, int]], cost: dict[int, float], n: int) -> Placement:
    first = np.zeros(n, dtype=np.int64)
    count = np.zeros(n, dtype=np.int64)
    for held in pipelines:
        position = 0
        # fastest first; vLLM ranks a pipeline's workers after the driver by GPUs per node, then address
        for m in sorted(held, key=lambda m: (cost[m], m)):
            first[m], count[m] = position, held[m]
            position += held[m]
    return Placement.of(first, count)


def screening_score(pipelines: list[dict[int, int]], profiles, cost, serving, hop_s: float) -> float:
    """Requests admitted over the unloaded round trip, summed over pipelines (decode tokens/s, roughly)."""
    total = 0.0
    for held in pipelines:
        room = min(profiles[m].kv_tokens(k) for m, k in held.items())
        admitted = serving.kv_fill * room / reserve_tokens(serving)
        round_trip = FRAGMENTATION * sum(k * cost[m] for m, k in held.items()) + (len(held) + 1) * hop_s
        total += admitted / round_trip
    return total


def candidates(net: Network, profiles, serving, keep: int = 12) -> Iterator[tuple[float, Placement]]:
    """The best `keep` pipeline placements by the screening estimate, best first: (score, placement)."""
    n, L = net.num_machines, net.num_layers
    cost = {m: layer_cost_s(profiles[m], serving) for m in range(n)}
    most = {m: net.max_layers(m) for m in range(n)}
    thresholds = sorted({profiles[m].kv_tokens(k) for m in range(n) for k in range(1, most[m] + 1)}, reverse=True)
    groups = sorted(set(int(g) for g in net.machine_group))
    members = {g: [m for m in range(n) if net.machine_group[m] == g] for g in groups}
    slots = sum(most.values())
    hop_s = float(np.median(net.link_latency_s)) if net.link_latency_s is not None else 0.0
    scored: dict[tuple, tuple[float, Placement]] = {}
    for p in range(1, min(MAX_PIPELINES, max(1, slots // L)) + 1):
        buckets = [[] for _ in range(p)]
        for g in groups:
            for i, m in enumerate(members[g]):
                buckets[i % p].append(m)
        for threshold in thresholds:
            caps = {m: layer_cap(profiles[m], most[m], threshold) for m in range(n)}
            pipelines = [held for bucket in buckets if (held := _fill(bucket, caps, cost, net.machine_group, L))]
            if not pipelines:
                continue
            placement = _stack(pipelines, cost, n)
            key = (placement.first, placement.count)
            if key not in scored:
                scored[key] = (screening_score(pipelines, profiles, cost, serving, hop_s), placement)
    yield from sorted(scored.values(), key=lambda sp: -sp[0])[:keep]
