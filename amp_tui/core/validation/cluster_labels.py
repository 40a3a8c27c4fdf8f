"""A measured run's cluster as its source states it: GPU names to the catalog's, node figures
(NVLink, NVSwitch, PCIe generation, network) to bandwidths, GPU mixes to node groups. Where the
source is silent, a stated fallback, recorded in the run's notes.
"""

from __future__ import annotations

import re

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_GPUS
from amp_tui.core.base.units import parse_bandwidth, parse_int
from amp_tui.core.spec.hardware import gpu_catalog, instance_catalog

# Catalog GPU per run label, first match wins (case-insensitive; "A100-SXM4-40GB", "Titan-RTX",
# "GeForce RTX 2080Ti" and the like).
_GPU_LABELS = tuple((re.compile(pattern, re.IGNORECASE), name) for pattern, name in (
    ("GB300", "GB300"), ("GB200", "GB200"), ("B200", "B200"), ("GH200", "GH200"), ("H200", "H200"),
    (r"\bH20\b", "H20"), ("H100.*PCIe", "H100-PCIe"), (r"H100.*(96.*500 ?W|HBM2e|lower[- ]TDP)", "H100-96GB-500W"),
    ("H100|H800", "H100"), (r"A100.*40\s*GB?", "A100-40GB"), ("A100|A800", "A100-80GB"), ("4090", "RTX-4090"),
    ("3090", "RTX-3090"), ("3080", "RTX-3080"), ("RTX[- _]?6000[- _]?Ada|6000 Ada", "RTX-6000-Ada"),
    ("A6000", "RTX-A6000"), ("A5000", "RTX-A5000"), (r"\bA40\b", "A40"), (r"\bA30\b", "A30"),
    ("L40S", "L40S"), (r"\bL40\b", "L40"), ("A10G", "A10G"), (r"\bA10\b", "A10"), (r"\bL4\b", "L4"),
    (r"\bT4\b|Tesla[- _]T4", "T4"), (r"V100.*32", "V100-32GB"), ("V100.*PCIe", "V100-PCIe"), ("V100", "V100"),
    ("P100.*PCIe", "P100-PCIe"), ("P100", "P100"), (r"titan[- _]?v\b", "TITAN-V"),
    (r"titan[- _]?rtx", "TITAN-RTX"), (r"2080[- _]?Ti", "RTX-2080Ti"), ("2060", "RTX-2060"),
    ("P4000", "Quadro-P4000"), ("3060", "RTX-3060"), ("MI210", "MI210"), ("MI250", "MI250X"),
    ("MI300X", "MI300X"),
))


# Node figures (NVLink per GPU and direction, network per node) where a run names only the link
# family ("NVLink", "NVSwitch") or no network: the DGX entries of presets/instances.yaml, and for
# Blackwell NVIDIA's DGX B200 / GB200 NVL72 / GB300 NVL72 datasheets counted the same way (NVLink 5:
# 1.8 TB/s per GPU both ways; one 400 Gb/s NIC per GPU, 800 Gb/s on GB300).
_DGX_INSTANCE = {"A100-40GB": "dgx-a100", "A100-80GB": "dgx-a100", "H100": "dgx-h100", "H200": "dgx-h100",
                 "H20": "dgx-h100",     # (HGX H20 boards carry the H100's NVLink 4 and NVSwitch fabric)
                 "GH200": "quad-gh200", "H100-96GB-500W": "grand-teton-h100"}


_BLACKWELL_NODES = {"B200": ("900 GB/s", "3200 Gbps"), "GB200": ("900 GB/s", "1600 Gbps"),
                    "GB300": ("900 GB/s", "3200 Gbps")}


_NVL_GPUS = ("GB200", "GB300")
_NVL72 = 72   # GPUs in one GB200/GB300 NVLink domain
_GIB = 2**30


def _node_figures(gpu: str) -> tuple[str, str] | None:
    if gpu in _DGX_INSTANCE:
        entry = instance_catalog()[_DGX_INSTANCE[gpu]]
        return str(entry["intra_node_bandwidth"]), str(entry["inter_node_bandwidth"])
    return _BLACKWELL_NODES.get(gpu)


def catalog_gpu(label: str) -> str:
    for pattern, name in _GPU_LABELS:
        if pattern.search(label):
            return name
    if label in gpu_catalog():
        return label
    raise SpecError("cluster.gpu", label, "GPU not in catalog")


