"""The link between a node's GPUs, from its `nvidia-smi topo -m` (or, without one, assumed).

A ring collective over a node's GPUs (what its tensor- and data-parallel groups run) is as fast as
its slowest hop, so the node's link is the best level at which a ring can pass through every GPU:
the level L at which the GPU pairs joined at L or better form a connected graph in which every GPU
has two such neighbours (a ring needs one in and one out).

- NVLink, when the NVLink pairs alone make such a ring: each GPU sends on its links at once (NCCL
  lays a ring on each), so its bandwidth one way is its links x the generation's rate per link. A
  GPU behind NVSwitch shows NV# to every other GPU (NV12 on an A100 board), more than it has: it
  is counted once, at its own links (min(row sum, links per GPU)).
- PCIe otherwise, at the x16 rate of the GPU's PCIe generation. NCCL uses PCIe peer-to-peer only
  up to PXB (`p2pLevel = PATH_PXB`, src/graph/paths.cc: "don't use P2P across CPU Host Bridges"):
  a ring that must cross PHB, NODE or SYS goes through host memory, link class `host` (about a
  third of the x16 rate: docs/cost-model.md); within PXB it is link class `pcie`.

Rates (one direction): NVLink 1 (P100) 20 GB/s per link, NVLink 2 (V100, Turing bridges) 25, NVLink 3
(A100) 25, its GA102 bridge (A40, RTX A6000, RTX 3090) 14.0625, NVLink 4 (H100) 25, NVLink 5 (B200)
50: NVIDIA's datasheets (A100 12 links, 600 GB/s both ways; H100 SXM 18 links, 900 GB/s; B200 18,
1.8 TB/s). PCIe x16: Gen3 15.75, Gen4 31.5, Gen5 63 GB/s (../../shared/reference/hardware.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amp_tui.core.spec.hardware import gpu_catalog
from amp_tui.importers.nvidia import LEVELS, Topology

# catalog GPU: (NVLink generation, GB/s per link one way, links per GPU)
NVLINK = {
    "P100": (1, 20.0, 4),
    "V100": (2, 25.0, 6), "V100-32GB": (2, 25.0, 6), "RTX-2080Ti": (2, 25.0, 2), "TITAN-RTX": (2, 25.0, 2),
    "A100-40GB": (3, 25.0, 12), "A100-80GB": (3, 25.0, 12), "A30": (3, 25.0, 4),
    "A40": (3, 14.0625, 4), "RTX-A6000": (3, 14.0625, 4), "RTX-A5000": (3, 14.0625, 4), "RTX-3090": (3, 14.0625, 4),
    "H100": (4, 25.0, 18), "H100-96GB-500W": (4, 25.0, 18), "H200": (4, 25.0, 18), "H20": (4, 25.0, 18),
    "GH200": (4, 25.0, 18), "H100-PCIe": (4, 25.0, 12),
    "B200": (5, 50.0, 18), "GB200": (5, 50.0, 18), "GB300": (5, 50.0, 18),
}
# Boards built around NVLink (SXM): without a topology they are assumed on it.
NVLINK_BOARDS = {"P100", "V100", "V100-32GB", "A100-40GB", "A100-80GB", "H100", "H100-96GB-500W", "H200", "H20",
                 "GH200", "B200", "GB200", "GB300"}
PCIE_GENERATION = {name: 3 for name in ("T4", "V100", "V100-32GB", "V100-PCIe", "P100", "P100-PCIe", "TITAN-V",
                                        "TITAN-RTX", "RTX-2080Ti", "RTX-2060", "Quadro-P4000")}
PCIE_GENERATION.update({name: 5 for name in ("H100", "H100-PCIe", "H100-96GB-500W", "H200", "H20", "GH200",
                                             "B200", "GB200", "GB300")})
X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0}
P2P_LEVEL = "PXB"          # NCCL's default NCCL_P2P_LEVEL


@dataclass(frozen=True)
class IntraLink:
    link_class: str                 # nvlink | pcie | host
    bandwidth: float                # bytes/s one way per GPU: what a ring's hop gets at most
    description: str                # how it was told, in one line
    notes: tuple[str, ...] = field(default=())
    measured_from: str = "topology"  # topology | assumed


def pcie_generation(gpu: str) -> int:
    return PCIE_GENERATION.get(gpu, 4)


def ring_level(topology: Topology) -> str:
    """The best level (LEVELS) at which a ring passes through every GPU of the node."""
    n = topology.gpus
    for level in LEVELS:
        rank = LEVELS.index(level)
        neighbours = [[j for j in range(n) if j != i and LEVELS.index(topology.levels[i][j]) <= rank]
                      for i in range(n)]
        if (n == 2 and neighbours[0]) or (n > 2 and min(map(len, neighbours)) >= 2 and _connected(neighbours)):
            return level
    return "SYS"


def _connected(neighbours: list[list[int]]) -> bool:
    seen, todo = {0}, [0]
    while todo:
        for j in neighbours[todo.pop()]:
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return len(seen) == len(neighbours)


def intra_link(topology: Topology | None, gpu: str, gpus_per_node: int) -> IntraLink:
    """The node's GPU-to-GPU link from its topology, or assumed from the GPU type without one."""
    peer = gpu_catalog()[gpu].peer_to_peer
    generation = pcie_generation(gpu)
    x16 = X16_GBPS[generation] * 1e9
    if topology is None:
        if gpu in NVLINK_BOARDS and gpus_per_node > 1:
            gen, rate, links = NVLINK[gpu]
            return IntraLink("nvlink", links * rate * 1e9, f"NVLink {gen} assumed ({gpu} is an NVLink board): "
                             f"{links} links x {rate:g} GB/s per GPU each way", measured_from="assumed")
        link = "pcie" if peer else "host"
        return IntraLink(link, x16, f"PCIe Gen{generation} x16 {X16_GBPS[generation]:g} GB/s assumed, link class "
                         f"{link}" + (" (peer-to-peer within a PCIe switch)" if peer else
                                      " (no peer-to-peer on this GPU)"), measured_from="assumed")
    if topology.gpus == 1:
        return IntraLink("pcie", x16, "one GPU per node: no link between GPUs")
    level = ring_level(topology)
    notes = []
    if level == "NV":
        gen, rate, links = NVLINK.get(gpu, (0, 25.0, 0))
        if not gen:
            notes.append(f"{gpu} has no NVLink generation on record: 25 GB/s per link assumed")
        per_gpu = [sum(row) if not links else min(sum(row), links) for row in topology.nvlinks]
        switched = all(c == topology.nvlinks[0][1] for i, row in enumerate(topology.nvlinks)
                       for j, c in enumerate(row) if i != j) and links and sum(topology.nvlinks[0]) > links
        count = min(per_gpu)
        if switched:
            how = f"NVSwitch: NV{topology.nvlinks[0][1]} between every pair, {links} links per GPU"
        elif count == max(per_gpu):
            how = f"a mesh of {count} links per GPU"
        else:
            how = f"a mesh of {count} to {max(per_gpu)} links per GPU: a ring is as fast as the fewest"
        return IntraLink("nvlink", count * rate * 1e9, f"NVLink {gen or '?'}: {count} links x {rate:g} GB/s "
                         f"= {count * rate:g} GB/s per GPU each way ({how})", tuple(notes))
    if any(c for row in topology.nvlinks for c in row):
        pairs = sorted({tuple(sorted((i, j))) for i, row in enumerate(topology.nvlinks) for j, c in enumerate(row) if c})
        notes.append("NVLink joins only " + ", ".join(f"GPU{i}-GPU{j}" for i, j in pairs[:6])
                     + (" ..." if len(pairs) > 6 else "") + f": a ring over all {topology.gpus} GPUs crosses "
                     f"{level}, and the node's one figure is that ring's")
    p2p = peer and LEVELS.index(level) <= LEVELS.index(P2P_LEVEL)
    if not peer:
        why = "no peer-to-peer on this GPU: NCCL goes through host memory"
    elif p2p:
        why = f"peer-to-peer within {level} (NCCL's default allows it up to {P2P_LEVEL})"
    else:
        why = (f"a ring crosses {level}; NCCL's default keeps peer-to-peer within {P2P_LEVEL} "
               "(NCCL_P2P_LEVEL), so it goes through host memory")
    return IntraLink("pcie" if p2p else "host", x16, f"PCIe Gen{generation} x16 {X16_GBPS[generation]:g} GB/s, "
                     f"link class {'pcie' if p2p else 'host'}: {why}", tuple(notes))


def nic_note(topology: Topology | None) -> str | None:
    """What the topology says of the node's network cards (their speed it does not say)."""
    if topology is None or not topology.nics:
        return None
    direct = sum(LEVELS.index(level) <= LEVELS.index(P2P_LEVEL) for level in topology.gpu_nic if level in LEVELS)
    names = ", ".join(topology.nics[:4]) + (" ..." if len(topology.nics) > 4 else "")
    return (f"{len(topology.nics)} NICs ({names}); {direct} of {topology.gpus} GPUs within {P2P_LEVEL} of one "
            "(GPUDirect RDMA by NCCL's default); their speed is not in topo -m")
