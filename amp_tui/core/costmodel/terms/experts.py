"""Mixture-of-experts terms: the all-to-all that sends tokens to their experts and back, and the
expert weights and state one GPU holds under expert parallelism.

Expert parallelism as in Megatron-LM: the `ep` GPUs of an expert-parallel group are drawn from the
dp x cp ranks that share a tensor-parallel rank and a pipeline stage; each holds num_experts / ep of
every MoE layer's experts (split further over tp, expert tensor parallelism = tp). Expert weights
are replicated over the remaining dp x cp / ep ranks (the expert data-parallel group), which is the
group their gradients are reduced and their optimizer state is sharded over.

Layer columns these read (core/spec/model.py): `experts`, `expert_params` (all experts of the layer) and
`moe_alltoall_bytes` (per sample per forward, dispatch + combine, before the (ep - 1) / ep share
that leaves the GPU).
"""

from __future__ import annotations


def alltoall_seconds(bytes_per_gpu: float, ep: int, group_gpus_per_node: int, gpus_per_node: int,
                     intra_bandwidth: float, inter_bandwidth_per_node: float) -> float:
    """One all-to-all over an expert-parallel group of `ep` GPUs, every GPU of every node doing the
    same at once (all groups run their all-to-all together).

    Each GPU holds `bytes_per_gpu` destined evenly for the ep members, its own share staying put.
    `group_gpus_per_node` members of its group sit on its node: their shares go over NVLink at
    `intra_bandwidth` per GPU; the shares for the ep - group_gpus_per_node members on other nodes
    leave through the node's network, whose `inter_bandwidth_per_node` all `gpus_per_node` GPUs
    share. The two run concurrently: the slower one sets the time.
    """
    if ep <= 1 or bytes_per_gpu <= 0:
        return 0.0
    local_peers = min(group_gpus_per_node, ep) - 1
    remote_peers = ep - 1 - local_peers
    share = bytes_per_gpu / ep
    local = share * local_peers / intra_bandwidth
    remote = share * remote_peers / (inter_bandwidth_per_node / gpus_per_node) if remote_peers else 0.0
    return max(local, remote)


def alltoall_bytes_per_gpu(moe_alltoall_bytes: float, micro_batch_size: int, tp: int = 1, cp: int = 1) -> float:
    """Bytes one GPU puts into a layer's all-to-alls (dispatch + combine) per micro-batch forward:
    the layer's per-sample figure for this GPU's share of the tokens. Context parallelism gives
    each GPU 1/cp of the sequence, and the tp ranks split the tokens too (Megatron requires sequence
    parallelism for MoE with tp > 1). The backward pass sends the same again."""
    return moe_alltoall_bytes * micro_batch_size / (cp * tp)


def expert_params_per_gpu(expert_params: float, ep: int, tp: int = 1) -> float:
    """Expert parameters of a layer (or a stage) on one GPU: the experts split over ep, each over tp."""
    return expert_params / (ep * tp)


def expert_state_bytes_per_gpu(expert_params: float, ep: int, tp: int, expert_dp: int, zero_stage: int,
                               weight_bytes: float, gradient_bytes: float, optimizer_bytes: float) -> float:
    """Weights + gradients + optimizer state of the experts on one GPU, in bytes.

    `expert_params` counts all experts (of a layer or a stage); `expert_dp` = dp x cp / ep is the
    expert data-parallel group that ZeRO shards over: stage 1 the optimizer state, 2 also the
    gradients, 3 also the weights. The byte figures are per parameter before sharding (e.g. 2, 2
    and 12 for Adam in bf16 with fp32 master weights).
    """
    if expert_dp < 1:
        raise ValueError(f"expert_dp must be at least 1, got {expert_dp}")
    params = expert_params_per_gpu(expert_params, ep, tp)
    weights = weight_bytes / expert_dp if zero_stage >= 3 else weight_bytes
    gradients = gradient_bytes / expert_dp if zero_stage >= 2 else gradient_bytes
    optimizer = optimizer_bytes / expert_dp if zero_stage >= 1 else optimizer_bytes
    return params * (weights + gradients + optimizer)
