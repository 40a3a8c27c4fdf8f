"""What a training process holds on each GPU besides its model's tensors: the CUDA context, NCCL's
communicator buffers, and an engine's fixed communication buffers. Per GPU, not per parameter: on
a small model they are most of the gap between the tensors and what runs out of memory.

- **CUDA context**: the driver's state and the kernels loaded into it. Before CUDA 11.7's lazy
  loading (which PyTorch turns on by default from 1.13, pytorch/pytorch#86509) every kernel of
  libtorch, cuBLAS and cuDNN is loaded at start: 667 MB measured by that PR before cuBLAS is
  touched, "> 1000 MB" once the libraries are loaded (pytorch/pytorch#107667); lazily ~300-400 MB
  (#86509: 287 MB; #109888: ~400 MB). Stacks of 2022 and before (PyTorch <= 1.12) load eagerly.
  cuBLAS keeps a workspace per handle and stream (PyTorch's default CUBLAS_WORKSPACE_CONFIG: 32 MiB
  on Hopper and later, ~8 MiB before), and Transformer Engine its own.
- **NCCL**: each communicator (one per process group that runs a collective: the world, tensor-,
  data-, context-, model-parallel and embedding groups) keeps, per channel and per connection,
  a buffer for each protocol: Simple 4 MiB (NCCL_BUFFSIZE), LL128 4.69 MiB, LL 0.5 MiB
  (src/init.cc DEFAULT_*BUFFSIZE). Where they live is the transport's: NVLink's P2P transport
  puts all three in GPU memory (src/transport/p2p.cc); over InfiniBand with GPUDirect RDMA the
  LL128 and Simple ones (net.cc: every protocol but LL in device memory under GDR); shared memory
  (PCIe GPUs whose path crosses the CPU, NCCL's default P2P level stopping at PCIe switches) and
  TCP sockets keep them in host memory. A ring connects each rank to one peer per channel, a tree
  to two more; NCCL before 2.22 connects both at init, later ones only what runs
  (NCCL_RUNTIME_CONNECT). Channels: 2 over PCIe, ~8 on Volta's NVLink, 24 on an A100 NVSwitch
  board, 32 on Hopper's and Blackwell's (NVIDIA/nccl#1685: 32 per pair on 8 H100s); across nodes,
  about two per NIC. Check: 24 channels x 3 connections x 9.19 MiB = 694 MB per communicator of
  4 A100s, against 688 MB measured (NVIDIA/nccl#964; 544 MB for a group of two, modelled 462 MB).
  Point-to-point sends (pipeline stages) use buffers of 8 steps of 512 KiB (NVLink) or 128 KiB
  (network) per channel and peer.
- **Engine buffers**: DeepSpeed's ZeRO-1/2 optimizer (zero/stage_1_and_2.py) allocates its
  gradient bucket, `reduce_bucket_size` elements (default 5e8) of the training precision, at the
  start of backward (after it in the pipeline engine), whatever the model's size.
"""

from __future__ import annotations

import numpy as np

MIB = 2.0**20
GIB = 2.0**30

CONTEXT_EAGER_BYTES = 1.0 * GIB     # every kernel loaded at start (PyTorch <= 1.12)
CONTEXT_LAZY_BYTES = 0.4 * GIB      # CUDA lazy loading (PyTorch >= 1.13)
# cuBLAS workspaces per handle and stream (compute, and the communication streams that run GEMMs
# under overlap), and Transformer Engine's: 32 MiB each on Hopper and later, 8 MiB before.
WORKSPACE_BYTES = {"new": 4 * 32 * MIB, "old": 4 * 8 * MIB}
NEW_GENERATIONS = ("hopper", "blackwell")

