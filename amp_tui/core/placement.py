"""Where each (stage, data-parallel replica, tensor rank) runs, and the links between them.

Rank order is Megatron-LM / DeepSpeed's: global rank r = tp_rank + tp * (dp_rank + dp * stage),
ranks filled node by node in the order the placement lists node groups, GPUs of a node consecutively.

Links: two GPUs on one node talk at that node's intra-node bandwidth; two nodes at the lower of their
inter-node bandwidths, shared by every concurrent flow that leaves (or enters) the node's network
interface. That sharing is why four tensor-parallel replicas all-reducing across the same nodes are
not four times faster than one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from amp_tui.core.scenario import Cluster


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
    boundary_seconds_per_byte: np.ndarray   # pipeline send after each stage but the last
    dp_seconds_per_byte: np.ndarray         # slowest data-parallel ring link per stage (0 if dp = 1)

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

    def __init__(self, cluster: Cluster, order: tuple[int, ...]):
        groups = cluster.nodes
        self.order = tuple(order)
        self.node_group = node_order(cluster, order)
        per_node = np.array([groups[g].gpus_per_node for g in self.node_group])
        self.rank_node = np.repeat(np.arange(len(self.node_group)), per_node)
        starts = np.concatenate([[0], np.cumsum(per_node)[:-1]])
        self.rank_local_gpu = np.arange(len(self.rank_node)) - np.repeat(starts, per_node)
        self.rank_group = self.node_group[self.rank_node]
        self.intra = np.array([g.intra_node_bandwidth for g in groups])[self.node_group]
        self.inter = np.array([g.inter_node_bandwidth for g in groups])[self.node_group]
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
        shared = np.minimum(self.inter[src_node] / np.maximum(n_out[row + src_node], 1),
                            self.inter[dst_node] / np.maximum(n_in[row + dst_node], 1))
        return np.where(crossing, shared, self.intra[src_node])

    def ring_seconds_per_byte(self, ring_ranks: np.ndarray) -> np.ndarray:
        """Rings along the last axis, all concurrent; the slowest link's s/byte per ring."""
        if ring_ranks.shape[-1] == 1:
            return np.zeros(ring_ranks.shape[:-1])
        nxt = np.concatenate([ring_ranks[..., 1:], ring_ranks[..., :1]], axis=-1)
        bandwidth = self.flow_bandwidth(ring_ranks.reshape(1, -1), nxt.reshape(1, -1)).reshape(ring_ranks.shape)
        return 1.0 / bandwidth.min(axis=-1)


def build_layout(cluster: Cluster, tp: int, pp: int, dp: int, order: tuple[int, ...],
                 nodes: Nodes | None = None) -> Layout:
    """The layout of (tp, pp, dp) on the cluster's nodes in `order` (`nodes`, if given, must be
    Nodes(cluster, order))."""
    nodes = nodes or Nodes(cluster, order)
    ranks = np.arange(pp * dp * tp).reshape(pp, dp, tp)  # [stage, replica, tp_rank] = global rank
    tp_spb = nodes.ring_seconds_per_byte(ranks).max(axis=1)                       # rings over tp ranks
    dp_spb = nodes.ring_seconds_per_byte(ranks.transpose(0, 2, 1)).max(axis=1)    # rings over replicas
    # Boundary k's sends (stage k -> k + 1, every replica and tensor rank) run together.
    boundary = np.zeros(0)
    if pp > 1:
        sends = nodes.flow_bandwidth(ranks[:-1].reshape(pp - 1, -1), ranks[1:].reshape(pp - 1, -1))
        boundary = 1.0 / sends.min(axis=1)

    serves = np.zeros((pp, len(cluster.nodes)), dtype=bool)   # does group g serve stage s?
    serves[np.repeat(np.arange(pp), dp * tp), nodes.rank_group[:pp * dp * tp]] = True
    stage_groups = tuple(tuple(g for g, on in enumerate(row) if on) for row in serves.tolist())
    return Layout(
        tp=tp, pp=pp, dp=dp, order=nodes.order,
        rank_node=nodes.rank_node, node_group=nodes.node_group, rank_local_gpu=nodes.rank_local_gpu,
        stage_groups=stage_groups,
        serves=serves,
        stage_capacity=np.where(serves, nodes.usable[None, :], np.inf).min(axis=1),
        stage_memory_bandwidth=np.where(serves, nodes.memory_bandwidth[None, :], np.inf).min(axis=1),
        stage_tp_seconds_per_byte=tp_spb,
        boundary_seconds_per_byte=boundary,
        dp_seconds_per_byte=dp_spb,
    )
