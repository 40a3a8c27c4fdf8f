"""The flow network of a placement and its max flow (Helix, ASPLOS 2025, section 4).

Vertices: the coordinator (source and sink) and every machine, split into an in and an out vertex
joined by the machine's capacity: its tokens/s for the layers it holds, capped by its NIC.
Edges, with capacities in tokens/s:

- source -> machines holding layer 0, and machines holding the last layer -> sink: coordinator
  link bandwidth / bytes per token id;
- machine i -> machine j when j holds the layer right after i's last one and goes further
  (first_j <= end_i < end_j): j runs layers end_i .. end_j - 1. This is Helix's rule; it includes
  the plain case first_j == end_i. Capacity: link bandwidth / activation bytes per token.

The max flow is the serving throughput in tokens/s. scipy's max flow works on integers, so
capacities are scaled so that the largest possible flow (the sum of machine capacities) stays
well inside int32; the rounding costs under 1e-6 of the total.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from amp_tui.serving.spec import TOKEN_ID_BYTES, ServingScenario
from amp_tui.serving.throughput import throughput_table

_INT_LIMIT = 2**30


@dataclass(frozen=True)
class Network:
    """Everything max flow needs about a cluster, per machine (machines in cluster order)."""

    num_layers: int
    machine_group: np.ndarray       # group index of each machine
    machine_node: np.ndarray        # index within its group
    machine_region: tuple[str, ...]
    tables: tuple[np.ndarray, ...]  # per group: tokens/s by layer count (NIC cap applied), [0] = 0
    link: np.ndarray                # tokens/s from machine i to machine j (0: not connected)
    coordinator: np.ndarray         # tokens/s between the coordinator and each machine
    link_latency_s: np.ndarray | None = None       # one hop from machine i to machine j
    coordinator_latency_s: np.ndarray | None = None  # one hop between the coordinator and each machine

    @property
    def num_machines(self) -> int:
        return len(self.machine_group)

    def capacity(self, machine: int, layers: int) -> float:
        table = self.tables[self.machine_group[machine]]
        return float(table[layers]) if layers < len(table) else 0.0

    def max_layers(self, machine: int) -> int:
        return len(self.tables[self.machine_group[machine]]) - 1

    @property
    def links_never_bind(self) -> bool:
        """True when every link and coordinator link carries more than any machine can: then the
        max flow is the smallest per-layer sum of machine capacities (see solver.py)."""
        most = max(float(t.max()) for t in self.tables)
        off_diagonal = self.link[~np.eye(self.num_machines, dtype=bool)]
        return bool((off_diagonal.size == 0 or off_diagonal.min() >= most) and self.coordinator.min() >= most)


def build_network(scenario: ServingScenario) -> Network:
    model = scenario.serving_model
    act = model.activation_bytes_per_token
    groups, regions, nics, tables = [], [], [], []
    for group in scenario.groups:
        table = throughput_table(group, model, scenario.serving)
        tables.append(np.minimum(table, group.nic_bandwidth / act))
        groups += [group.index] * group.count
        regions += [group.region] * group.count
        nics += [group.nic_bandwidth] * group.count
    n = len(groups)
    bandwidth = np.zeros((n, n))
    latency = np.full((n, n), scenario.hop_latency_s)
    for i in range(n):
        for j in range(n):
            if regions[i] == regions[j]:
                bandwidth[i, j] = min(nics[i], nics[j])
            else:
                link = scenario.links.get(frozenset((regions[i], regions[j])))
                bandwidth[i, j] = link.bandwidth if link else 0.0
                latency[i, j] = link.latency_s if link else 0.0
    coord = scenario.coordinator
    if coord.bandwidth is not None:
        to_coordinator = np.full(n, coord.bandwidth)
        coordinator_latency = np.full(n, coord.latency_s)
    else:
        home = regions.index(coord.region)
        to_coordinator = np.array([bandwidth[i, home] if regions[i] != coord.region else nics[i] for i in range(n)])
        coordinator_latency = np.array([latency[i, home] for i in range(n)])
    return Network(num_layers=model.num_layers, machine_group=np.array(groups, dtype=np.int64),
                   machine_node=np.array([k for g in scenario.groups for k in range(g.count)], dtype=np.int64),
                   machine_region=tuple(regions), tables=tuple(tables), link=bandwidth / act,
                   coordinator=to_coordinator / TOKEN_ID_BYTES, link_latency_s=latency,
                   coordinator_latency_s=coordinator_latency)


@dataclass(frozen=True)
class Flow:
    value: float                    # tokens/s
    machine: np.ndarray             # tokens/s through each machine
    edges: dict                     # (u, v) -> tokens/s; u, v machine indices or "coordinator"


def max_flow(net: Network, first: np.ndarray, count: np.ndarray) -> Flow:
    """Max flow of the placement where machine i holds layers first[i] .. first[i] + count[i] - 1
    (count 0: idle)."""
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)
    end = first + count
    active = np.flatnonzero(count > 0)
    caps = np.array([net.capacity(i, int(count[i])) for i in active])
    total = float(caps.sum())
    if total <= 0:
        return Flow(0.0, np.zeros(net.num_machines), {})
    scale = _INT_LIMIT / (2 * total)
    size = 2 + 2 * len(active)          # 0 source, 1 sink, 2 + 2k in, 3 + 2k out
    rows, cols, data = [], [], []

    def edge(u: int, v: int, capacity: float) -> None:
        c = int(min(capacity, total) * scale)
        if c > 0:
            rows.append(u), cols.append(v), data.append(c)

    L = net.num_layers
    for k, m in enumerate(active):
        edge(2 + 2 * k, 3 + 2 * k, caps[k])
        if first[m] == 0:
            edge(0, 2 + 2 * k, net.coordinator[m])
        if end[m] == L:
            edge(3 + 2 * k, 1, net.coordinator[m])
    # i -> j when first_j <= end_i < end_j
    ends, starts = end[active], first[active]
    ok = (starts[None, :] <= ends[:, None]) & (ends[:, None] < ends[None, :])
    for a, b in zip(*np.nonzero(ok)):
        edge(3 + 2 * a, 2 + 2 * b, net.link[active[a], active[b]])
    graph = csr_matrix((np.array(data, dtype=np.int32), (rows, cols)), shape=(size, size))
    result = maximum_flow(graph, 0, 1)
    flows = result.flow.tocoo()
    machine = np.zeros(net.num_machines)
    edges: dict = {}
    for u, v, f in zip(flows.row, flows.col, flows.data):
        if f <= 0:
            continue
        value = f / scale
        if u >= 2 and v == u + 1 and u % 2 == 0:
            machine[active[(u - 2) // 2]] = value
            continue
        a = "coordinator" if u == 0 else int(active[(u - 3) // 2])
        b = "coordinator" if v == 1 else int(active[(v - 2) // 2])
        edges[(a, b)] = value
    return Flow(float(result.flow_value / scale), machine, edges)


def coverage(net: Network, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per layer, the summed capacity of the machines holding it: each is an upper bound on the flow,
    and their minimum equals the max flow when links never bind."""
    cov = np.zeros(net.num_layers + 1)
    for m in np.flatnonzero(np.asarray(count) > 0):
        c = net.capacity(int(m), int(count[m]))
        cov[first[m]] += c
        cov[first[m] + count[m]] -= c
    return np.cumsum(cov)[:-1]
