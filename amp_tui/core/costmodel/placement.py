"""Where each (stage, data-parallel replica, tensor rank) runs, and the links between them.

Rank order is Megatron-LM / DeepSpeed's: global rank r = tp_rank + tp * (dp_rank + dp * stage),
ranks filled node by node in the order the placement lists node groups, GPUs of a node consecutively.

Links: two GPUs on one node talk at that node's intra-node bandwidth; two nodes at the lower of their
inter-node bandwidths, shared by every concurrent flow that leaves (or enters) the node's network
interface. That sharing is why four tensor-parallel replicas all-reducing across the same nodes are
not four times faster than one. Each bandwidth is the catalog figure times the achieved fraction of
its link class (params `link_efficiency.CLASS`), and every message on a link pays its class's
latency (`link_latency_s.CLASS`, the alpha term); a link a network profile measured (`cluster.network`)
takes the measured bandwidth and latency instead (NodeGroup.link_figures). One flow across nodes also reaches at most the
share `link_flow_share.CLASS` of the line rate: over TCP one NCCL connection gets about half, while
the four flows of four GPUs through one interface together get more (1.0 for RDMA links).

A data-parallel all-reduce whose ring spans nodes with several members per node runs as NCCL does
when that is faster: reduce-scatter inside each node, all-reduce across nodes, all-gather inside
(hierarchical), else as one ring.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from amp_tui.core.spec.params import ModelParams
from amp_tui.core.spec.scenario import Cluster


@dataclass(frozen=True, eq=False)
class Layout:
    tp: int
    pp: int
    dp: int
    order: tuple[int, ...]
    rank_node: np.ndarray        # node index (in placement order) of every global rank
    node_group: np.ndarray       # node-group index of every node
    rank_local_gpu: np.ndarray   # GPU index within its node
    stage_groups: tuple[tuple[int, ...], ...]   # node groups that serve each stage
    serves: np.ndarray           # (pp, node groups): True where the group serves the stage
    stage_capacity: np.ndarray   # bytes: the smallest usable GPU memory in each stage
    stage_memory_bandwidth: np.ndarray  # bytes/s: the slowest GPU memory in each stage
    stage_tp_seconds_per_byte: np.ndarray   # slowest tensor-parallel ring link per stage (0 if tp = 1)
    stage_cp_seconds_per_byte: np.ndarray   # slowest context-parallel ring link per stage (0 if cp = 1)
    boundary_seconds_per_byte: np.ndarray   # pipeline send after each stage but the last
    dp_seconds_per_byte: np.ndarray         # slowest data-parallel ring link per stage (0 if dp = 1)
    dp_allreduce_seconds_per_byte: np.ndarray   # all-reduce time per byte reduced, per stage (ring or hierarchical)
    stage_tp_latency: np.ndarray            # per message on the slowest tensor-parallel link, per stage
    stage_cp_latency: np.ndarray            # per step of the slowest context-parallel ring, per stage
    boundary_latency: np.ndarray            # per message on each pipeline boundary's slowest link
    dp_latency: np.ndarray                  # per step of a data-parallel ring (its hops' mean), per stage
    dp_allreduce_latency: np.ndarray        # per all-reduce message (bucket), ring or tree, per stage

    @cached_property
    def serving_groups(self) -> tuple[int, ...]:
        """Node groups that serve any stage, ascending."""
        return tuple(sorted({g for stage in self.stage_groups for g in stage}))


def merge_runs(items) -> tuple[tuple[object, int], ...]:
    """Adjacent (key, nodes) items with equal keys as one run: (A, 2), (A, 1), (B, 1) -> (A, 3), (B, 1)."""
    runs: list[list] = []
    for key, count in items:
        if runs and runs[-1][0] == key:
            runs[-1][1] += count
        else:
            runs.append([key, count])
    return tuple((key, count) for key, count in runs)


def placement_label(cluster: Cluster, order: tuple[int, ...] | None) -> str:
    """The nodes in the order they take ranks, adjacent groups of one kind as one run:
    '1 x g4dn.12xlarge > 3 x p3.8xlarge'; 'rank order' for the order the cluster lists them in."""
    if order is None or tuple(order) == tuple(range(len(cluster.nodes))):
        return "rank order"
    runs = merge_runs(((cluster.nodes[g].label, cluster.nodes[g].hardware_key()), cluster.nodes[g].count)
                      for g in order)
    return " > ".join(f"{count} x {label}" for (label, _), count in runs)


def node_order(cluster: Cluster, order: tuple[int, ...]) -> np.ndarray:
    """Node-group index of each node, nodes listed in placement order."""
    return np.concatenate([np.full(cluster.nodes[g].count, g, dtype=np.int64) for g in order])


class Nodes:
    """The cluster's nodes in one placement order, and the bandwidth of flows between its ranks.
    Every layout with this order shares it."""

    def __init__(self, cluster: Cluster, order: tuple[int, ...], params: ModelParams | None = None):
        params = params or ModelParams()
        groups = cluster.nodes
        self.order = tuple(order)
        self.node_group = node_order(cluster, order)
        per_node = np.array([groups[g].gpus_per_node for g in self.node_group])
        self.gpus_per_node = per_node                                   # per node, in placement order
        self.rank_node = np.repeat(np.arange(len(self.node_group)), per_node)
        starts = np.concatenate([[0], np.cumsum(per_node)[:-1]])
        self.rank_local_gpu = np.arange(len(self.rank_node)) - np.repeat(starts, per_node)
        self.rank_group = self.node_group[self.rank_node]
        # Per group: catalog figures times their link class's parameters, or what the cluster's
        # network profile measured (NodeGroup.link_figures).
        figures = np.array([g.link_figures(params) for g in groups]).reshape(len(groups), 5)
        self.intra = figures[:, 0][self.node_group]
        self.inter = figures[:, 1][self.node_group]
        # One connection through a network interface reaches at most this (link_flow_share);
        # several side by side together reach the interface's achieved bandwidth (`inter`).
        self.inter_flow = figures[:, 2][self.node_group]
        self.intra_latency = figures[:, 3][self.node_group]
        self.inter_latency = figures[:, 4][self.node_group]
        self.usable = np.array([g.gpu.usable_memory_bytes for g in groups])       # per node group
        self.memory_bandwidth = np.array([g.gpu.memory_bandwidth for g in groups])
        for array in vars(self).values():     # shared by every layout of this order
            if isinstance(array, np.ndarray):
                array.flags.writeable = False

    def flow_bandwidth(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Bandwidth of each flow (src rank -> dst rank). Each row of the arrays is one set of
        concurrent flows: they share the network interfaces of the nodes they leave and enter."""
        nodes = len(self.node_group)
        src_node, dst_node = self.rank_node[src], self.rank_node[dst]
        crossing = src_node != dst_node
        row = np.arange(src.shape[0])[:, None] * nodes
        size = src.shape[0] * nodes
        n_out = np.bincount((row + src_node)[crossing], minlength=size)
        n_in = np.bincount((row + dst_node)[crossing], minlength=size)
        shared = np.minimum(np.minimum(self.inter[src_node] / np.maximum(n_out[row + src_node], 1),
                                       self.inter[dst_node] / np.maximum(n_in[row + dst_node], 1)),
                            np.minimum(self.inter_flow[src_node], self.inter_flow[dst_node]))
        return np.where(crossing, shared, self.intra[src_node])

    def flow_latency(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        src_node, dst_node = self.rank_node[src], self.rank_node[dst]
        inter = np.maximum(self.inter_latency[src_node], self.inter_latency[dst_node])
        return np.where(src_node != dst_node, inter, self.intra_latency[src_node])

    def ring_seconds_per_byte(self, ring_ranks: np.ndarray) -> np.ndarray:
        """Rings along the last axis, all concurrent; the slowest link's s/byte per ring."""
        return self.ring_links(ring_ranks)[0]

    def ring_links(self, ring_ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rings along the last axis, all concurrent: (the slowest link's s/byte, the mean
        per-message latency of its hops) per ring; zeros for rings of one.

        A ring's chunks flow on without waiting for a global step, so one chunk's trip pays
        each hop's latency once: (n - N) intra-node and N crossing latencies for a ring over N
        nodes, as NCCL's own tuning model prices a ring. Collectives of s steps pay s x the mean
        hop latency; pricing every step at the crossing latency made a 512-GPU ring's latency
        8x what NCCL pays."""
        if ring_ranks.shape[-1] == 1:
            zeros = np.zeros(ring_ranks.shape[:-1])
            return zeros, zeros
        nxt, latency = self._hops(ring_ranks)
        bandwidth = self.flow_bandwidth(ring_ranks.reshape(1, -1), nxt.reshape(1, -1)).reshape(ring_ranks.shape)
        return 1.0 / bandwidth.min(axis=-1), latency.mean(axis=-1)

    def block_links(self, blocks: np.ndarray, cp: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Blocks of tp x cp ranks along the last axis, context-parallel ranks beside the
        tensor-parallel ones (Megatron's order tp-cp-dp-pp: tp innermost): ((s/byte, latency) of
        the slowest tensor-parallel ring, the same of the slowest context-parallel ring) per
        block. A tensor-parallel ring is its tp adjacent ranks, a context-parallel ring the cp
        ranks tp apart: with tp 8 x cp 2 on nodes of 8 GPUs, tensor parallelism stays on NVLink
        and only the context-parallel ring crosses the network."""
        inner = blocks.reshape(*blocks.shape[:-1], cp, blocks.shape[-1] // cp)
        tp_links = tuple(a.max(axis=-1) for a in self.ring_links(inner))
        cp_links = tuple(a.max(axis=-1) for a in self.ring_links(np.swapaxes(inner, -1, -2)))
        return tp_links, cp_links

    def _hops(self, ring_ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rings along the last axis: each rank's successor, and the latency of the hop to it."""
        nxt = np.concatenate([ring_ranks[..., 1:], ring_ranks[..., :1]], axis=-1)
        return nxt, self.flow_latency(ring_ranks, nxt)

    def allreduce_latency(self, ring_ranks: np.ndarray) -> np.ndarray:
        """Rings along the last axis: the latency of one all-reduce message (one bucket) over each
        ring's n ranks on N nodes of g, as NCCL's tuning model prices it: the cheaper of a ring,
        2 (n - 1) steps of the mean hop latency (each hop paid once per pass, ring_links), and a
        tree over the nodes, 2 [(g - 1) intra-node hops + ceil(log2 N) crossings]."""
        n = ring_ranks.shape[-1]
        if n == 1:
            return np.zeros(ring_ranks.shape[:-1])
        nxt, hop = self._hops(ring_ranks)
        ring = 2.0 * (n - 1) * hop.mean(axis=-1)
        crossing = self.rank_node[ring_ranks] != self.rank_node[nxt]
        nodes = np.maximum(crossing.sum(axis=-1), 1)
        intra = np.where(crossing, 0.0, hop).max(axis=-1)
        inter = np.where(crossing, hop, 0.0).max(axis=-1)
        tree = 2.0 * ((n / nodes - 1.0) * intra + np.ceil(np.log2(nodes)) * inter)
        return np.minimum(ring, tree)

    def allreduce_seconds_per_byte(self, ring_ranks: np.ndarray, ring_spb: np.ndarray | None = None) -> np.ndarray:
        """Rings along the last axis, all concurrent: seconds per byte reduced, the faster of one
        ring (2 (n-1)/n of the bytes over the slowest link) and the hierarchical all-reduce
        (2 (g-1)/g inside each node of g members, then 2 (N-1)/N across the N nodes, the nodes'
        rings sharing each network interface). `ring_spb`: ring_links(ring_ranks)[0], if known."""
        n = ring_ranks.shape[-1]
        if ring_spb is None:
            ring_spb, _ = self.ring_links(ring_ranks)
        flat = ring_ranks.reshape(-1, n)
        nodes = self.rank_node[flat]
        first = np.concatenate([np.ones((len(flat), 1), dtype=bool), nodes[:, 1:] != nodes[:, :-1]], axis=1)
        num_nodes = first.sum(axis=1)                                  # rank order keeps a node's ranks together
        ring = (2.0 * (n - 1) / n) * ring_spb.reshape(-1)
        per_node = n // np.maximum(num_nodes, 1)
        even = (num_nodes > 1) & (per_node > 1) & (per_node * num_nodes == n)
        if not even.any():
            return ring.reshape(ring_spb.shape)
        # Across nodes, the g members of a node each reduce 1/g of the bytes side by side: the
        # interface carries as many bytes as the flat ring's one crossing flow, so the flat ring's
        # shared crossing link (its slowest) prices that phase.
        intra = 1.0 / self.intra[nodes].min(axis=1)
        inter_shared = ring_spb.reshape(-1)
        hierarchical = (2.0 * (per_node - 1) / np.maximum(per_node, 1)) * intra + \
            (2.0 * (num_nodes - 1) / np.maximum(num_nodes, 1)) * inter_shared
        return np.where(even, np.minimum(ring, hierarchical), ring).reshape(ring_spb.shape)


def build_layout(cluster: Cluster, tp: int, pp: int, dp: int, order: tuple[int, ...],
                 nodes: Nodes | None = None, shared: dict | None = None, cp: int = 1) -> Layout:
    """The layout of (tp, pp, dp) on the cluster's nodes in `order` (`nodes`, if given, must be
    Nodes(cluster, order, params)). With context parallelism `tp` is the block of tp x cp ranks
    of a replica of a stage (Nodes.block_links).

    `shared`: a cache of stage and boundary terms kept by the caller across the orders of one
    cluster and params. When every stage starts and ends on a node boundary, no node holds ranks of
    two stages, so a stage's flows share network interfaces with its own flows only: its terms
    depend on (tp, cp, dp) and the node groups of its nodes alone, and a boundary's on those of the two
    stages it joins. Stages and boundaries already met in another order are looked up; the rest
    are computed together, exactly as for the whole pipeline (same flows, same per-node counts)."""
    nodes = nodes or Nodes(cluster, order)
    groups = len(cluster.nodes)
    starts = np.arange(pp + 1) * (tp * dp)
    if shared is not None and not np.append(nodes.rank_local_gpu, 0)[starts].any():
        first, last = nodes.rank_node[starts[:-1]], nodes.rank_node[starts[1:] - 1] + 1
        spans = [tuple(nodes.node_group[a:b].tolist()) for a, b in zip(first.tolist(), last.tolist())]
        rows = _looked_up(shared, [("stage", tp, cp, dp, span) for span in spans],
                          lambda stages: [(row, on, tuple(np.flatnonzero(on).tolist())) for row, on in
                                          zip(*_stage_terms(nodes, tp, cp, dp, stages, groups))])
        terms, serves = np.array([row[0] for row in rows]), np.array([row[1] for row in rows])
        stage_groups = tuple(row[2] for row in rows)
        cuts = np.array(_looked_up(shared, [("boundary", tp, dp, a, b) for a, b in zip(spans, spans[1:])],
                                   lambda boundaries: _boundary_terms(nodes, tp, dp, boundaries))).reshape(pp - 1, 2)
    else:
        terms, serves = _stage_terms(nodes, tp, cp, dp, np.arange(pp), groups)
        stage_groups = tuple(tuple(g for g, on in enumerate(row) if on) for row in serves.tolist())
        cuts = _boundary_terms(nodes, tp, dp, np.arange(pp - 1))
    return Layout(
        tp=tp, pp=pp, dp=dp, order=nodes.order,
        rank_node=nodes.rank_node, node_group=nodes.node_group, rank_local_gpu=nodes.rank_local_gpu,
        stage_groups=stage_groups,
        serves=serves,
        stage_capacity=np.where(serves, nodes.usable[None, :], np.inf).min(axis=1),
        stage_memory_bandwidth=np.where(serves, nodes.memory_bandwidth[None, :], np.inf).min(axis=1),
        stage_tp_seconds_per_byte=terms[:, 0],
        stage_cp_seconds_per_byte=terms[:, 2],
        boundary_seconds_per_byte=cuts[:, 0],
        dp_seconds_per_byte=terms[:, 4],
        dp_allreduce_seconds_per_byte=terms[:, 6],
        stage_tp_latency=terms[:, 1],
        stage_cp_latency=terms[:, 3],
        boundary_latency=cuts[:, 1],
        dp_latency=terms[:, 5],
        dp_allreduce_latency=terms[:, 7],
    )


def _looked_up(shared: dict, keys: list[tuple], compute) -> list:
    """The entries of `shared` under `keys`, those missing computed together first (`compute`:
    positions in `keys` -> their values, in order)."""
    firsts: dict[tuple, int] = {}
    for i, key in enumerate(keys):
        if key not in shared:
            firsts.setdefault(key, i)
    missing = list(firsts.values())
    if missing:
        for i, value in zip(missing, compute(np.array(missing))):
            shared[keys[i]] = value
    return [shared[key] for key in keys]


def _stage_terms(nodes: Nodes, tp: int, cp: int, dp: int, stages: np.ndarray, groups: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per stage listed, (slowest tensor-parallel ring's s/byte, its latency, the same two of
    the context-parallel ring and of the data-parallel ring, the all-reduce's s/byte and
    per-message latency) and whether each node group serves it, all the stages' flows running
    together (`tp`: the block of tp x cp ranks of a replica, Nodes.block_links)."""
    ranks = stages[:, None, None] * (tp * dp) + np.arange(dp * tp).reshape(1, dp, tp)  # [stage, replica, tp_rank]
    (tp_spb, tp_latency), (cp_spb, cp_latency) = (
        tuple(a.max(axis=1) for a in links) for links in nodes.block_links(ranks, cp))
    dp_rings = ranks.transpose(0, 2, 1)
    dp_links = nodes.ring_links(dp_rings)                                             # rings over replicas
    dp_spb, dp_latency = (a.max(axis=1) for a in dp_links)
    dp_allreduce = nodes.allreduce_seconds_per_byte(dp_rings, dp_links[0]).max(axis=1) if dp > 1 \
        else np.zeros(len(stages))
    dp_allreduce_latency = nodes.allreduce_latency(dp_rings).max(axis=1)
    serves = np.zeros((len(stages), groups), dtype=bool)   # does group g serve the stage?
    serves[np.repeat(np.arange(len(stages)), dp * tp), nodes.rank_group[ranks.reshape(-1)]] = True
    terms = np.stack([tp_spb, tp_latency, cp_spb, cp_latency, dp_spb, dp_latency, dp_allreduce, dp_allreduce_latency],
                     axis=1)
    return terms, serves


def _boundary_terms(nodes: Nodes, tp: int, dp: int, boundaries: np.ndarray) -> np.ndarray:
    """Per boundary listed (k: stage k -> k + 1, every replica and tensor rank sending together),
    (the slowest send's s/byte, its latency)."""
    if not len(boundaries):
        return np.zeros((0, 2))
    src = boundaries[:, None] * (tp * dp) + np.arange(tp * dp)[None, :]
    dst = src + tp * dp
    return np.stack([1.0 / nodes.flow_bandwidth(src, dst).min(axis=1), nodes.flow_latency(src, dst).max(axis=1)],
                    axis=1)
