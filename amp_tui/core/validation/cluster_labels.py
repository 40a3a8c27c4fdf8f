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

# Catalog GPU per run label, first match wins.
_GPU_LABELS = (("GB300", "GB300"), ("GB200", "GB200"), ("B200", "B200"), ("GH200", "GH200"), ("H200", "H200"),
               (r"\bH20\b", "H20"), ("H100.*PCIe", "H100-PCIe"), ("H100.*96.*500 ?W", "H100-96GB-500W"),
               ("H100|H800", "H100"), ("A100.*40GB", "A100-40GB"),
               ("A100|A800", "A100-80GB"), ("4090", "RTX-4090"), ("3090", "RTX-3090"), ("3080", "RTX-3080"),
               ("RTX 6000 Ada|6000 Ada", "RTX-6000-Ada"), ("A6000", "RTX-A6000"), ("A5000", "RTX-A5000"),
               (r"\bA40\b", "A40"), (r"\bA30\b", "A30"), ("L40S", "L40S"), (r"\bL40\b", "L40"), ("A10G", "A10G"),
               (r"\bA10\b", "A10"), (r"\bL4\b", "L4"),
               ("T4", "T4"), ("V100.*32", "V100-32GB"), ("(?i)V100.*PCIe", "V100-PCIe"), ("V100", "V100"),
               ("(?i)P100.*PCIe", "P100-PCIe"), ("P100", "P100"), (r"(?i)titan ?v\b", "TITAN-V"),
               ("(?i)titan ?rtx", "TITAN-RTX"), ("2080 ?Ti", "RTX-2080Ti"), ("2060", "RTX-2060"),
               ("P4000", "Quadro-P4000"), ("3060", "RTX-3060"),
               ("MI210", "MI210"), ("MI250", "MI250X"), ("MI300X", "MI300X"))


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
        if re.search(pattern, label):
            return name
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
        intra = _intra_bandwidth(str(entry.get("intra_node") or cluster.get("intra_node") or ""), name, label)
        inter = _inter_bandwidth(entry.get("inter_node", cluster.get("inter_node")), name, per_node, num_gpus, notes)
        if name in _NVL_GPUS and count > per_node:
            per_node, inter = _nvlink_domain(count, per_node, inter, notes)
        nodes.append({"count": count // per_node, "gpu": gpu, "gpus_per_node": per_node,
                      "intra_node_bandwidth": intra, "inter_node_bandwidth": inter})
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


def _intra_bandwidth(label: str, gpu: str, gpu_label: str = "") -> str:
    figures = _node_figures(gpu)
    if re.search(r"nvlink|nvswitch", label, re.I) and figures:
        return _EXPORT_NVLINK[1] if _EXPORT_NVLINK[0].search(gpu_label) else figures[0]
    match = re.search(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|/s)", label)
    if match:
        return f"{match.group(1)} Gbps"
    match = re.search(r"(\d+(?:\.\d+)?)\s*GB/s", label)
    if match:
        return f"{match.group(1)} GB/s"
    match = re.search(r"pcie\s*(?:gen\s*)?([345])?", label, re.I)
    if match:
        return f"{_PCIE_GBPS[match.group(1) or '4']} Gbps"
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


def _inter_bandwidth(label, gpu: str, per_node: int, num_gpus: int, notes: list[str]) -> str:
    text = str(label or "")
    if match := re.search(r"(\d+)\s*x\s*(\d+)\s*Gb/?s", text):                 # "8x 400 Gb/s"
        return f"{int(match.group(1)) * int(match.group(2))} Gbps"
    if match := re.search(r"(\d+)\s*Gb/?s per GPU", text):
        return f"{int(match.group(1)) * per_node} Gbps"
    if match := re.search(r"(\d+(?:\.\d+)?)\s*Gb(?:ps|/s)", text):
        return f"{match.group(1)} Gbps"
    figures = _node_figures(gpu)
    if text or not figures:
        raise SpecError("cluster.inter_node", text or None, "link not recognised")
    if num_gpus > per_node:
        notes.append(f"network not stated: {figures[1]} per node assumed")
    return figures[1]
