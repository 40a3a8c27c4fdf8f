"""A scenario from what a cluster prints: SLURM's nodes grouped, each group's GPUs and links.

Nodes with GPUs are grouped by their gres (GPU type and count), features and partitions, in the
order SLURM lists them. A group's GPU is its gres type's catalog GPU (nvidia-smi's device name and
memory decide where the type is short: `a100`); its link inside a node is read from `nvidia-smi topo
-m` (links.py). What none of these say, the network between nodes above all, is assumed, and the
result lists every assumption (`Imported.unknowns`), for the user or `amp-tui profile --network`.

nvidia-smi prints no host name: a topology or GPU list goes to the group a `KEY=FILE` names (a
node, gres type, partition or feature), or without a key to the one group it fits (its GPU count,
its GPU type).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import exact_bandwidth, format_bandwidth
from amp_tui.core.spec.hardware import catalog_names_in, gpu_catalog
from amp_tui.importers import gpus as gpu_names
from amp_tui.importers.links import IntraLink, intra_link, nic_note
from amp_tui.importers.nvidia import GpuInfo, Topology, parse_gpu_query, parse_topology
from amp_tui.importers.slurm import SlurmNode, parse_scontrol, parse_sinfo
from amp_tui.importers.text import GPU_QUERY, KINDS, SCONTROL, SINFO, TOPOLOGY, kind_of

DEFAULT_NETWORK = 100e9 / 8          # bytes/s: 100 Gbps, assumed where nothing says
# Interconnects a feature may name, Gbps per port: InfiniBand generations, and Ethernet speeds.
FABRICS = {"fdr": 56, "edr": 100, "hdr100": 100, "hdr": 200, "ndr200": 200, "ndr": 400, "xdr": 800}


@dataclass(frozen=True)
class Options:
    gpu_overrides: dict = field(default_factory=dict)   # KEY -> catalog GPU (--gpu)
    network: float | None = None     # bytes/s between nodes (--network), else features or DEFAULT_NETWORK
    nodes: int = 1                   # node count when no SLURM output is given
    partition: str | None = None     # only nodes in this partition
    all_nodes: bool = False          # keep nodes that are down or drained


@dataclass(frozen=True)
class Group:
    nodes: tuple[str, ...]
    gpu: str
    gpus_per_node: int
    intra: IntraLink
    network: float
    network_link: str                # "" (told from the bandwidth) or ethernet
    network_source: str
    memory_bytes: float | None = None     # nvidia-smi's, where it differs from the catalog
    gres: str = ""
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.nodes)

    def node_dict(self) -> dict:
        gpu: object = self.gpu
        if self.memory_bytes is not None:
            gpu = {"base": self.gpu, "usable_memory": f"{self.memory_bytes / 2**20:.0f} MiB"}
        out = {"count": self.count, "gpu": gpu, "gpus_per_node": self.gpus_per_node,
               "intra_node_bandwidth": exact_bandwidth(self.intra.bandwidth),
               "inter_node_bandwidth": exact_bandwidth(self.network), "intra_node_link": self.intra.link_class}
        if self.network_link:
            out["inter_node_link"] = self.network_link
        return out

    def describe(self) -> list[str]:
        where = _hostlist(self.nodes) + (f", partition {','.join(self.partitions)}" if self.partitions else "") + \
            (f", features {','.join(self.features)}" if self.features else "")
        return [f"{self.count} x {self.gpus_per_node} {self.gpu}" + (f" ({self.gres})" if self.gres else "")
                + f": {where}",
                f"  inside a node: {self.intra.link_class}, {self.intra.bandwidth / 1e9:g} GB/s: "
                f"{self.intra.description}",
                f"  between nodes: {format_bandwidth(self.network)}: {self.network_source}"]


@dataclass(frozen=True)
class Imported:
    groups: tuple[Group, ...]
    notes: tuple[str, ...]           # what was read and how
    unknowns: tuple[str, ...]        # what the inputs do not say, and what was assumed
    sources: tuple[str, ...]

    def cluster_dict(self, name: str) -> dict:
        return {"name": name, "nodes": [group.node_dict() for group in self.groups]}


def import_cluster(inputs: list[tuple[str | None, str, str]], options: Options) -> Imported:
    """`inputs`: (key or None, text, source name) per file, each text any of KINDS."""
    slurm: list[SlurmNode] | None = None
    topologies: list[tuple[str | None, Topology]] = []
    queries: list[tuple[str | None, list[GpuInfo], str]] = []
    for key, text, source in inputs:
        kind = kind_of(text, source)
        if kind in (SCONTROL, SINFO):
            if key is not None:
                raise SpecError(source, key, f"{KINDS[kind]} output takes no KEY= (it names its nodes)")
            if slurm is not None:
                raise SpecError(source, KINDS[kind], "a second SLURM listing; give one (scontrol or sinfo)")
            slurm = (parse_scontrol if kind == SCONTROL else parse_sinfo)(text, source)
        elif kind == TOPOLOGY:
            topologies.append((key, parse_topology(text, source)))
        elif kind == GPU_QUERY:
            queries.append((key, parse_gpu_query(text, source), source))
    notes: list[str] = []
    unknowns: list[str] = []
    if slurm is None:
        kinds = [_single_kind(topologies, queries, options)]
    else:
        kinds = _slurm_kinds(slurm, options, notes)
    attached_topology = _attach([(k, t, t.source) for k, t in topologies], kinds, "topology",
                                lambda kind, t: kind["gpus"] == t.gpus)
    attached_query = _attach(queries, kinds, "GPU list",
                             lambda kind, q: bool(set(kind["candidates"]) & set(catalog_names_in(q[0].name))))
    groups = []
    for index, kind in enumerate(kinds):
        query = attached_query.get(index)
        memory = query[0].memory_bytes if query else None
        where = f"group {index} ({kind['label']})"
        text = query[0].name if query and kind["type"] is None else kind["type"]
        gpu, assumed = gpu_names.resolve_gpu(text, memory, kind["overrides"], where)
        if assumed:
            unknowns.append(f"{where}: {assumed}")
        keep_memory = None
        if memory is not None and (note := gpu_names.memory_note(gpu, memory)):
            notes.append(f"{where}: {note}")
            keep_memory = memory
        if query and len(query) != kind["gpus"]:
            notes.append(f"{where}: nvidia-smi lists {len(query)} GPUs, SLURM's gres {kind['gpus']}: "
                         f"planned with SLURM's (what a job gets)")
        topology = attached_topology.get(index)
        if topology is not None and topology.gpus != kind["gpus"]:
            raise SpecError(topology.source, f"{topology.gpus} GPUs",
                            f"{where} has {kind['gpus']} GPUs per node; is this topology from another node?")
        intra = intra_link(topology, gpu, kind["gpus"])
        if intra.measured_from == "assumed" and kind["gpus"] > 1:
            unknowns.append(f"{where}: the link inside a node: no nvidia-smi topo -m given; {intra.description}")
        for note in intra.notes:
            notes.append(f"{where}: {note}")
        if (nics := nic_note(topology)) is not None:
            notes.append(f"{where}: {nics}")
        network, link, source = _network(kind["features"], options)
        groups.append(Group(tuple(kind["nodes"]), gpu, kind["gpus"], intra, network, link, source, keep_memory,
                            kind["gres"], tuple(kind["features"]), tuple(kind["partitions"])))
    told = [g for g in groups if not g.network_source.startswith(("given", "from feature"))]
    if told and sum(g.count for g in groups) > 1:
        unknowns.append(f"the network between nodes ({', '.join(f'group {groups.index(g)}' for g in told)}): not in "
                        f"scontrol or nvidia-smi output; {format_bandwidth(DEFAULT_NETWORK)} assumed (give --network "
                        "BANDWIDTH, or measure it: amp-tui profile --network, then name the file as cluster.network)")
    unknowns.append("prices: not known (price_per_hour left out: plan's cost columns stay empty)")
    return Imported(tuple(groups), tuple(notes), tuple(unknowns), tuple(source for _, _, source in inputs))


def _candidates(text: str | None) -> list[str]:
    """Catalog GPUs a gres type could be (its exact matches, else its family: a100 -> A100-*)."""
    if not text:
        return list(gpu_catalog())
    exact = catalog_names_in(text)
    words = set(re.findall(r"[a-z0-9]+", text.lower()))
    return exact or [n for n in gpu_catalog() if re.findall(r"[a-z0-9]+", n.lower())[0] in words]


def _slurm_kinds(nodes: list[SlurmNode], options: Options, notes: list[str]) -> list[dict]:
    without = [n.name for n in nodes if n.gpus == 0]
    if without:
        notes.append(f"left out {_nodes(len(without))} without GPUs: {_hostlist(without)}")
    chosen = [n for n in nodes if n.gpus > 0]
    if options.partition is not None:
        chosen = [n for n in chosen if options.partition in n.partitions]
        if not chosen:
            raise SpecError("--partition", options.partition, "no node with GPUs is in this partition")
    down = [n for n in chosen if not n.available]
    if down and not options.all_nodes:
        notes.append(f"left out {_nodes(len(down))} down or drained ({_hostlist([n.name for n in down])}: "
                     f"{', '.join(sorted({n.state for n in down}))}); --all-nodes keeps them")
        chosen = [n for n in chosen if n.available]
    if not chosen:
        raise SpecError("nodes", f"{len(nodes)} listed", "none has GPUs that can take a job")
    kinds: dict[tuple, dict] = {}
    for node in chosen:
        key = (node.gpu_type, node.gpus, node.features, node.partitions)
        if key not in kinds:
            kinds[key] = {"type": node.gpu_type, "gpus": node.gpus, "features": node.features,
                          "partitions": node.partitions, "nodes": [], "gres": node.gres.split("(")[0],
                          "label": node.gres.split("(")[0]}
        kinds[key]["nodes"].append(node.name)
    out = list(kinds.values())
    for kind in out:
        keys = [kind["type"], *kind["partitions"], *kind["features"], *kind["nodes"]]
        override = next((options.gpu_overrides[k] for k in keys if k in options.gpu_overrides), None)
        if kind["type"] is None and override is None:
            typed = next((f for f in kind["features"] if catalog_names_in(f)), None)
            if typed is None:
                raise SpecError(f"node {kind['nodes'][0]}", kind["gres"], "the gres names no GPU type and no "
                                "feature names one; say which with --gpu KEY=NAME (KEY: a partition, feature or "
                                "node), e.g. --gpu " + (kind["partitions"] or kind["nodes"])[0] + "=A100-80GB")
            kind["type"] = typed
        kind["overrides"] = {kind["type"]: override} if override else options.gpu_overrides
        kind["candidates"] = [override] if override else _candidates(kind["type"])
        kind["keys"] = set(keys)
    return out


def _single_kind(topologies, queries, options: Options) -> dict:
    """One node kind from nvidia-smi output alone (no SLURM listing): `options.nodes` of it."""
    if not queries:
        raise SpecError("inputs", "nvidia-smi topo -m only", "which GPU? add the output of nvidia-smi "
                                                               "--query-gpu=name,memory.total --format=csv")
    if len(queries) > 1 or len(topologies) > 1:
        raise SpecError("inputs", f"{len(queries)} GPU lists, {len(topologies)} topologies",
                        "without SLURM's node listing, give one node's nvidia-smi output (and --nodes N)")
    gpus = len(queries[0][1])
    return {"type": None, "gpus": gpus, "features": (), "partitions": (), "gres": "",
            "nodes": [f"node{i}" for i in range(options.nodes)], "label": f"{gpus} GPUs per node",
            "overrides": options.gpu_overrides, "candidates": list(gpu_catalog()), "keys": set()}


def _attach(items: list, kinds: list[dict], what: str, fits) -> dict[int, object]:
    """Group index -> the item (topology or GPU list) that goes with it."""
    out: dict[int, object] = {}
    for key, item, source in items:
        if key is not None:
            chosen = [i for i, kind in enumerate(kinds) if key in kind["keys"]]
            if not chosen:
                raise SpecError(source, key, "names no node, gres type, partition or feature of the listed nodes")
        else:
            chosen = [i for i, kind in enumerate(kinds) if fits(kind, item)]
            types = {kinds[i]["type"] for i in chosen}
            if not chosen:
                raise SpecError(source, what, "fits no node group (its GPU count or type); say which nodes it "
                                              "came from: NODE=FILE")
            if len(types) > 1 and len(kinds) > 1:
                raise SpecError(source, what, f"fits {len(chosen)} node groups of different GPUs; say which "
                                              "nodes it came from: NODE=FILE")
        for i in chosen:
            if i in out:
                raise SpecError(source, what, f"a second {what} for group {i} ({kinds[i]['label']})")
            out[i] = item
    return out


def _network(features, options: Options) -> tuple[float, str, str]:
    """(bandwidth between nodes, link class or "", where it came from)."""
    if options.network is not None:
        return options.network, "", "given (--network)"
    for feature in features:
        word = feature.lower()
        if word in FABRICS:
            gbps = FABRICS[word]
            return gbps * 1e9 / 8, "", (f"from feature {feature!r}: {word.upper()} InfiniBand, {gbps} Gbps per port; "
                                        "one port per node assumed")
        match = re.fullmatch(r"(?:eth)?(\d+)g(?:b?e|bps)?", word)
        if match and 1 <= int(match.group(1)) <= 1600:
            gbps = int(match.group(1))
            return gbps * 1e9 / 8, "ethernet", f"from feature {feature!r}: {gbps} Gbps Ethernet (TCP assumed)"
    return DEFAULT_NETWORK, "", "assumed: scontrol and nvidia-smi do not say"


def _nodes(count: int) -> str:
    return f"{count} node" + ("" if count == 1 else "s")


def _hostlist(names) -> str:
    names = list(names)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
