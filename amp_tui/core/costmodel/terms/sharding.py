"""Hybrid sharded data parallelism (HSDP): ZeRO-3 / FSDP inside groups of `shard` data-parallel
ranks, plain replication across the dp / shard groups.

Ranks: the data-parallel ranks of a stage and tensor/context-parallel rank are split into dp / shard
groups of `shard` consecutive ranks (torchtitan's mesh dp_replicate x dp_shard, Megatron-FSDP's
--num-distributed-optimizer-instances: the shard group is the inner one, so with tp x cp x shard up
to a node's GPUs it stays on NVLink). Per GPU, with e bytes per element and P a stage's parameters
over tp:

  memory     weights, gradients and optimizer state divided by the sharding group, shard x cp
             GPUs, not dp x cp (memory.state_bytes_per_param with that group);
  per layer  forward all-gather, backward all-gather and gradient reduce-scatter of the layer's
             P_l x e bytes on the shard ring: 3 x P_l x e x (shard - 1) / shard x its s/byte, plus
             3 x (shard - 1) message latencies; prefetched, so only what the layer's compute does
             not hide is exposed (compute.zero3_layer_time, cost.py);
  once       after the backward pass, each GPU's reduced gradient shard, P x e / (shard x cp)
             bytes, all-reduced across the dp / shard replicas that hold the same shard, over the
             replica ring (usually the network): the per-byte all-reduce time of that ring
             (ring or hierarchical, placement.Nodes.allreduce_seconds_per_byte), plus one all-reduce's
             latency per bucket. It overlaps the backward pass like a data-parallel all-reduce.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_tui.core.spec.frameworks import engine_of


@dataclass(frozen=True)
class HsdpLinks:
    """Per pipeline stage: the shard ring's slowest link (s/byte) and per-step latency, the replica
    all-reduce's seconds per byte reduced and its latency per message (placement.allreduce_latency)."""

    shard_seconds_per_byte: np.ndarray
    shard_latency: np.ndarray
    replica_allreduce_seconds_per_byte: np.ndarray
    replica_latency: np.ndarray


def sharding_group(dp: int, cp: int, hsdp_shard: int) -> int:
    """GPUs that ZeRO shards a parameter's state over: the data- and context-parallel ranks
    holding it, or under HSDP the shard group's."""
    return (hsdp_shard or dp) * cp


def hsdp_links(nodes, ranks_per_replica: int, pp: int, dp: int, shard: int) -> HsdpLinks:
    """The links of the shard rings and replica rings of a layout (ranks [stage, replica,
    tp x cp rank] in Megatron's order, as placement.build_layout numbers them); every ring of a
    kind runs at once, sharing the nodes' network interfaces."""
    replicas = dp // shard
    ranks = np.arange(pp * dp * ranks_per_replica).reshape(pp, replicas, shard, ranks_per_replica)
    shard_rings = ranks.transpose(0, 1, 3, 2).reshape(pp, -1, shard)
    replica_rings = ranks.transpose(0, 2, 3, 1).reshape(pp, -1, replicas)
    shard_spb, shard_latency = (a.max(axis=1) for a in nodes.ring_links(shard_rings))
    replica_latency = nodes.allreduce_latency(replica_rings).max(axis=1)
    replica = nodes.allreduce_seconds_per_byte(replica_rings).max(axis=1) if replicas > 1 else np.zeros(pp)
    return HsdpLinks(shard_spb, shard_latency, replica, replica_latency)


def zero3_ring(nodes, stage_ranks: np.ndarray, seconds_per_byte: float, latency: float, n: int,
               framework: str) -> tuple[float, float]:
    """(s/byte scaled by (n - 1) / n, latency x (n - 1)) of ZeRO-3's per-layer collectives over
    the n data-parallel ranks of a stage (`stage_ranks`: all its global ranks) whose ring's slowest
    link and latency are given: what compute.zero3_layer_time and the stage times take.

    DeepSpeed's ZeRO-3 gathers parameters module by module, and NCCL runs those modest messages on
    few channels, so across nodes each GPU moves its own gathers at about its share of the node's
    interfaces (the node's achieved inter-node bandwidth over its GPUs), not at the node's whole
    bandwidth that a ring of large messages reaches. Megatron-LM SC21's ZeRO-3 runs show it: the
    same ~66 s of parameter traffic on 384 to 1,536 A100s with 8 HDR NICs a node, 4 passes of
    349 GB at ~22 GB/s per GPU."""
    if engine_of(framework) == "deepspeed":
        rank_node = nodes.rank_node[stage_ranks]
        if rank_node.min() != rank_node.max():
            share = nodes.gpus_per_node[rank_node] / nodes.inter[rank_node]
            seconds_per_byte = max(seconds_per_byte, float(share.max()))
    return seconds_per_byte * (n - 1) / n, latency * (n - 1)


def shard_ring(links: HsdpLinks, shard: int) -> list[tuple[float, float]]:
    """Per stage (s/byte scaled by (shard - 1) / shard, latency x (shard - 1)): what
    compute.zero3_layer_time and the stage times take for the per-layer collectives."""
    ring = (shard - 1) / shard
    return [(float(spb) * ring, float(lat) * (shard - 1))
            for spb, lat in zip(links.shard_seconds_per_byte, links.shard_latency)]


def replica_allreduce_coef(links: HsdpLinks, gradient_bytes_per_param: float, bucket_bytes: float
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Per stage: (seconds per parameter (over tp) of the replica all-reduce of the gradient
    shard, the latency of its last bucket). `gradient_bytes_per_param` is the shard's bytes per
    parameter (e / (shard x cp)); each bucket of `bucket_bytes` pays one all-reduce's latency."""
    per_param = gradient_bytes_per_param * links.replica_allreduce_seconds_per_byte + \
        links.replica_latency * (gradient_bytes_per_param / bucket_bytes)
    return per_param, links.replica_latency
