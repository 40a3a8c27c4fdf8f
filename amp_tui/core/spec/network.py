"""Network profiles: the links of the user's own cluster, measured by `amp-tui profile --network`.

A scenario names one beside its node groups, `cluster: {nodes: [...], network: net.yaml}` (a path
relative to the scenario file, or the document inline), and the cost model then prices each link
it measured from the measurement instead of the catalog's bandwidth times a link class's fitted
efficiency. Every row says what was measured, where (the hosts) and when.

Format (`format: amp-tui/network/1`):

    backend: nccl               # nccl (GPUs) or gloo (the CPU: proves the code path)
    device: cuda                # cuda or cpu
    measured_at: '2026-12-01T10:00:00+00:00'
    software: {torch: 2.13.0, nccl: 2.27.3, python: 3.12.3, amp_tui: 0.1.0}
    timing: {clock: cuda-events, warmups: 2, repeats: 5, statistic: median}
    world_size: 16              # processes, one per GPU
    simulated_nodes: false      # true: --ranks-per-node split one host into pretend nodes (a test)
    complete: true
    rows: 42                    # measurement rows below; fewer means the file was cut short
    groups:                     # kinds of node: GPU and GPUs per node
    - {name: 8xA100-80GB, gpu: A100-80GB, device_name: NVIDIA A100-SXM4-80GB, gpus_per_node: 8,
       nodes: [gpu-a100-01, gpu-a100-02]}
    measurements:
    - {test: allreduce, scope: intra, groups: [0], nodes: [gpu-a100-01], ranks: 8, bytes: 268435456,
       seconds: 0.00161}

Tests: `allreduce` (seconds per all-reduce of `bytes` over `ranks`; bus bandwidth as nccl-tests
reports it, bytes / seconds x 2 (ranks - 1) / ranks), `p2p` (seconds one way per message between
two GPUs: half a ping-pong at the smallest size, a stream of messages at the others) and
`p2p_all` (every GPU of one node sending to its peer on another at once: the node's network
interface shared). Scope `intra` is inside one node, `inter` between nodes (groups: the two kinds).

What the cost model takes, per kind of node (`MeasuredLinks`): inside a node the all-reduce's bus
bandwidth at the largest size (the ring's hop) and a p2p message's latency at the smallest;
between nodes one flow's p2p bandwidth (`link_flow_share`'s figure), the p2p_all aggregate (the
interface's), and the p2p latency; for a kind, the best pair it was measured in (the cost model
takes the slower end of a flow). A scenario's node group takes the figures of the kind with its
GPU and GPUs per node (a CPU run's `gpu: any` stands in for every GPU).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_TEXT_CHARS, check_name
from amp_tui.core.base.units import format_seconds, parse_int, parse_number
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file
from amp_tui.core.spec.layers import ANY_GPU
from amp_tui.core.spec.profiles import name_pairs

NETWORK_FORMAT = "amp-tui/network/1"
TESTS = ("allreduce", "p2p", "p2p_all")
SCOPES = ("intra", "inter")
MAX_ROWS = 100_000
MAX_GROUPS = 64
_HEADER = ("format", "backend", "device", "measured_at", "software", "timing", "world_size", "simulated_nodes",
           "complete", "rows", "groups", "measurements")
_ROW_KEYS = ("test", "scope", "groups", "nodes", "ranks", "bytes", "seconds")


@dataclass(frozen=True)
class NetworkGroup:
    name: str
    gpu: str                        # catalog GPU, or `any` (a CPU run)
    device_name: str
    gpus_per_node: int
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class NetworkRow:
    test: str
    scope: str
    groups: tuple[int, ...]
    nodes: tuple[str, ...]
    ranks: int
    bytes: float
    seconds: float

    @property
    def bandwidth(self) -> float:
        """bytes/s: an all-reduce's bus bandwidth, a p2p's one flow, a p2p_all's node aggregate."""
        if self.test == "allreduce":
            return self.bytes / self.seconds * 2.0 * (self.ranks - 1) / self.ranks
        if self.test == "p2p_all":
            return self.bytes * (self.ranks // 2) / self.seconds
        return self.bytes / self.seconds

    def to_dict(self) -> dict:
        return {"test": self.test, "scope": self.scope, "groups": list(self.groups), "nodes": list(self.nodes),
                "ranks": self.ranks, "bytes": self.bytes, "seconds": self.seconds}


@dataclass(frozen=True)
class MeasuredLinks:
    """What a network profile measured for one kind of node; None where it measured nothing."""

    intra_bandwidth: float | None = None        # bytes/s: a ring hop inside a node
    intra_latency_s: float | None = None
    inter_bandwidth: float | None = None        # bytes/s: the node's interface, all its GPUs sending
    inter_flow_bandwidth: float | None = None   # bytes/s: one flow between nodes
    inter_latency_s: float | None = None
    measured: tuple[str, ...] = ()              # what was measured, one phrase each
    source: str = field(default="", compare=False)

    @property
    def any(self) -> bool:
        return bool(self.measured)


@dataclass(frozen=True)
class NetworkProfile:
    backend: str
    device: str
    measured_at: str
    software: tuple[tuple[str, str], ...]
    timing: tuple[tuple[str, str], ...]
    world_size: int
    simulated_nodes: bool
    complete: bool
    groups: tuple[NetworkGroup, ...]
    rows: tuple[NetworkRow, ...]
    source: str = "inline"

    def summary(self) -> str:
        """One line: where, on what and when it was measured."""
        hosts = len({node for group in self.groups for node in group.nodes})
        on = "a CPU with gloo: proves the code path, not a GPU's links" if self.device == "cpu" else \
            f"GPUs with {self.backend}"
        flags = ("" if self.complete else ", incomplete (stopped early)") + \
            (", nodes simulated on one host" if self.simulated_nodes else "")
        return (f"network profile {self.source}: measured on {on}, {self.world_size} processes on {hosts} "
                f"host{'s' if hosts != 1 else ''}, {self.measured_at[:10] or 'undated'}, {len(self.rows)} rows{flags}")

    def links(self, group: int) -> MeasuredLinks:
        """The figures the cost model takes for one kind of node (see the module's docstring)."""
        def rows(test: str, scope: str) -> list[NetworkRow]:
            return [r for r in self.rows if r.test == test and r.scope == scope and group in r.groups
                    and (scope == "inter" or r.groups == (group,))]

        def at(found: list[NetworkRow], largest: bool) -> list[NetworkRow]:
            if not found:
                return []
            size = max(r.bytes for r in found) if largest else min(r.bytes for r in found)
            return [r for r in found if r.bytes == size]

        out: dict = {}
        measured = []
        if (big := at(rows("allreduce", "intra"), True)):
            out["intra_bandwidth"] = statistics.median(r.bandwidth for r in big)
            measured.append(f"all-reduce inside a node {rate_text(out['intra_bandwidth'])} bus bandwidth "
                            f"({size_text(big[0].bytes)}, {big[0].ranks} GPUs)")
        if (small := at(rows("p2p", "intra"), False)):
            out["intra_latency_s"] = statistics.median(r.seconds for r in small)
            measured.append(f"latency inside a node {format_seconds(out['intra_latency_s'])}")
        if (big := at(rows("p2p", "inter"), True)):
            out["inter_flow_bandwidth"] = max(r.bandwidth for r in big)
            measured.append(f"one flow between nodes {rate_text(out['inter_flow_bandwidth'])}")
        if (big := at(rows("p2p_all", "inter"), True)):
            out["inter_bandwidth"] = max(max(r.bandwidth for r in big), out.get("inter_flow_bandwidth", 0.0))
            measured.append(f"a node's GPUs sending at once {rate_text(out['inter_bandwidth'])}")
        if (small := at(rows("p2p", "inter"), False)):
            out["inter_latency_s"] = min(r.seconds for r in small)
            measured.append(f"latency between nodes {format_seconds(out['inter_latency_s'])}")
        return MeasuredLinks(**out, measured=tuple(measured), source=self.summary())

    def match(self, gpu: str, gpus_per_node: int) -> int | None:
        """The kind of node a scenario's group (its GPU, its GPUs per node) is, if measured."""
        for i, group in enumerate(self.groups):
            if group.gpus_per_node == gpus_per_node and group.gpu in (gpu, ANY_GPU):
                return i
        return None

    def to_dict(self) -> dict:
        return {"format": NETWORK_FORMAT, "backend": self.backend, "device": self.device,
                "measured_at": self.measured_at, "software": dict(self.software), "timing": dict(self.timing),
                "world_size": self.world_size, "simulated_nodes": self.simulated_nodes, "complete": self.complete,
                "rows": len(self.rows),
                "groups": [{"name": g.name, "gpu": g.gpu, "device_name": g.device_name,
                            "gpus_per_node": g.gpus_per_node, "nodes": list(g.nodes)} for g in self.groups],
                "measurements": [row.to_dict() for row in self.rows]}

    def to_yaml(self) -> str:
        lines = [f"amp-tui network profile: {replace(self, source='this file').summary()}"]
        for i, group in enumerate(self.groups):
            links = self.links(i)
            lines.append(f"{group.name} ({', '.join(group.nodes[:4])}{' ...' if len(group.nodes) > 4 else ''}): "
                         + ("; ".join(links.measured) or "nothing measured"))
        return "".join(f"# {line}\n" for line in lines) + dump_yaml(self.to_dict())


def rate_text(bytes_per_s: float) -> str:
    """A measured rate to three figures, in GB/s (8 Gbps each)."""
    return f"{bytes_per_s / 1e9:.3g} GB/s"


def size_text(num_bytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:g} {unit}"
    return f"{num_bytes:g} B"


def _names(value: object, where: str, limit: int = 100_000) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > limit:
        raise SpecError(where, value, "expected a list of names")
    return tuple(check_name(v, f"{where}[{i}]") for i, v in enumerate(value))


def _row(value: object, where: str, groups: int) -> NetworkRow:
    if not isinstance(value, dict):
        raise SpecError(where, value, f"expected {{{', '.join(_ROW_KEYS)}}}")
    for key in value:
        if key not in _ROW_KEYS:
            raise SpecError(f"{where}.{key}", value[key], f"unknown field; allowed: {', '.join(_ROW_KEYS)}")
    for key in _ROW_KEYS:
        if key not in value:
            raise SpecError(f"{where}.{key}", None, "required (is the file cut short?)")
    test, scope = value["test"], value["scope"]
    if test not in TESTS:
        raise SpecError(f"{where}.test", test, f"expected one of {', '.join(TESTS)}")
    if scope not in SCOPES:
        raise SpecError(f"{where}.scope", scope, f"expected one of {', '.join(SCOPES)}")
    kinds = value["groups"]
    if not isinstance(kinds, list) or not 1 <= len(kinds) <= 2:
        raise SpecError(f"{where}.groups", kinds, "expected one or two group numbers")
    kinds = tuple(parse_int(k, f"{where}.groups", minimum=0, maximum=groups - 1) for k in kinds)
    ranks = parse_int(value["ranks"], f"{where}.ranks", minimum=2, maximum=1_000_000)
    if test in ("p2p", "p2p_all") and ranks % 2:
        raise SpecError(f"{where}.ranks", ranks, f"a {test} test pairs ranks: an even number")
    return NetworkRow(test, scope, kinds, _names(value["nodes"], f"{where}.nodes"), ranks,
                      float(parse_number(value["bytes"], f"{where}.bytes", positive=True)),
                      float(parse_number(value["seconds"], f"{where}.seconds", positive=True)))


def parse_network(data: object, source: str = "inline") -> NetworkProfile:
    """A network profile document; errors name `source` (the file) and the field."""
    where = f"network profile {source}" if source != "inline" else "cluster.network"
    if data is None:
        raise SpecError(where, None, "holds no network profile: empty, or cut short before its first field")
    if not isinstance(data, dict):
        raise SpecError(where, type(data).__name__, f"expected a network profile (format: {NETWORK_FORMAT})")
    if data.get("format") != NETWORK_FORMAT:
        raise SpecError(f"{where}.format", data.get("format"), f"not an amp-tui network profile; expected format: "
                                                               f"{NETWORK_FORMAT} (written by `amp-tui profile --network`)")
    for key in data:
        if key not in _HEADER:
            raise SpecError(f"{where}.{key}", data[key], f"unknown field; allowed: {', '.join(_HEADER)}")
    for key in ("backend", "device", "measured_at", "world_size", "complete", "rows", "groups", "measurements"):
        if key not in data:
            raise SpecError(f"{where}.{key}", None, "required (is the file cut short?)")
    if data["device"] not in ("cuda", "cpu") or data["backend"] not in ("nccl", "gloo"):
        raise SpecError(f"{where}.device", f"{data['device']}/{data['backend']}", "expected cuda/nccl or cpu/gloo")
    for key in ("complete", "simulated_nodes"):
        if not isinstance(data.get(key, False), bool):
            raise SpecError(f"{where}.{key}", data[key], "expected true or false")
    measured_at = check_name(str(data["measured_at"]), f"{where}.measured_at")
    try:
        datetime.fromisoformat(measured_at)
    except ValueError:
        raise SpecError(f"{where}.measured_at", measured_at, "expected an ISO date and time") from None
    groups = data["groups"]
    if not isinstance(groups, list) or not 1 <= len(groups) <= MAX_GROUPS:
        raise SpecError(f"{where}.groups", groups, f"expected a list of 1 to {MAX_GROUPS} kinds of node")
    parsed_groups = []
    for i, group in enumerate(groups):
        at = f"{where}.groups[{i}]"
        if not isinstance(group, dict) or not {"gpu", "gpus_per_node", "nodes"} <= set(group):
            raise SpecError(at, group, "expected {name, gpu, device_name, gpus_per_node, nodes}")
        parsed_groups.append(NetworkGroup(
            check_name(group.get("name", f"group {i}"), f"{at}.name"), check_name(group["gpu"], f"{at}.gpu"),
            check_name(group.get("device_name", ""), f"{at}.device_name", limit=MAX_TEXT_CHARS),
            parse_int(group["gpus_per_node"], f"{at}.gpus_per_node", maximum=1024),
            _names(group["nodes"], f"{at}.nodes")))
    rows = data["measurements"]
    if not isinstance(rows, list) or len(rows) > MAX_ROWS:
        raise SpecError(f"{where}.measurements", type(rows).__name__, f"expected a list of at most {MAX_ROWS:,} rows")
    parsed = tuple(_row(row, f"{where}.measurements[{i}]", len(parsed_groups)) for i, row in enumerate(rows))
    expected = parse_int(data["rows"], f"{where}.rows", minimum=0, maximum=MAX_ROWS)
    if expected != len(parsed):
        raise SpecError(f"{where}.rows", expected, f"the file holds {len(parsed)} rows: it was cut short or edited; "
                                                   "measure again with `amp-tui profile --network`")
    return NetworkProfile(
        backend=data["backend"], device=data["device"], measured_at=measured_at,
        software=name_pairs(data.get("software"), f"{where}.software"),
        timing=name_pairs(data.get("timing"), f"{where}.timing"),
        world_size=parse_int(data["world_size"], f"{where}.world_size", maximum=10_000_000),
        simulated_nodes=data.get("simulated_nodes", False), complete=data["complete"], groups=tuple(parsed_groups),
        rows=parsed, source=source)


def load_network(value: object, base_dir: Path | None = None) -> NetworkProfile:
    """A cluster's `network:`: a path (relative to the scenario file's folder) or the document inline."""
    if isinstance(value, dict):
        return parse_network(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT_CHARS:
        raise SpecError("cluster.network", value, "expected a network profile's path (written by "
                                                  "`amp-tui profile --network`)")
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    try:
        data = load_yaml_file(path)
    except SpecError as err:
        raise SpecError("cluster.network", value, err.reason) from None
    return parse_network(data, source=check_name(value, "cluster.network", limit=MAX_TEXT_CHARS))


def link_report(cluster) -> list[dict]:
    """Per node group of a cluster (spec/scenario.py's Cluster): which of its links the cluster's
    network profile measured, and which keep the catalog's figures: {group, label, measured, catalog}."""
    out = []
    for index, group in enumerate(cluster.nodes):
        m = group.measured or MeasuredLinks()
        catalog = []
        if group.gpus_per_node > 1 and m.intra_bandwidth is None:
            catalog.append(f"inside a node ({group.intra_link_class})")
        if cluster.num_nodes > 1 and m.inter_flow_bandwidth is None and m.inter_bandwidth is None:
            catalog.append(f"between nodes ({group.inter_link_class})")
        out.append({"group": index, "label": f"{group.count} x {group.label}", "measured": list(m.measured),
                    "catalog": catalog})
    return out