# NCCL's buffers per connection and channel in GPU memory: LL, LL128, Simple (src/init.cc) over
# NVLink's P2P transport; LL128 and Simple over the network with GPUDirect RDMA; none over shared
# (host) memory or TCP sockets.
NCCL_CONNECTION_BYTES = 0.5 * MIB + 4.6875 * MIB + 4.0 * MIB
NCCL_GDR_CONNECTION_BYTES = 4.6875 * MIB + 4.0 * MIB
NCCL_P2P_STEPS = 8                   # NCCL_STEPS
NCCL_P2P_CHUNK = {"nvlink": 512 * 1024, "other": 128 * 1024}   # P2P_NVL_CHUNKSIZE, P2P_NET/PCI_CHUNKSIZE
NCCL_NET_PEER_CHANNELS = 2           # NCCL_NCHANNELS_PER_NET_PEER
# Channels NCCL builds inside a node, by link: PCIe (and host memory) 2, NVLink by generation.
NVLINK_CHANNELS = {"volta": 8, "ampere": 24, "ada": 8, "hopper": 32, "blackwell": 32}
PCIE_CHANNELS = 2
NIC_BYTES_PER_S = 25e9               # one 200 Gb/s NIC: NCCL runs about two channels over each

# DeepSpeed ZeRO-1/2's gradient bucket (reduce_bucket_size, zero/config.py), in elements.
DEEPSPEED_REDUCE_BUCKET = 5e8


def context_bytes(generation: str, eager_loading: bool) -> float:
    """The CUDA context and library workspaces on one GPU of this generation."""
    base = CONTEXT_EAGER_BYTES if eager_loading else CONTEXT_LAZY_BYTES
    return base + WORKSPACE_BYTES["new" if generation in NEW_GENERATIONS else "old"]


def intra_channels(link_class: str, generation: str) -> int:
    """The channels NCCL builds between the GPUs of one node."""
    if link_class == "nvlink":
        return NVLINK_CHANNELS.get(generation, 8)
    return PCIE_CHANNELS


def inter_channels(inter_bandwidth: float) -> int:
    """Channels of a communicator across nodes: about two per NIC (of 200 Gb/s), at least two."""
    return int(max(2, 2 * round(inter_bandwidth / NIC_BYTES_PER_S)))


def connection_bytes(link_class: str, inter_link_class: str) -> tuple[float, float]:
    """(inside a node, across nodes) GPU bytes of one NCCL connection's buffers, by transport."""
    inside = NCCL_CONNECTION_BYTES if link_class == "nvlink" else 0.0
    across = NCCL_GDR_CONNECTION_BYTES if inter_link_class == "infiniband" else 0.0
    return inside, across


def collective_bytes(size: int, spans: np.ndarray, channels: np.ndarray, per_connection: np.ndarray,
                     runtime_connect: bool) -> np.ndarray:
    """NCCL's buffers on one GPU for one collective communicator of `size` ranks: per channel, a
    ring connection and a tree's (two, or one in a group of two), all at init before NCCL 2.22;
    only what runs after (the ring, and the tree across nodes); `per_connection` GPU bytes each."""
    if size <= 1:
        return np.zeros(np.shape(spans))
    if runtime_connect:
        connections = np.where(spans, 2.0, 1.0)
    else:
        connections = 2.0 if size == 2 else 3.0
    return channels * connections * per_connection


