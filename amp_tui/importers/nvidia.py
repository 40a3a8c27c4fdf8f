"""What `nvidia-smi` prints about one node: its GPUs' topology and their names and memory.

`nvidia-smi topo -m` prints a matrix: a header of device columns (GPU0 ... GPUn-1, then NIC0 ...
or mlx5_0 ... on older drivers) followed by CPU Affinity, NUMA Affinity and GPU NUMA ID; a row per
device; then a legend. A cell says how two devices are joined: X itself, NV# a bonded set of #
NVLinks, PIX at most one PCIe bridge, PXB several PCIe bridges, PHB a PCIe host bridge (the CPU),
NODE host bridges within a NUMA node, SYS the interconnect between NUMA nodes (SOC on old drivers).
Newer drivers name the NICs in a "NIC Legend" (`NIC0: mlx5_0`) and underline the header with
terminal escape codes (text.py strips them).

`nvidia-smi --query-gpu=name,memory.total --format=csv` prints `name, memory.total [MiB]` then one
line per GPU: `NVIDIA A100-SXM4-80GB, 81920 MiB` (`noheader` drops the first line, `nounits` the
unit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_NAME_CHARS
from amp_tui.importers.text import CELL

MAX_GPUS_PER_NODE = 1024
# Path levels from nearest to farthest, as NCCL ranks them (src/graph/topo.h: PATH_NVL, PATH_PIX,
# PATH_PXB, PATH_PHB, PATH_SYS; NODE sits between PHB and SYS in nvidia-smi's legend).
LEVELS = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class Topology:
    """One node's `nvidia-smi topo -m`: per GPU pair, the level (LEVELS) and NVLink count."""

    gpus: int
    levels: tuple[tuple[str, ...], ...]      # [i][j]: LEVELS entry ("" on the diagonal)
    nvlinks: tuple[tuple[int, ...], ...]     # [i][j]: bonded NVLinks (0 when not NVLink)
    nics: tuple[str, ...] = ()               # NIC names (mlx5_0 ...), from the legend where it names them
    gpu_nic: tuple[str, ...] = ()            # per GPU, the level of its nearest NIC ("" without NICs)
    source: str = ""


@dataclass(frozen=True)
class GpuInfo:
    name: str                    # the device name, e.g. "NVIDIA A100-SXM4-80GB"
    memory_bytes: float


