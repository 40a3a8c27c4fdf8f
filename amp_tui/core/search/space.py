"""The strategy space: every (tp, pp, dp, micro-batch size, node order) a search considers."""

from __future__ import annotations

import functools
import math

from amp_tui.core.search.orders import NodeOrders, node_orders
from amp_tui.core.spec.knobs import Knobs, default_knobs
from amp_tui.core.spec.scenario import Scenario


@functools.lru_cache(maxsize=256)
def divisors(n: int, up_to: int | None = None) -> tuple[int, ...]:
    """The divisors of n (those up to `up_to`), ascending; by trial division up to sqrt(n), or up to
    `up_to` when that is smaller, so that a batch of 10^12 costs no more than a GPU count."""
    if up_to is not None and up_to * up_to < n:
        return tuple(d for d in range(1, up_to + 1) if n % d == 0)
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(d for d in sorted(set(small + [n // d for d in small])) if up_to is None or d <= up_to)


def tp_degrees(scenario: Scenario) -> list[int]:
    """Divisors of GPUs per node (common to every group), or of the GPU count across nodes."""
    cluster = scenario.cluster
    if scenario.search.allow_cross_node_tp:
        options = divisors(cluster.num_gpus)
    else:
        options = divisors(math.gcd(*(group.gpus_per_node for group in cluster.nodes)))
    heads = scenario.model.shape.get("num_heads")
    return [tp for tp in options if not heads or heads % tp == 0]


def enumerate_candidates(scenario: Scenario, orders: NodeOrders | None = None, knobs: Knobs | None = None
                         ) -> list[tuple[int, int, int, int, tuple[int, ...]]]:
    """Every (tp, pp, dp, micro-batch size, node-group order) to search with these training
    techniques (default: the training section's), over `orders` (by default every order
    node_orders(scenario) lists, those the search enumerates family by family too). One pipeline
    stage with one replica has a single order: rank order.
    Context parallelism takes its share of the GPUs (tp x cp x pp x dp); combinations a
    technique cannot change are left out (sequence parallelism without tensor parallelism,
    interleaving without a pipeline to interleave). Expert parallelism takes its ep GPUs from
    the dp x cp ranks (ep divides dp x cp), hybrid sharding its groups from the dp ranks (the
    shard group divides dp and is smaller)."""
    knobs = knobs or default_knobs(scenario.training)
    n = scenario.cluster.num_gpus
    layers = scenario.model.num_layers
    gbs = scenario.training.global_batch_size
    cp, v = knobs.cp, knobs.virtual_stages
    out = []
    if n % cp or (cp > 1 and scenario.model.sequence_length % (2 * cp)):
        return out
    if orders is None:
        listed = node_orders(scenario)
        orders = NodeOrders(listed.orders + listed.rest, listed.complete or bool(listed.rest))
    orders = orders.orders
    for tp in tp_degrees(scenario):
        if (n // cp) % tp or (knobs.sequence_parallel and tp == 1) or tp * cp > _largest_node(scenario, tp):
            continue
        for pp in divisors(n // (tp * cp)):
            if pp * v > layers:
                break
            if v > 1 and pp == 1:
                continue
            dp = n // (tp * cp * pp)
            if gbs % dp or (dp * cp) % knobs.ep or (knobs.hsdp_shard and (dp % knobs.hsdp_shard or
                                                                          knobs.hsdp_shard >= dp)):
                continue
            for mbs in divisors(gbs // dp, up_to=scenario.search.max_micro_batch_size):
                if v > 1 and (gbs // (dp * mbs)) % pp:   # Megatron: micro-batches a multiple of pp
                    continue
                for order in (orders if pp > 1 or dp > 1 else orders[:1]):
                    out.append((tp, pp, dp, mbs, order))
    return out


def _largest_node(scenario: Scenario, tp: int) -> int:
    """Context-parallel rings stay inside a node with tensor parallelism unless tp may span nodes."""
    if scenario.search.allow_cross_node_tp:
        return scenario.cluster.num_gpus
    return math.gcd(*(group.gpus_per_node for group in scenario.cluster.nodes))