def cluster_spec(cluster: dict, notes: list[str]) -> dict:
    """One node group, or one per entry of a heterogeneous run's `gpu_mix`, in the order given
    (ranks fill them in that order)."""
    num_gpus = parse_int(cluster.get("num_gpus"), "cluster.num_gpus", maximum=MAX_GPUS)
    mix = gpu_mix(cluster.get("gpu_mix"))
    if not mix:
        mix = [{"gpu": cluster.get("gpu"), "num_gpus": num_gpus}]
    elif sum(entry["num_gpus"] for entry in mix) != num_gpus:
        raise SpecError("cluster.gpu_mix", cluster.get("gpu_mix"), f"does not add up to num_gpus ({num_gpus})")
    nodes = []
    for entry in mix:
        label = str(entry.get("gpu") or "")
        name = catalog_gpu(label)
        catalog = gpu_catalog()[name]
        gpu: str | dict = name
        memory_gb = entry.get("gpu_mem_gb", cluster.get("gpu_mem_gb") if len(mix) == 1 else None)
        if memory_gb and abs(memory_gb * 1e9 / catalog.memory_bytes - 1) > 0.03 \
                and abs(memory_gb * _GIB / catalog.memory_bytes - 1) > 0.03:
            gpu = {"base": name, "name": f"{name} {memory_gb} GB", "memory": f"{memory_gb} GB"}
            notes.append(f"GPU {label!r}: {name}'s figures with {memory_gb} GB")
        count = entry["num_gpus"]
        per_node = min(parse_int(entry.get("gpus_per_node") or cluster.get("gpus_per_node") or count,
                                 "cluster.gpus_per_node"), count)
        if count % per_node:
            raise SpecError("cluster.gpus_per_node", per_node, f"does not divide the {count} {label} GPUs")
        intra_label = str(entry.get("intra_node") or cluster.get("intra_node") or "")
        intra = _intra_bandwidth(intra_label, name, label, notes, per_node)
        inter = _inter_bandwidth(entry.get("inter_node", cluster.get("inter_node")), name, per_node, num_gpus, notes)
        if name in _NVL_GPUS and count > per_node:
            per_node, inter = _nvlink_domain(count, per_node, inter, notes)
        node = {"count": count // per_node, "gpu": gpu, "gpus_per_node": per_node,
                "intra_node_bandwidth": intra, "inter_node_bandwidth": inter}
        if _names_pcie(intra_label, name):       # (Gen4 and Gen5 x16 pass the bandwidth NVLink is told by)
            node["intra_node_link"] = "pcie"
        nodes.append(node)
    return {"name": str(cluster.get("name") or "cluster"), "nodes": nodes}


def gpu_mix(mix) -> list[dict]:
    """A heterogeneous cluster's parts as [{gpu, num_gpus, ...}]: from a list of mappings (gpu with
    count / num_gpus and optional gpus_per_node, intra_node, inter_node, gpu_mem_gb; or an
    instance with its count of nodes), a mapping of GPU (or instance) to count, or text such as
    '16x A100-40GB + 16x RTX 3090' or '2 x p4d.24xlarge + 4 x g5.12xlarge'. A part named by its
    instance takes the catalog's GPU, GPUs per node and links, and counts nodes."""
    if not mix:
        return []
    if isinstance(mix, dict):
        mix = [{"gpu": gpu, "count": count} for gpu, count in mix.items()]
    elif isinstance(mix, str):
        parts = re.findall(r"(\d+)\s*(?:x|\u00d7)?\s*([^+,;]+)", mix)
        if not parts:
            raise SpecError("cluster.gpu_mix", mix, "expected e.g. '16x A100 + 16x RTX 3090'")
        mix = [{"gpu": label.strip(), "count": int(count)} for count, label in parts]
    if not isinstance(mix, list):
        raise SpecError("cluster.gpu_mix", mix, "expected a list, a mapping or text")
    catalog = instance_catalog()
    out = []
    for entry in mix:
        if not isinstance(entry, dict) or not ("gpu" in entry or "instance" in entry):
            raise SpecError("cluster.gpu_mix", entry, "each part needs a gpu or an instance")
        instance = entry.get("instance") or (entry["gpu"] if str(entry["gpu"]).removeprefix("AWS ") in catalog else None)
        if instance is not None:
            name = str(instance).removeprefix("AWS ")
            if name not in catalog:
                raise SpecError("cluster.gpu_mix", instance, "instance not in catalog")
            node = catalog[name]
            nodes = entry.get("nodes", entry.get("count"))
            if not isinstance(nodes, int) or nodes < 1:
                raise SpecError("cluster.gpu_mix", entry, "each instance needs a whole number of nodes (count)")
            entry = {"intra_node": str(node["intra_node_bandwidth"]), "inter_node": str(node["inter_node_bandwidth"]),
                     **entry, "gpu": node["gpu"], "gpus_per_node": node["gpus_per_node"],
                     "num_gpus": nodes * node["gpus_per_node"]}
        count = entry.get("num_gpus", entry.get("count"))
        if not isinstance(count, int) or count < 1:
            raise SpecError("cluster.gpu_mix", entry, "each part needs a whole number of GPUs (num_gpus)")
        out.append({**entry, "num_gpus": count})
    return out


