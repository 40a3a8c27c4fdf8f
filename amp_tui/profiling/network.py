"""`amp-tui profile --network`: measure the cluster's links, one process per GPU under torchrun.

Every process runs the same sequence of tests, each timed the same way: warm-ups (the first call
sets up NCCL's connections), then `repeats` timed runs, the median kept; a run repeats the operation
enough times to move a few megabytes and is divided by that count. Which processes take part in a
test, the others wait at a barrier:

  allreduce, intra   each node's GPUs all-reduce together, every node at once (a subgroup each)
  p2p, intra         two GPUs of a node: half a ping-pong at the smallest size (latency), a stream
                     of messages then an acknowledgement at the others (bandwidth)
  p2p, inter         GPU 0 of one node and GPU 0 of another, for each pair of node kinds
  p2p_all, inter     every GPU of one node streaming to its peer on the other at once: what the
                     node's network interface carries when all its GPUs send
  allreduce, inter   every GPU of every node together

Nodes are told apart by host name (or, with `ranks_per_node`, every that many consecutive ranks
pretend to be a node: a test of the code path on one machine, marked `simulated_nodes`); a kind of
node is its GPU (the catalog's, from the device name) and its GPUs per node. Process 0 gathers the
rows and returns the profile (core/spec/network.py); the others return None.
"""

from __future__ import annotations

import os
import platform
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.layers import ANY_GPU
from amp_tui.core.spec.network import NetworkGroup, NetworkProfile, NetworkRow
from amp_tui.profiling.backend import catalog_gpu, require_torch

KIB, MIB = 2**10, 2**20
SIZES = {"cuda": {"allreduce": (MIB, 16 * MIB, 256 * MIB), "p2p": (8 * KIB, MIB, 64 * MIB)},
         "cpu": {"allreduce": (4 * KIB, 64 * KIB, MIB), "p2p": (4 * KIB, MIB)}}
MOVED_PER_RUN = {"cuda": 256 * MIB, "cpu": 4 * MIB}    # a timed run repeats the operation to move this much
MAX_INNER = 50
LAUNCH_HINT = ("launch it on every node with torchrun, one process per GPU: torchrun --nnodes N --nproc-per-node G "
               "--rdzv-backend c10d --rdzv-endpoint HOST:29500 -m amp_tui profile --network -o net.yaml")


@dataclass(frozen=True)
class NetworkOptions:
    device: str = "cuda"              # cuda (NCCL) or cpu (gloo)
    warmups: int = 2
    repeats: int = 5
    ranks_per_node: int | None = None
    timeout_s: float = 300.0
    gpu: str | None = None            # the catalog GPU these are (default: from the device name)


@dataclass
class _World:
    torch: object
    dist: object
    rank: int
    size: int
    device: object
    nodes: list[list[int]]            # ranks of each node, by local rank
    hosts: list[str]
    kinds: list[tuple[str, str, int]]  # (catalog GPU, device name, GPUs per node)
    kind_of_node: list[int]
    groups: dict[int, object]         # node -> its process subgroup


def environment() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; one line without it."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        raise SpecError("profile --network", "no torchrun", LAUNCH_HINT)
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise SpecError("profile --network", os.environ.get("RANK"), "RANK, WORLD_SIZE and LOCAL_RANK must be "
                                                                     "whole numbers (set by torchrun)") from None


