"""The serving view of a scenario: the `serving:` section and the cluster fields serve mode reads.

    serving: {precision: fp16, prompt_tokens: 750, output_tokens: 240}
    cluster:
      nodes:
        - {gpu: A100-40GB, count: 4, ..., region: r0, serving_throughput: {1: 23833, 2: 11384}}
      links:                       # between regions, per pair of machines (as Helix's cluster files)
        - {between: [r0, r1], bandwidth: 100 Mbps, latency: 50 ms}
      coordinator: {region: r0}    # or {bandwidth: ..., latency: ...}

Training reads none of these; core/spec/scenario.py keeps them as written and this module checks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import parse_bandwidth, parse_int, parse_number
from amp_tui.core.base.yamlio import load_yaml_file
from amp_tui.core.spec.hardware import GPU
from amp_tui.core.spec.model import Model, parse_model
from amp_tui.core.spec.presets import load_preset, preset_names
from amp_tui.core.spec.scenario import PRECISIONS, Cluster, parse_cluster

DEFAULT_REGION = "default"
TOKEN_ID_BYTES = 2           # what Helix sends per token between the coordinator and a machine
_SERVING_KEYS = ("precision", "prompt_tokens", "output_tokens")


# Serving holds its weights at the training tensors' width; NVFP4 weights (half a byte) are not modelled.
_SERVING_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp4")


@dataclass(frozen=True)
class Serving:
    precision: str = "fp16"
    prompt_tokens: int = 750     # average per request
    output_tokens: int = 240

    @property
    def bytes_per_element(self) -> int:
        return PRECISIONS[self.precision]

    def to_dict(self) -> dict:
        return {"precision": self.precision, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class MachineGroup:
    """`count` interchangeable machines of one node group, as serve mode sees them."""

    index: int                          # position in cluster.nodes
    count: int
    label: str
    region: str
    gpu: GPU
    gpus_per_node: int
    nic_bandwidth: float                # bytes/s: the group's inter_node_bandwidth
    measured: tuple[float, ...] | None  # tokens/s holding k = 1.. layers, from serving_throughput


@dataclass(frozen=True)
class Link:
    bandwidth: float    # bytes/s between one machine of each region
    latency_s: float


@dataclass(frozen=True)
class Coordinator:
    region: str | None = None
    bandwidth: float | None = None
    latency_s: float = 0.0


@dataclass(frozen=True)
class ServingModel:
    """The decoder blocks a machine can hold, and what one token costs in each."""

    name: str
    num_layers: int
    hidden_size: int
    params_per_layer: float
    kv_bytes_per_token_layer: float     # keys and values of one token in one layer
    bytes_per_element: int

    @property
    def activation_bytes_per_token(self) -> float:
        return self.hidden_size * self.bytes_per_element

    @property
    def weight_bytes_per_layer(self) -> float:
        return self.params_per_layer * self.bytes_per_element


@dataclass(frozen=True)
class ServingScenario:
    name: str
    cluster: Cluster
    model: Model
    serving: Serving
    groups: tuple[MachineGroup, ...]
    regions: tuple[str, ...]
    links: dict = field(hash=False)     # frozenset({a, b}) -> Link
    coordinator: Coordinator = Coordinator()
    description: str = ""

    @property
    def serving_model(self) -> ServingModel:
        return serving_model(self.model, self.serving.bytes_per_element)

    @property
    def num_machines(self) -> int:
        return sum(g.count for g in self.groups)

    def to_dict(self) -> dict:
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out.update(cluster=self.cluster.to_dict(), model=self.model.to_dict(), serving=self.serving.to_dict())
        return out


def serving_model(model: Model, bytes_per_element: int) -> ServingModel:
    blocks = [layer for layer in model.layers if layer.kind == "block"] or list(model.layers)
    hidden = int(model.shape.get("hidden_size") or blocks[0].width or 0)
    if hidden <= 0:
        raise SpecError("model.hidden_size", None, "required for serving (sets the bytes sent per token)")
    heads = model.shape.get("num_heads")
    kv_dim = hidden * model.shape.get("num_kv_heads", heads) / heads if heads else hidden
    return ServingModel(name=model.name, num_layers=len(blocks), hidden_size=hidden,
                        params_per_layer=max(layer.params for layer in blocks),
                        kv_bytes_per_token_layer=2 * kv_dim * bytes_per_element,
                        bytes_per_element=bytes_per_element)


def parse_serving(value: object, field_name: str = "serving") -> Serving:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a mapping with precision, prompt_tokens, output_tokens")
    for key in value:
        if key not in _SERVING_KEYS:
            raise SpecError(f"{field_name}.{key}", value[key], f"unknown serving field; allowed: {', '.join(_SERVING_KEYS)}")
    precision = value.get("precision", "fp16")
    if precision not in _SERVING_PRECISIONS:
        raise SpecError(f"{field_name}.precision", precision, f"expected one of {', '.join(_SERVING_PRECISIONS)}")
    return Serving(precision=precision,
                   prompt_tokens=parse_int(value.get("prompt_tokens", 750), f"{field_name}.prompt_tokens"),
                   output_tokens=parse_int(value.get("output_tokens", 240), f"{field_name}.output_tokens"))


def _region_name(value: object, field_name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field_name, value, "expected a region name")
    return value


def _latency(value: object, field_name: str) -> float:
    if isinstance(value, str) and value.strip().endswith("ms"):
        return float(parse_number(value.strip()[:-2], field_name, minimum=0)) / 1000
    if isinstance(value, str) and value.strip().endswith("s"):
        return float(parse_number(value.strip()[:-1], field_name, minimum=0))
    return float(parse_number(value, field_name, minimum=0))


def _measured(value: object, field_name: str) -> tuple[float, ...]:
    if not isinstance(value, dict) or not value:
        raise SpecError(field_name, value, "expected a map {layers: tokens_per_s}, e.g. {1: 5709, 2: 2434}")
    table = {parse_int(k, f"{field_name}.{k}"): float(parse_number(v, f"{field_name}.{k}", positive=True))
             for k, v in value.items()}
    most = max(table)
    missing = [k for k in range(1, most + 1) if k not in table]
    if missing:
        raise SpecError(f"{field_name}.{missing[0]}", None, f"missing; give every layer count from 1 to {most}")
    return tuple(table[k] for k in range(1, most + 1))


def machine_groups(cluster: Cluster, field_name: str = "cluster") -> tuple[MachineGroup, ...]:
    groups = []
    for i, node in enumerate(cluster.nodes):
        where = f"{field_name}.nodes[{i}]"
        extra = node.serving_fields
        region = _region_name(extra["region"], f"{where}.region") if "region" in extra else DEFAULT_REGION
        measured = (_measured(extra["serving_throughput"], f"{where}.serving_throughput")
                    if "serving_throughput" in extra else None)
        groups.append(MachineGroup(index=i, count=node.count, label=node.label, region=region, gpu=node.gpu,
                                   gpus_per_node=node.gpus_per_node, nic_bandwidth=node.inter_node_bandwidth,
                                   measured=measured))
    return tuple(groups)


def parse_links(value: object, regions: tuple[str, ...], field_name: str = "cluster.links") -> dict:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise SpecError(field_name, value, "expected a list of {between: [A, B], bandwidth, latency}")
    links: dict = {}
    for i, entry in enumerate(value):
        where = f"{field_name}[{i}]"
        if not isinstance(entry, dict):
            raise SpecError(where, entry, "expected {between: [A, B], bandwidth, latency}")
        for key in entry:
            if key not in ("between", "bandwidth", "latency"):
                raise SpecError(f"{where}.{key}", entry[key], "unknown link field; allowed: between, bandwidth, latency")
        between = entry.get("between")
        if not isinstance(between, list) or len(between) != 2 or between[0] == between[1]:
            raise SpecError(f"{where}.between", between, "expected two different region names")
        for name in between:
            if _region_name(name, f"{where}.between") not in regions:
                raise SpecError(f"{where}.between", name, f"no node group is in this region; regions: {', '.join(regions)}")
        if "bandwidth" not in entry:
            raise SpecError(f"{where}.bandwidth", None, "required")
        key = frozenset(between)
        if key in links:
            raise SpecError(f"{where}.between", between, "a link between these regions is already given")
        links[key] = Link(bandwidth=parse_bandwidth(entry["bandwidth"], f"{where}.bandwidth"),
                          latency_s=_latency(entry.get("latency", 0), f"{where}.latency"))
    return links


def parse_coordinator(value: object, regions: tuple[str, ...], field_name: str = "cluster.coordinator") -> Coordinator:
    if value is None:
        return Coordinator(region=regions[0])
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected {region: NAME} or {bandwidth: ..., latency: ...}")
    for key in value:
        if key not in ("region", "bandwidth", "latency"):
            raise SpecError(f"{field_name}.{key}", value[key], "unknown coordinator field; allowed: region, bandwidth, latency")
    if ("region" in value) == ("bandwidth" in value):
        raise SpecError(field_name, value, "give either region or bandwidth (with latency), not both or neither")
    if "region" in value:
        region = _region_name(value["region"], f"{field_name}.region")
        if region not in regions:
            raise SpecError(f"{field_name}.region", region, f"no node group is in this region; regions: {', '.join(regions)}")
        return Coordinator(region=region)
    return Coordinator(bandwidth=parse_bandwidth(value["bandwidth"], f"{field_name}.bandwidth"),
                       latency_s=_latency(value.get("latency", 0), f"{field_name}.latency"))


def parse_serving_scenario(value: object) -> ServingScenario:
    if not isinstance(value, dict):
        raise SpecError("scenario", type(value).__name__, "expected a mapping with cluster, model and serving")
    for key in value:
        if key not in ("name", "description", "cluster", "model", "serving", "training", "search", "format"):
            raise SpecError(f"scenario.{key}", value[key], "unknown scenario field")
    if "serving" not in value:
        raise SpecError("serving", None, "required; this scenario has no serving section (give serving: {precision, "
                                         "prompt_tokens, output_tokens})")
    for key in ("cluster", "model"):
        if key not in value:
            raise SpecError(key, None, "required")
    serving = parse_serving(value["serving"])
    cluster = parse_cluster(value["cluster"])
    model = parse_model(value["model"], serving.bytes_per_element)
    groups = machine_groups(cluster)
    regions = tuple(dict.fromkeys(g.region for g in groups))
    links = parse_links(cluster.serving_fields.get("links"), regions)
    coordinator = parse_coordinator(cluster.serving_fields.get("coordinator"), regions)
    serving_model(model, serving.bytes_per_element)   # refuse a model without a hidden size now
    return ServingScenario(name=str(value.get("name", "scenario")), description=str(value.get("description", "")),
                           cluster=cluster, model=model, serving=serving, groups=groups, regions=regions,
                           links=links, coordinator=coordinator)


def load_serving_scenario(name_or_path: str) -> ServingScenario:
    """A serving scenario preset, a scenario file, or a saved serving placement (its scenario)."""
    from pathlib import Path

    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        data = load_yaml_file(path)
        if isinstance(data, dict) and isinstance(data.get("scenario"), dict):
            data = data["scenario"]
        return parse_serving_scenario(data)
    if name_or_path in preset_names("scenarios"):
        return parse_serving_scenario(load_preset("scenarios", name_or_path))
    raise SpecError("scenario", name_or_path,
                    f"neither a file nor a scenario preset; presets: {', '.join(preset_names('scenarios'))}")


def with_group_count(scenario: ServingScenario, group: int, count: int) -> ServingScenario:
    """A new scenario with one node group's machine count changed (the dashboard's live edit)."""
    data = scenario.to_dict()
    data["cluster"]["nodes"][group]["count"] = count
    return parse_serving_scenario(data)