_PCIE_GBPS = {"3": 128, "4": 256, "5": 512}   # x16, one direction


# The A800 and H800, the A100's and H100's export versions, keep their compute but cut NVLink to
# 400 GB/s both ways (200 per direction): the replay reads them as their catalog parents but with this.
_EXPORT_NVLINK = (re.compile(r"\b[AH]800\b"), "200 GB/s")


# NVLink per GPU and direction where a run names NVLink on a GPU without a DGX entry: V100 SXM2 and
# P100 SXM2 (6 and 4 links of 25 and 20 GB/s), the two-card bridges of workstation and GeForce cards.
_NVLINK_FALLBACK = {"V100": "150 GB/s", "V100-32GB": "150 GB/s", "P100": "80 GB/s", "RTX-3090": "56 GB/s",
                    "RTX-A6000": "56 GB/s", "RTX-A5000": "56 GB/s", "A40": "56 GB/s", "A30": "100 GB/s",
                    "RTX-2080Ti": "50 GB/s", "TITAN-RTX": "50 GB/s", "TITAN-V": "50 GB/s"}
# PCIe generation of each card's slot, where a run says PCIe without the generation or nothing at all.
_PCIE_GEN3 = ("T4", "V100-PCIe", "P100-PCIe", "TITAN-V", "TITAN-RTX", "RTX-2080Ti", "RTX-2060", "Quadro-P4000")
_PCIE_GEN5 = ("H100-PCIe",)
_UNSTATED = re.compile(r"^\s*(|none|n/?a|unknown|not stated|not given|unspecified|-|\?|single gpu|one gpu|1 gpu)\s*$",
                       re.IGNORECASE)


def _names_pcie(label: str, gpu: str) -> bool:
    """Whether the node's GPUs talk over PCIe: the label says so, or says nothing and the card is a
    PCIe card (no DGX node of its own)."""
    if re.search(r"nvlink|nvswitch|\bsxm", label, re.I):
        return False
    return bool(re.search(r"pcie", label, re.I)) or (bool(_UNSTATED.match(label)) and not _node_figures(gpu))


def _pcie_generation(gpu: str) -> str:
    return "3" if gpu in _PCIE_GEN3 else "5" if gpu in _PCIE_GEN5 else "4"


def _intra_bandwidth(label: str, gpu: str, gpu_label: str = "", notes: list[str] | None = None,
                     per_node: int = 8) -> str:
    """A node's GPU-to-GPU bandwidth per GPU and direction from its label: a figure (Gbps, GB/s),
    NVLink / NVSwitch (the DGX node's, or the card's own links), PCIe (its generation's x16 rate).
    Unstated: PCIe at the card's generation for PCIe cards and one-GPU nodes, the DGX node's NVLink
    for SXM cards, said in the notes."""
    notes = [] if notes is None else notes
    figures = _node_figures(gpu)
    if re.search(r"nvlink|nvswitch|\bsxm", label, re.I):
        if figures:
            return _EXPORT_NVLINK[1] if _EXPORT_NVLINK[0].search(gpu_label) else figures[0]
        if gpu in _NVLINK_FALLBACK and not re.search(r"\d", label):
            notes.append(f"intra-node {label!r}: {gpu}'s NVLink, {_NVLINK_FALLBACK[gpu]} per GPU and direction")
            return _NVLINK_FALLBACK[gpu]
    match = re.search(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|/s|it)", label)
    if match:
        return f"{match.group(1)} Gbps"
    match = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", label)
    if match:
        return f"{match.group(1)} GB/s"
    match = re.search(r"pcie\s*(?:gen\s*)?([345])?", label, re.I)
    if match:
        return f"{_PCIE_GBPS[match.group(1) or _pcie_generation(gpu)]} Gbps"
    if _UNSTATED.match(label):
        if per_node > 1 and figures:
            notes.append(f"intra-node link not stated: {gpu}'s NVLink ({figures[0]}) assumed")
            return figures[0]
        generation = _pcie_generation(gpu)
        if per_node > 1:
            notes.append(f"intra-node link not stated: PCIe Gen{generation} assumed")
        return f"{_PCIE_GBPS[generation]} Gbps"
    raise SpecError("cluster.intra_node", label, "link not recognised")


