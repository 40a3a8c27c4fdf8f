"""The serving view of a scenario: the `serving:` section and the cluster fields serve mode reads.

    serving: {precision: fp16, prompt_tokens: 763, output_tokens: 232, prompt_tokens_in_flight: 923,
              request_rate: offline, kv_fill: 0.8}
    cluster:
      nodes:
        - {gpu: A100-40GB, count: 4, ..., region: r0, serving_profile: helix-llama2-70b-a100,
           serving_throughput: {1: 23833, 2: 11384}}
      links:                       # between regions, per pair of machines (as Helix's cluster files)
        - {between: [r0, r1], bandwidth: 100 Mbps, latency: 50 ms}
      coordinator: {region: r0}    # or {bandwidth: ..., latency: ...}
      hop_latency: 1 ms            # one hop between machines of a region, and to a coordinator there

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
from amp_tui.serving.profile import ServingProfile, analytic_profile, parse_profile

DEFAULT_REGION = "default"
TOKEN_ID_BYTES = 2           # what Helix sends per token between the coordinator and a machine
MAX_SEQUENCE_TOKENS = 10_000_000
MAX_REQUEST_RATE = 1e6          # requests/s
_SERVING_KEYS = ("precision", "prompt_tokens", "output_tokens", "prompt_tokens_in_flight", "request_rate", "kv_fill",
                 "machine_kv_fill",
                 "benchmark", "output_token_deciles", "prompt_token_deciles")
_BENCHMARK_KEYS = ("warmup_s", "window_s", "initial_requests")
OFFLINE = "offline"


# Serving holds its weights at the training tensors' width; NVFP4 weights (half a byte) are not modelled.
_SERVING_PRECISIONS = tuple(p for p in PRECISIONS if p != "fp4")


@dataclass(frozen=True)
class Serving:
    """The workload and how it arrives.

    prompt_tokens, output_tokens: averages per request. prompt_tokens_in_flight: the average prompt of
    the requests being served at a moment; requests with long answers stay longer, and where long
    answers follow long prompts (Azure's conversation trace: 923 against 763) the KV cache holds
    longer prompts than the average (default: prompt_tokens, lengths independent). request_rate:
    requests/s, or None for offline (as many requests as the KV cache admits, Helix's offline mode).
    kv_fill: the share of the KV cache admission fills, reserving prompt + output tokens per request
    (Helix's offline feeder stops at 0.8 of the most used layer). machine_kv_fill: the share of one
    machine's KV cache its router fills before it sends requests elsewhere (Helix's expected_kv_hwm,
    0.85 in its offline runs; model/kv.py). benchmark (offline only): predict
    what a closed-loop benchmark measures over [warmup_s, warmup_s + window_s], starting from
    initial_requests requests, each finished prompt admitting one more (Helix's offline feeder);
    None: the steady state.
    """

    precision: str = "fp16"
    prompt_tokens: int = 750
    output_tokens: int = 240
    prompt_tokens_in_flight: int | None = None
    request_rate: float | None = None
    kv_fill: float = 0.8
    machine_kv_fill: float = 0.85
    benchmark: tuple[float, float, int] | None = None    # (warmup_s, window_s, initial_requests)
    # The requests sorted by output length in ten equal parts: each part's mean output and mean prompt.
    output_token_deciles: tuple[float, ...] | None = None
    prompt_token_deciles: tuple[float, ...] | None = None

    @property
    def bytes_per_element(self) -> int:
        return PRECISIONS[self.precision]

    @property
    def held_prompt_tokens(self) -> float:
        """The mean prompt of the requests in flight: given, or from the deciles (each part held for as
        long as its answers take), or the mean prompt."""
        if self.prompt_tokens_in_flight is not None:
            return self.prompt_tokens_in_flight
        if self.output_token_deciles is not None and self.prompt_token_deciles is not None:
            weights = [o + 1 for o in self.output_token_deciles]
            return sum(w * p for w, p in zip(weights, self.prompt_token_deciles)) / sum(weights)
        return self.prompt_tokens

    def classes(self) -> list[tuple[float, float, float]]:
        """(share, prompt tokens, output tokens) of each kind of request: the deciles, or one kind."""
        if self.output_token_deciles is None:
            return [(1.0, float(self.prompt_tokens), float(self.output_tokens))]
        prompts = self.prompt_token_deciles or (self.prompt_tokens,) * 10
        return [(0.1, float(p), float(o)) for p, o in zip(prompts, self.output_token_deciles)]

    def to_dict(self) -> dict:
        out = {"precision": self.precision, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens}
        if self.prompt_tokens_in_flight is not None:
            out["prompt_tokens_in_flight"] = self.prompt_tokens_in_flight
        out["request_rate"] = OFFLINE if self.request_rate is None else self.request_rate
        out["kv_fill"] = self.kv_fill
        out["machine_kv_fill"] = self.machine_kv_fill
        if self.benchmark is not None:
            out["benchmark"] = dict(zip(_BENCHMARK_KEYS, self.benchmark))
        for key in ("output_token_deciles", "prompt_token_deciles"):
            if getattr(self, key) is not None:
                out[key] = list(getattr(self, key))
        return out


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
    profile: ServingProfile | None = None  # from serving_profile; None: modelled (serving_profile_of)


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
    hop_latency_s: float = 0.0          # one hop between machines of a region (cluster.hop_latency)
    serving_defaults: bool = False      # a training scenario without a serving section: Serving()'s defaults

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
        out.update(cluster=self.cluster.to_dict(), model=self.model.to_dict())
        if self.serving_defaults:
            out["training"] = {}     # read back as a training scenario served with the defaults
        else:
            out["serving"] = self.serving.to_dict()
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
        raise SpecError(field_name, value, f"expected a mapping with {', '.join(_SERVING_KEYS)}")
    for key in value:
        if key not in _SERVING_KEYS:
            raise SpecError(f"{field_name}.{key}", value[key], f"unknown serving field; allowed: {', '.join(_SERVING_KEYS)}")
    precision = value.get("precision", "fp16")
    if precision not in _SERVING_PRECISIONS:
        raise SpecError(f"{field_name}.precision", precision, f"expected one of {', '.join(_SERVING_PRECISIONS)}")
    rate = value.get("request_rate", OFFLINE)
    benchmark = _benchmark(value.get("benchmark"), f"{field_name}.benchmark")
    if benchmark is not None and rate != OFFLINE:
        raise SpecError(f"{field_name}.benchmark", value["benchmark"], "only for offline serving (request_rate: offline)")
    in_flight = value.get("prompt_tokens_in_flight")
    return Serving(precision=precision,
                   prompt_tokens=parse_int(value.get("prompt_tokens", 750), f"{field_name}.prompt_tokens",
                                           maximum=MAX_SEQUENCE_TOKENS),
                   output_tokens=parse_int(value.get("output_tokens", 240), f"{field_name}.output_tokens",
                                           maximum=MAX_SEQUENCE_TOKENS),
                   prompt_tokens_in_flight=(None if in_flight is None else
                                            parse_int(in_flight, f"{field_name}.prompt_tokens_in_flight",
                                                      maximum=MAX_SEQUENCE_TOKENS)),
                   request_rate=(None if rate == OFFLINE else
                                 float(parse_number(rate, f"{field_name}.request_rate", positive=True,
                                                    maximum=MAX_REQUEST_RATE))),
                   kv_fill=float(parse_number(value.get("kv_fill", 0.8), f"{field_name}.kv_fill", positive=True,
                                              maximum=1)),
                   machine_kv_fill=float(parse_number(value.get("machine_kv_fill", 0.85),
                                                      f"{field_name}.machine_kv_fill", positive=True, maximum=1)),
                   benchmark=benchmark,
                   output_token_deciles=_deciles(value.get("output_token_deciles"), f"{field_name}.output_token_deciles"),
                   prompt_token_deciles=_deciles(value.get("prompt_token_deciles"), f"{field_name}.prompt_token_deciles"))


def _deciles(value: object, field_name: str) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 10:
        raise SpecError(field_name, value, "expected ten numbers: the mean of each tenth of the requests, "
                                           "sorted by output length")
    return tuple(float(parse_number(v, f"{field_name}[{i}]", positive=True, maximum=MAX_SEQUENCE_TOKENS))
                 for i, v in enumerate(value))


def _benchmark(value: object, field_name: str) -> tuple[float, float, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError(field_name, value, f"expected a mapping with {', '.join(_BENCHMARK_KEYS)}")
    for key in value:
        if key not in _BENCHMARK_KEYS:
            raise SpecError(f"{field_name}.{key}", value[key], f"unknown field; allowed: {', '.join(_BENCHMARK_KEYS)}")
    return (float(parse_number(value.get("warmup_s", 60), f"{field_name}.warmup_s", minimum=0, maximum=86400)),
            float(parse_number(value.get("window_s", 600), f"{field_name}.window_s", positive=True, maximum=86400)),
            parse_int(value.get("initial_requests", 20), f"{field_name}.initial_requests", maximum=1_000_000))


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
        profile = (parse_profile(extra["serving_profile"], f"{where}.serving_profile")
                   if "serving_profile" in extra else None)
        groups.append(MachineGroup(index=i, count=node.count, label=node.label, region=region, gpu=node.gpu,
                                   gpus_per_node=node.gpus_per_node, nic_bandwidth=node.inter_node_bandwidth,
                                   measured=measured, profile=profile))
    return tuple(groups)


def serving_profile_of(group: MachineGroup, model: ServingModel, precision: str) -> ServingProfile:
    """The group's measured profile, or one modelled from its GPU's datasheet."""
    return group.profile or analytic_profile(group.gpu, group.gpus_per_node, model, precision)


def _check_profiles(groups: tuple[MachineGroup, ...], model: Model) -> None:
    for group in groups:
        profile = group.profile
        if profile is not None and profile.model and profile.model != model.name:
            raise SpecError(f"cluster.nodes[{group.index}].serving_profile", profile.name,
                            f"measured with {profile.model}, but the scenario serves {model.name}; remove it to "
                            "model this machine from its GPU's datasheet")


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
    # a training scenario serves its model on its cluster with the serving defaults (the dashboard's `v` too)
    defaults = "serving" not in value
    if defaults and "training" not in value:
        raise SpecError("serving", None, "required; this scenario has neither a serving nor a training section "
                                         "(give serving: {precision, prompt_tokens, output_tokens})")
    for key in ("cluster", "model"):
        if key not in value:
            raise SpecError(key, None, "required")
    serving = parse_serving(value.get("serving"))
    cluster = parse_cluster(value["cluster"])
    model = parse_model(value["model"], serving.bytes_per_element)
    groups = machine_groups(cluster)
    regions = tuple(dict.fromkeys(g.region for g in groups))
    links = parse_links(cluster.serving_fields.get("links"), regions)
    coordinator = parse_coordinator(cluster.serving_fields.get("coordinator"), regions)
    hop_latency = _latency(cluster.serving_fields.get("hop_latency", 0), "cluster.hop_latency")
    serving_model(model, serving.bytes_per_element)   # refuse a model without a hidden size now
    _check_profiles(groups, model)
    return ServingScenario(name=str(value.get("name", "scenario")), description=str(value.get("description", "")),
                           cluster=cluster, model=model, serving=serving, groups=groups, regions=regions,
                           links=links, coordinator=coordinator, hop_latency_s=hop_latency, serving_defaults=defaults)


def defaults_note(scenario: ServingScenario) -> str | None:
    """What serve says when it serves a training scenario (no serving section), else None."""
    if not scenario.serving_defaults:
        return None
    s = scenario.serving
    unmeasured = [g.label for g in scenario.groups if g.profile is None]
    how = (f"; {', '.join(dict.fromkeys(unmeasured))} modelled from the GPU's datasheet (no serving_profile)"
           if unmeasured else "")
    return (f"{scenario.name} has no serving section: serving its model on its cluster with the defaults "
            f"({s.precision}, {s.prompt_tokens} prompt + {s.output_tokens} output tokens per request, offline){how}")


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


def serving_scenario_from(scenario) -> ServingScenario:
    """Serve the model and cluster of a training scenario (the dashboard's `v`): its serving section if it
    has one, else the defaults; machines without serving_profile are modelled from their GPU's datasheet."""
    data = scenario.to_dict()
    payload = {"name": data.get("name", "scenario"), "cluster": data["cluster"], "model": data["model"],
               "training": data.get("training") or {}}
    if data.get("serving"):
        payload["serving"] = data["serving"]
    return parse_serving_scenario(payload)


def parse_window(text: str) -> float | None:
    """`serve --window`: seconds of the benchmark window, or None for 'steady' (the steady state)."""
    if str(text).strip().lower() == "steady":
        return None
    return float(parse_number(text, "--window", positive=True, maximum=86400))


def with_window(scenario: ServingScenario, window_s: float | None) -> ServingScenario:
    """The scenario ranked over a benchmark window of `window_s` seconds (its warm-up and initial requests, or
    Helix's 60 s and 20), or at steady state (None). Offline serving only."""
    from dataclasses import replace

    if window_s is None:
        return replace(scenario, serving=replace(scenario.serving, benchmark=None))
    if scenario.serving.request_rate is not None:
        raise SpecError("--window", window_s, "a benchmark window is for offline serving (request_rate: offline)")
    warmup, _, initial = scenario.serving.benchmark or (60.0, 0.0, 20)
    return replace(scenario, serving=replace(scenario.serving, benchmark=(warmup, float(window_s), initial)))


def with_group_count(scenario: ServingScenario, group: int, count: int) -> ServingScenario:
    """A new scenario with one node group's machine count changed (the dashboard's live edit)."""
    data = scenario.to_dict()
    data["cluster"]["nodes"][group]["count"] = count
    return parse_serving_scenario(data)
