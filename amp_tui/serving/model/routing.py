"""Which machines and hops a request visits: the max flow, read as the routes requests are sent on.

A scheduler that sends requests along the max flow's edges in proportion to their flow (Helix's
weighted round robin does) makes the share of requests crossing an edge its flow over the total.
A request entering machine j from machine i runs layers end_i .. end_j - 1 there (Helix's rule);
from the coordinator, all of j's layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_tui.serving.network import Flow, Network
from amp_tui.serving.spec import TOKEN_ID_BYTES

COORDINATOR = "coordinator"


@dataclass(frozen=True)
class Hop:
    share: float                 # of requests crossing it
    latency_s: float
    bandwidth: float             # bytes/s
    activations: bool            # machine to machine (activations), else token ids to or from the coordinator
    sender: int                  # machine index, -1 for the coordinator
    receiver: int                # machine index, -1 for the coordinator


@dataclass(frozen=True)
class Routing:
    visits: np.ndarray           # per machine: share of requests passing it
    layers: np.ndarray           # per machine: layers a passing request runs there (flow-weighted)
    hops: tuple[Hop, ...]
    flow_tokens_per_s: float     # the max flow: a bound on prompt and decode tokens/s together

    @property
    def depth(self) -> float:
        """Machines a request passes, on average."""
        return float(self.visits.sum())


def routing(net: Network, flow: Flow, first: np.ndarray, count: np.ndarray, activation_bytes: float) -> Routing:
    total = flow.value
    n = net.num_machines
    visits = np.zeros(n)
    layer_flow = np.zeros(n)
    hops = []
    if total <= 0:
        return Routing(visits, np.zeros(n), (), 0.0)
    end = np.asarray(first) + np.asarray(count)
    latency = net.link_latency_s if net.link_latency_s is not None else np.zeros((n, n))
    coordinator_latency = net.coordinator_latency_s if net.coordinator_latency_s is not None else np.zeros(n)
    for (u, v), tokens_per_s in flow.edges.items():
        share = tokens_per_s / total
        if u == COORDINATOR:
            hops.append(Hop(share, float(coordinator_latency[v]), float(net.coordinator[v] * TOKEN_ID_BYTES),
                            False, -1, v))
            visits[v] += share
            layer_flow[v] += share * count[v]
        elif v == COORDINATOR:
            hops.append(Hop(share, float(coordinator_latency[u]), float(net.coordinator[u] * TOKEN_ID_BYTES),
                            False, u, -1))
        else:
            hops.append(Hop(share, float(latency[u, v]), float(net.link[u, v] * activation_bytes), True, u, v))
            visits[v] += share
            layer_flow[v] += share * (end[v] - end[u])
    layers = np.divide(layer_flow, visits, out=np.zeros(n), where=visits > 0)
    return Routing(visits, layers, tuple(hops), float(total))