def p2p_bytes(size: int, peers: np.ndarray, spans: np.ndarray, channels: np.ndarray, chunk: np.ndarray) -> np.ndarray:
    """NCCL's point-to-point buffers for sends to and receives from `peers` neighbours in a
    communicator of `size` ranks: per peer, its channels (the node's shared out over the ranks,
    two across nodes) of 8 steps of a `chunk` (0 where the transport keeps them in host memory)
    each way."""
    per_peer = np.where(spans, NCCL_NET_PEER_CHANNELS, np.maximum(1, channels // max(size, 1)))
    return peers * 2.0 * per_peer * NCCL_P2P_STEPS * chunk


def stage_nccl_bytes(engine: str, p2p_by_broadcast: bool, runtime_connect: bool, tp: int, cp: int, dp: int,
                     pp: int, links, first: np.ndarray | None = None, world: int | None = None) -> np.ndarray:
    """Per pipeline stage, NCCL's buffers on one of its GPUs: the communicators of the process
    groups it belongs to (`links(ranks, sizes)`, ranks a (rows, k) array of global ranks in
    Megatron's order tp, cp, dp, pp, each row a group of `sizes` members padded with repeats: per
    row (spans nodes, channels, GPU bytes per connection, GPU bytes per p2p chunk); the stage's
    first rank stands for its GPUs).

    - every engine: the world group (barriers; plain DDP's gradient all-reduce);
    - tensor-, context- and data-parallel groups (Megatron's data-parallel group with context);
    - Megatron and DeepSpeed: the model-parallel group (tp x pp: the gradient norm, the overflow
      check) and, with pipelines, the embedding group (the first and last stages' tied weights);
    - pipeline neighbours: NCCL sends and receives; DeepSpeed's pipeline engine before PyTorch
      1.8 broadcasts in a group of two per neighbour (runtime/pipe/p2p.py), full communicators.
    Plain PyTorch and FSDP run a group of every rank on the default one (DDP, a 1-D device mesh);
    Megatron and DeepSpeed create a process group, and so a communicator, for each. `first` (each
    stage's first rank) and `world` default to a pipeline of equal stages."""
    stride = tp * cp * dp
    stages = np.arange(pp)
    first = stages * stride if first is None else np.asarray(first)
    world = stride * pp if world is None else world
    own_groups = engine in ("megatron", "deepspeed")
    groups: list[tuple[int, np.ndarray, np.ndarray, bool]] = []   # (size, ranks (1 or pp rows), on, p2p)

    def add(size: int, ranks: np.ndarray, on: np.ndarray | bool = True, p2p: bool = False) -> None:
        if size > 1 and (own_groups or size != world or not groups):
            groups.append((size, ranks, on, p2p))

    add(world, np.arange(world)[None, :])
    add(tp, first[:, None] + np.arange(tp)[None, :])
    add(cp, first[:, None] + tp * np.arange(cp)[None, :])
    add(dp * cp, first[:, None] + tp * np.arange(dp * cp)[None, :])
    if own_groups:
        add(tp * pp, (np.arange(tp)[:, None] + first[None, :]).reshape(1, -1))
        if pp > 1:
            add(2, np.array([[first[0], first[-1]]]), on=(stages == 0) | (stages == pp - 1))
    if pp > 1:
        prev, nxt = first[np.maximum(stages - 1, 0)], first[np.minimum(stages + 1, pp - 1)]
        if engine == "deepspeed" and p2p_by_broadcast:
            add(2, np.stack([first, prev], axis=1), on=stages > 0)
            add(2, np.stack([first, nxt], axis=1), on=stages < pp - 1)
        else:
            add(pp, np.stack([first, prev, nxt], axis=1), p2p=True)
    total = np.zeros(pp)
    # Few look-ups: the groups' rows padded with their first rank (min and max ignore repeats),
    # the wide groups every stage shares (the world: as wide as the cluster) apart.
    wide = [g for g in groups if len(g[1]) == 1 and g[1].shape[1] > 64]
    narrow = [g for g in groups if not (len(g[1]) == 1 and g[1].shape[1] > 64)]
    for batch in [[g] for g in wide] + ([narrow] if narrow else []):
        width = max(ranks.shape[1] for _, ranks, _, _ in batch)
        counts = [len(ranks) for _, ranks, _, _ in batch]
        rows = np.empty((sum(counts), width), dtype=np.int64)
        sizes = np.empty(len(rows))
        at = 0
        for (size, ranks, _, _), n in zip(batch, counts):
            rows[at:at + n, :ranks.shape[1]] = ranks
            rows[at:at + n, ranks.shape[1]:] = ranks[:, :1]
            sizes[at:at + n] = min(size, ranks.shape[1])
            at += n
        spans, channels, per_connection, chunk = links(rows, sizes)
        at = 0
        for (size, ranks, on, p2p), n in zip(batch, counts):
            part = slice(at, at + n)
            at += n
            if p2p:
                peers = (stages > 0).astype(float) + (stages < pp - 1)
                got = p2p_bytes(size, peers, spans[part], channels[part], chunk[part])
            else:
                got = collective_bytes(size, spans[part], channels[part], per_connection[part], runtime_connect)
            total += np.where(on, got, 0.0)
    return total


def deepspeed_bucket_bytes(engine: str, precision: str, zero_stage: int, bytes_per_element: float) -> float:
    """DeepSpeed ZeRO-1/2's gradient bucket: `reduce_bucket_size` elements of the training
    precision, allocated whole (not under BF16_Optimizer, which reduces its fp32 buffer in place)."""
    if engine != "deepspeed" or zero_stage not in (1, 2) or precision in ("fp32", "tf32"):
        return 0.0
    if precision != "fp16" and zero_stage == 1:        # BF16_Optimizer
        return 0.0
    return DEEPSPEED_REDUCE_BUCKET * bytes_per_element


class RankLinks:
    """Per global rank of one placement order, what its communicators see (its node, and its node
    group's channels and GPU bytes per connection and p2p chunk), and each node group's CUDA
    context: built once per order, shared by its layouts."""

    def __init__(self, cluster, nodes, eager_loading: bool):
        groups = cluster.nodes
        # channels inside and across nodes, GPU bytes per connection inside and across, per p2p chunk
        table = np.array([[intra_channels(g.intra_link_class, g.gpu.generation), inter_channels(g.inter_node_bandwidth),
                           *connection_bytes(g.intra_link_class, g.inter_link_class)] for g in groups])
        table = np.column_stack([table, np.where(table[:, 2] > 0, NCCL_P2P_CHUNK["nvlink"], 0.0),
                                 np.where(table[:, 3] > 0, NCCL_P2P_CHUNK["other"], 0.0)])
        self.rank_node = nodes.rank_node
        self.rank_table = table[nodes.rank_group]
        self.last = len(nodes.rank_node) - 1
        self.context = np.array([context_bytes(g.gpu.generation, eager_loading) for g in groups])

    def __call__(self, ranks: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per row of ranks, a group of `sizes` members: (spans nodes, channels, GPU bytes per
        connection, per p2p chunk). A group with more members than the nodes it spans (two or more
        on a node) talks mostly inside nodes; ranks fill nodes in order, so that count is its
        nodes' range."""
        ranks = np.minimum(ranks, self.last)
        node = self.rank_node[ranks]
        low, high = node.min(axis=1), node.max(axis=1)
        spans = low != high
        shared = sizes > high - low + 1
        t = self.rank_table[ranks].min(axis=1)
        channels = np.where(spans, np.minimum(t[:, 0], t[:, 1]), t[:, 0])
        per_connection = np.where(spans & ~shared, t[:, 3], t[:, 2])
        chunk = np.where(spans, t[:, 5], t[:, 4])
        return spans, channels, per_connection, chunk


def stage_runtime(training, zero_stage: int, links: RankLinks, serves: np.ndarray, tp: int, cp: int, dp: int,
                  pp: int, first: np.ndarray | None = None, world: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per stage of a layout (`serves`: (pp, node groups), which groups serve each stage; `links`:
    its order's RankLinks; `first`, `world`: each stage's first rank and the ranks in all, where
    the stages differ in size): ((4, pp) bytes per GPU held whatever the stage's layers: a stated
    runtime reserve, the CUDA context, NCCL's buffers and the engine's fixed buffers held through
    backward; (pp,) fixed bytes of the optimizer step's phase)."""
    from amp_tui.core.spec.frameworks import PROFILES

    stack = PROFILES[training.framework]
    engine = training.engine
    bucket = deepspeed_bucket_bytes(engine, training.precision, zero_stage, training.bytes_per_element)
    out = np.zeros((4, pp))
    step = np.full(pp, bucket if pp > 1 else 0.0)      # the pipeline engine allocates it after backward
    out[3] = bucket if pp == 1 else 0.0
    if training.runtime_reserve_bytes is not None:
        out[0] = training.runtime_reserve_bytes
        return out, step
    out[1] = np.where(serves, links.context[None, :], 0.0).max(axis=1)
    out[2] = stage_nccl_bytes(engine, stack.p2p_by_broadcast, stack.nccl_runtime_connect, tp, cp, dp, pp, links,
                              first, world)
    return out, step