def measure_network(options: NetworkOptions, tool_version: str,
                    on_row: Callable[[NetworkRow, str], None] | None = None) -> NetworkProfile | None:
    rank, size, local_rank = environment()
    if size < 2:
        raise SpecError("profile --network", f"{size} process", "nothing to measure between one GPU; " + LAUNCH_HINT)
    if options.ranks_per_node is not None and (options.ranks_per_node < 1 or size % options.ranks_per_node):
        raise SpecError("--ranks-per-node", options.ranks_per_node, f"must divide the {size} processes")
    torch = require_torch()
    import torch.distributed as dist

    if options.device == "cuda":
        if not torch.cuda.is_available():
            raise SpecError("--device", "cuda", "no CUDA GPU is visible to PyTorch; --device cpu measures with gloo")
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device, backend = torch.device("cuda", torch.cuda.current_device()), "nccl"
        name = torch.cuda.get_device_name(device)
    else:
        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(1)
        device, backend = torch.device("cpu"), "gloo"
        name = f"{platform.machine() or 'unknown'} CPU"
    dist.init_process_group(backend, timeout=timedelta(seconds=options.timeout_s))
    try:
        world = _world(torch, dist, rank, size, local_rank, device, name, options)
        rows = _run_tests(world, options, on_row)
        if rank != 0:
            return None
        software = {"torch": str(torch.__version__), "python": platform.python_version(), "amp_tui": tool_version}
        if backend == "nccl":
            version = torch.cuda.nccl.version()         # a tuple (2, 27, 3); an int in old releases
            software["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        groups = tuple(NetworkGroup(f"{gpus}x{gpu}", gpu, device_name, gpus,
                                    tuple(world.hosts[n] for n, k in enumerate(world.kind_of_node) if k == kind))
                       for kind, (gpu, device_name, gpus) in enumerate(world.kinds))
        return NetworkProfile(
            backend=backend, device=options.device,
            measured_at=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            software=tuple(software.items()),
            timing=(("clock", "cuda-synchronize" if options.device == "cuda" else "perf_counter"),
                    ("warmups", str(options.warmups)), ("repeats", str(options.repeats)), ("statistic", "median")),
            world_size=size, simulated_nodes=options.ranks_per_node is not None, complete=True, groups=groups,
            rows=tuple(rows), source="this run")
    finally:
        dist.destroy_process_group()


def _world(torch, dist, rank, size, local_rank, device, name, options: NetworkOptions) -> _World:
    host = socket.gethostname()
    if options.ranks_per_node is not None:
        host = f"{host}#{rank // options.ranks_per_node}"
    gathered: list = [None] * size
    dist.all_gather_object(gathered, (host, local_rank if options.ranks_per_node is None
                                      else rank % options.ranks_per_node, name))
    hosts = list(dict.fromkeys(entry[0] for entry in gathered))
    nodes = [sorted((r for r in range(size) if gathered[r][0] == h), key=lambda r: gathered[r][1]) for h in hosts]
    kinds: list[tuple[str, str, int]] = []
    kind_of_node = []
    for members in nodes:
        device_name = gathered[members[0]][2]
        gpu = options.gpu or (ANY_GPU if options.device == "cpu" else catalog_gpu(device_name) or device_name)
        kind = (gpu, device_name, len(members))
        if kind not in kinds:
            kinds.append(kind)
        kind_of_node.append(kinds.index(kind))
    groups = {n: dist.new_group(members) for n, members in enumerate(nodes) if len(members) > 1}
    return _World(torch, dist, rank, size, device, nodes, hosts, kinds, kind_of_node, groups)


def _sync(world: _World) -> None:
    if world.device.type == "cuda":
        world.torch.cuda.synchronize()


def _timed(world: _World, options: NetworkOptions, work: Callable[[], None], inner: int) -> float:
    """Median seconds of one `work()` over the repeats, after the warm-ups."""
    times = []
    for run in range(options.warmups + options.repeats):
        _sync(world)
        began = time.perf_counter()
        for _ in range(inner):
            work()
        _sync(world)
        if run >= options.warmups:
            times.append((time.perf_counter() - began) / inner)
    return statistics.median(times)