def parse_topology(text: str, source: str) -> Topology:
    lines = [line for line in text.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]
                      and not CELL.fullmatch((line.split() + ["CPU"])[1])), None)
    if header_at is None:
        raise SpecError(source, lines[0].strip()[:60] if lines else "empty",
                        "no header row starting GPU0: not `nvidia-smi topo -m` output")
    words = lines[header_at].split()
    stop = next((i for i, w in enumerate(words) if w in ("CPU", "NUMA", "Affinity")), len(words))
    columns = words[:stop]
    gpus = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    if gpus != [f"GPU{i}" for i in range(len(gpus))] or columns[:len(gpus)] != gpus:
        raise SpecError(f"{source}: header", " ".join(columns)[:60], "GPU columns are not GPU0, GPU1, ... in order")
    if len(gpus) > MAX_GPUS_PER_NODE:
        raise SpecError(f"{source}: header", f"{len(gpus)} GPUs", f"more than {MAX_GPUS_PER_NODE} GPUs in a node")
    rows: dict[str, list[str]] = {}
    for line in lines[header_at + 1:]:
        cells = line.split()
        if cells[0] not in columns:
            if cells[0].startswith("Legend"):
                break
            continue
        if len(cells) < 1 + len(columns):
            raise SpecError(f"{source}: row {cells[0]}", line.strip()[:60],
                            f"{len(cells) - 1} cells under {len(columns)} device columns (is the file cut short?)")
        row = cells[1:1 + len(columns)]
        for column, cell in zip(columns, row):
            if not CELL.fullmatch(cell):
                raise SpecError(f"{source}: row {cells[0]}, column {column}", cell,
                                "not a topo -m link (X, NV#, PIX, PXB, PHB, NODE, SYS)")
        rows[cells[0]] = row
    missing = [g for g in gpus if g not in rows]
    if missing:
        raise SpecError(source, missing[0], "no row for this GPU (is the file cut short?)")
    levels, nvlinks = [], []
    for i, gpu in enumerate(gpus):
        level_row, link_row = [], []
        for j, cell in enumerate(rows[gpu][:len(gpus)]):
            if (cell == "X") != (i == j):
                raise SpecError(f"{source}: row {gpu}, column GPU{j}", cell,
                                "X belongs on the diagonal, and only there")
            level_row.append("" if cell == "X" else "NV" if cell.startswith("NV") else
                             "SYS" if cell == "SOC" else cell)
            link_row.append(int(cell[2:]) if cell.startswith("NV") else 0)
        levels.append(tuple(level_row))
        nvlinks.append(tuple(link_row))
    for i in range(len(gpus)):
        for j in range(i):
            if levels[i][j] != levels[j][i] or nvlinks[i][j] != nvlinks[j][i]:
                raise SpecError(f"{source}: GPU{i} and GPU{j}", f"{rows[gpus[i]][j]} / {rows[gpus[j]][i]}",
                                "the matrix is not symmetric")
    nic_columns = columns[len(gpus):]
    legend = dict(re.findall(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", text, re.M))
    nics = tuple(legend.get(c, c) for c in nic_columns)
    gpu_nic = tuple(min((rows[g][len(gpus) + k] for k in range(len(nic_columns))), key=_rank, default="")
                    for g in gpus)
    return Topology(len(gpus), tuple(levels), tuple(nvlinks), nics, gpu_nic, source)


def _rank(cell: str) -> int:
    cell = "NV" if cell.startswith("NV") else "SYS" if cell == "SOC" else cell
    return LEVELS.index(cell) if cell in LEVELS else len(LEVELS)


def parse_gpu_query(text: str, source: str) -> list[GpuInfo]:
    """`nvidia-smi --query-gpu=name,memory.total --format=csv[,noheader][,nounits]`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    unit = "MiB"
    if lines and re.match(r"name\s*,", lines[0]):
        header = [h.strip() for h in lines[0].split(",")]
        if len(header) != 2 or not header[1].startswith("memory.total"):
            raise SpecError(f"{source}: header", lines[0][:60], "expected the columns name, memory.total")
        unit = re.search(r"\[(\w+)\]", header[1]).group(1) if "[" in header[1] else unit
        lines = lines[1:]
    gpus = []
    for number, line in enumerate(lines, start=1):
        match = re.fullmatch(r"(.+?)\s*,\s*(\d+(?:\.\d+)?)\s*(MiB|GiB)?", line)
        if not match:
            raise SpecError(f"{source}: GPU {number - 1}", line[:60], "expected `NAME, MEMORY MiB`")
        name = match.group(1).strip()
        if len(name) > MAX_NAME_CHARS or not name.isprintable():
            raise SpecError(f"{source}: GPU {number - 1}", name[:60], "not a device name")
        scale = 2**30 if (match.group(3) or unit) == "GiB" else 2**20
        gpus.append(GpuInfo(name, float(match.group(2)) * scale))
        if len(gpus) > MAX_GPUS_PER_NODE:
            raise SpecError(source, f"{len(gpus)} GPUs", f"more than {MAX_GPUS_PER_NODE} GPUs in a node")
    if not gpus:
        raise SpecError(source, "header only", "no GPU lines")
    if len({g.name for g in gpus}) > 1:
        raise SpecError(source, ", ".join(sorted({g.name for g in gpus}))[:60],
                        "GPUs of several types in one node; a node group holds one GPU type")
    return gpus