def _nvlink_domain(count: int, per_tray: int, tray_network: str, notes: list[str]) -> tuple[int, str]:
    """GB200 and GB300 trays of `per_tray` GPUs sit in racks whose NVLink switches join up to 72
    GPUs: within a rack every GPU reaches every other at its NVLink rate, so a rack is one node
    (as the gb200-nvl72 instance models it) whose network is its trays' NICs together. Racks hold
    the most whole trays up to 72 that divide the GPUs evenly."""
    domain = max((d for d in range(per_tray, _NVL72 + 1, per_tray) if count % d == 0), default=per_tray)
    trays = domain // per_tray
    if trays == 1:                  # trays of 72 or more: each is a domain already
        return per_tray, tray_network
    notes.append(f"NVLink domains of {domain} GPUs ({trays} trays of {per_tray}), one node each")
    return domain, f"{trays * parse_bandwidth(tray_network, 'inter_node') * 8 / 1e9:g} Gbps"


# Per-port rates of fabrics a run may name without a figure (Gbps), and TCP Ethernet's common ones.
_FABRICS = ((r"\bNDR\b", 400), (r"\bHDR\b", 200), (r"\bEDR\b", 100), (r"\bFDR\b", 56), (r"omni-?path|\bOPA\b", 100),
            (r"slingshot", 200), (r"roce", 100), (r"\bEFA\b", 100), (r"infiniband|\bIB\b", 200),
            (r"ethernet|\bTCP\b", 25))


def _inter_bandwidth(label, gpu: str, per_node: int, num_gpus: int, notes: list[str]) -> str:
    """A node's network bandwidth from its label: a figure ("8x 400 Gb/s", "100 Gbps per GPU",
    "25GbE", "50 GB/s"), else a named fabric at its usual port rate (InfiniBand HDR 200, NDR 400,
    Omni-Path 100, Slingshot 200, RoCE 100, EFA 100, TCP Ethernet 25 Gbps), one port per GPU on
    nodes whose GPUs have a DGX-style board, one per node otherwise; unstated, the DGX node's
    network for its GPU, else 100 Gbps. One-node runs never use it. Each fallback is noted."""
    text = str(label or "")
    if match := re.search(r"(\d+)\s*x\s*(\d+)\s*Gb(?:ps|/s|it)?", text):       # "8x 400 Gb/s"
        return f"{int(match.group(1)) * int(match.group(2))} Gbps"
    if match := re.search(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|/s|it/s)?\s*per\s*GPU", text):
        return f"{float(match.group(1)) * per_node:g} Gbps"
    if match := re.search(r"(\d+(?:\.\d+)?)\s*(?:Gb(?:ps|/s|it)|G(?:b)?E\b)", text):
        return f"{match.group(1)} Gbps"
    if match := re.search(r"(\d+(?:\.\d+)?)\s*GB/s", text):
        return f"{float(match.group(1)) * 8:g} Gbps"
    figures = _node_figures(gpu)
    ports = per_node if figures else 1
    single = num_gpus <= per_node
    for pattern, gbps in _FABRICS:
        if re.search(pattern, text, re.I):
            if not single:
                notes.append(f"network {text!r}: {gbps} Gbps per port, {ports} port(s) per node assumed")
            return f"{gbps * ports} Gbps"
    if not (_UNSTATED.match(text) or text.lower() in ("false", "true")):
        raise SpecError("cluster.inter_node", text, "link not recognised")
    fallback = figures[1] if figures else "100 Gbps"
    if not single:
        notes.append(f"network not stated: {fallback} per node assumed")
    return fallback