def _inner(options: NetworkOptions, size: int) -> int:
    return max(1, min(MAX_INNER, MOVED_PER_RUN[options.device] // size))


def _buffer(world: _World, size: int):
    return world.torch.zeros(max(size // 4, 1), dtype=world.torch.float32, device=world.device)


def _run_tests(world: _World, options: NetworkOptions, on_row) -> list[NetworkRow]:
    sizes = SIZES[options.device]
    mine: list[tuple[str, NetworkRow]] = []        # rows this rank reports, with a label for progress
    out: list[NetworkRow] = []

    def gather() -> None:
        collected: list = [None] * world.size
        world.dist.all_gather_object(collected, list(mine))
        mine.clear()
        for rows in collected:
            for label, row in rows:
                out.append(row)
                if on_row is not None and world.rank == 0:
                    on_row(row, label)

    me = next(n for n, members in enumerate(world.nodes) if world.rank in members)
    kind = world.kind_of_node[me]
    # Inside each node, all nodes at once.
    for size in sizes["allreduce"]:
        if me in world.groups:
            group, members = world.groups[me], world.nodes[me]
            buffer = _buffer(world, size)
            seconds = _timed(world, options, lambda: world.dist.all_reduce(buffer, group=group), _inner(options, size))
            seconds = _slowest(world, seconds, group)
            if world.rank == members[0]:
                mine.append((world.hosts[me], NetworkRow("allreduce", "intra", (kind,), (world.hosts[me],),
                                                         len(members), float(size), seconds)))
        gather()
    for index, size in enumerate(sizes["p2p"]):
        members = world.nodes[me]
        if len(members) > 1 and world.rank in members[:2]:
            peer = members[1] if world.rank == members[0] else members[0]
            seconds = _p2p(world, options, size, peer, world.rank == members[0], latency=index == 0)
            if world.rank == members[0]:
                mine.append((world.hosts[me], NetworkRow("p2p", "intra", (kind,), (world.hosts[me],), 2,
                                                         float(size), seconds)))
        gather()
    # Between nodes: one pair of nodes per pair of kinds, one test at a time.
    for a, b in _node_pairs(world):
        kinds = tuple(sorted({world.kind_of_node[a], world.kind_of_node[b]}))
        where = (world.hosts[a], world.hosts[b])
        for index, size in enumerate(sizes["p2p"]):
            first, second = world.nodes[a][0], world.nodes[b][0]
            if world.rank in (first, second):
                seconds = _p2p(world, options, size, second if world.rank == first else first, world.rank == first,
                               latency=index == 0)
                if world.rank == first:
                    mine.append((" - ".join(where), NetworkRow("p2p", "inter", kinds, where, 2, float(size), seconds)))
            gather()
        pairs = min(len(world.nodes[a]), len(world.nodes[b]))
        size = sizes["p2p"][-1]
        if pairs > 1:
            senders, receivers = world.nodes[a][:pairs], world.nodes[b][:pairs]
            if world.rank in senders or world.rank in receivers:
                sending = world.rank in senders
                peer = receivers[senders.index(world.rank)] if sending else senders[receivers.index(world.rank)]
                seconds = _p2p(world, options, size, peer, sending, latency=False)
                seconds = _slowest(world, seconds, None, ranks=senders + receivers)
                if world.rank == senders[0]:
                    mine.append((" - ".join(where), NetworkRow("p2p_all", "inter", kinds, where, 2 * pairs,
                                                               float(size), seconds)))
            else:
                _slowest(world, 0.0, None, ranks=senders + receivers)
            gather()
    if len(world.nodes) > 1:
        for size in sizes["allreduce"]:
            buffer = _buffer(world, size)
            seconds = _timed(world, options, lambda: world.dist.all_reduce(buffer), _inner(options, size))
            seconds = _slowest(world, seconds, None)
            if world.rank == 0:
                mine.append(("every node", NetworkRow("allreduce", "inter", tuple(range(len(world.kinds))),
                                                      tuple(world.hosts), world.size, float(size), seconds)))
            gather()
    return out


def _node_pairs(world: _World) -> list[tuple[int, int]]:
    """(node, node) for each pair of kinds with nodes to measure: the first two of a kind, or the
    first of each of two kinds."""
    first: dict[int, list[int]] = {}
    for node, kind in enumerate(world.kind_of_node):
        first.setdefault(kind, []).append(node)
    pairs = []
    kinds = sorted(first)
    for i, a in enumerate(kinds):
        if len(first[a]) > 1:
            pairs.append((first[a][0], first[a][1]))
        for b in kinds[i + 1:]:
            pairs.append((first[a][0], first[b][0]))
    return pairs


def _slowest(world: _World, seconds: float, group, ranks: list[int] | None = None) -> float:
    """The largest of `seconds` over a test's processes (every process must call it: the others
    with 0)."""
    value = world.torch.tensor([seconds], dtype=world.torch.float64, device=world.device)
    if ranks is not None and world.rank not in ranks:
        value.zero_()
    world.dist.all_reduce(value, op=world.dist.ReduceOp.MAX, group=group)
    return float(value.item())


def _p2p(world: _World, options: NetworkOptions, size: int, peer: int, sender: bool, *, latency: bool) -> float:
    """Seconds one way per message of `size` bytes between this process and `peer`."""
    dist = world.dist
    buffer = _buffer(world, size)
    ack = _buffer(world, 4)
    if latency:
        def work() -> None:
            if sender:
                dist.send(buffer, peer)
                dist.recv(buffer, peer)
            else:
                dist.recv(buffer, peer)
                dist.send(buffer, peer)
        return _timed(world, options, work, _inner(options, size)) / 2.0
    count = _inner(options, size)

    def stream() -> None:
        for _ in range(count):
            if sender:
                dist.send(buffer, peer)
            else:
                dist.recv(buffer, peer)
        if sender:
            dist.recv(ack, peer)
        else:
            dist.send(ack, peer)
    return _timed(world, options, stream, 1) / count
