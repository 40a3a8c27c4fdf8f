"""Scenario specs: a cluster, a model and training settings, validated once at the edge.

Specs are frozen; an edit builds a new spec (`dataclasses.replace`) and re-validates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_GPUS, MAX_TEXT_CHARS, check_name
from amp_tui.core.base.units import exact_bandwidth, exact_bytes, parse_bandwidth, parse_bytes, parse_int, parse_number
from amp_tui.core.base.yamlio import load_yaml_document, path_exists
from amp_tui.core.spec.frameworks import COMPILE_MODES, FRAMEWORKS, engine_of
from amp_tui.core.spec.hardware import GPU, gpu_catalog, instance_catalog, parse_gpu
from amp_tui.core.spec.model import Model, parse_model
from amp_tui.core.spec.network import MeasuredLinks, NetworkProfile, load_network
from amp_tui.core.spec.profiles import check_profile_fits
from amp_tui.core.spec.params import LINK_CLASSES, Calibration, ModelParams, parse_calibration
from amp_tui.core.spec.presets import load_preset, preset_names

# Bytes per element of weights and activations; fp8 and fp4 (NVFP4) train with bf16 tensors and
# low-precision matrix multiplies; tf32 is fp32 training whose matrix multiplies run on TF32 tensor
# cores (torch.backends.cuda.matmul.allow_tf32, NGC containers' default; PyTorch's own is off since
# 1.12), at the GPU's TF32 rate where it has one (Ampere and later), else as fp32.
PRECISIONS = {"fp16": 2, "bf16": 2, "fp32": 4, "tf32": 4, "fp8": 2, "fp4": 2}
FP32_PRECISIONS = ("fp32", "tf32")      # fp32 tensors, weights and optimizer state
OPTIMIZERS = ("adam", "sgd")
SCHEDULES = ("1f1b", "gpipe")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)
# Bytes per parameter for weights + gradients + optimizer state before ZeRO sharding. Mixed
# precision keeps fp32 master weights beside the 16-bit ones: Adam is 2 + 2 + 4 + 4 + 4 = 16
# (weights, gradients, master, two moments); SGD with momentum 2 + 2 + 4 + 4 (fp32: 4 + 4 + 4). The
# least any engine keeps: what each really holds (fp32 main gradients, buckets) is the cost model's
# (costmodel/memory.py engine_state); a stated training.state_bytes_per_param replaces it.
DEFAULT_STATE_BYTES = {("adam", True): 16, ("adam", False): 16, ("sgd", True): 12, ("sgd", False): 12}
AUTO = "auto"   # a training technique the search chooses per strategy
FULL_SHARD = "full"   # training.data_parallel_shard: ZeRO shards over every data-parallel rank

# Cluster fields for serve mode (amp_tui.serving.spec checks them); training carries them unread.
SERVING_NODE_FIELDS = ("region", "serving_throughput", "serving_profile")
SERVING_CLUSTER_FIELDS = ("links", "coordinator", "hop_latency")


@dataclass(frozen=True)
class NodeGroup:
    """`count` identical nodes. Bandwidths in bytes per second."""

    count: int
    gpu: GPU
    gpus_per_node: int
    intra_node_bandwidth: float
    inter_node_bandwidth: float
    instance: str | None = None
    intra_node_link: str = ""     # link class (params.LINK_CLASSES); "" infers it from the bandwidth
    inter_node_link: str = ""
    # What the cluster's network profile measured for this kind of node (spec/network.py); its
    # figures replace the catalog's wherever a collective or a send is priced (link_figures).
    measured: MeasuredLinks | None = None

    @property
    def intra_link_class(self) -> str:
        """The class stated (`intra_node_link`), else NVLink/NVSwitch for 20 GB/s and more between
        GPUs and PCIe below; PCIe between GPUs without peer-to-peer (GeForce) goes through host
        memory."""
        link = self.intra_node_link or ("nvlink" if self.intra_node_bandwidth >= 20e9 else "pcie")
        return "host" if link == "pcie" and not self.gpu.peer_to_peer else link

    @property
    def inter_link_class(self) -> str:
        """RDMA fabrics (InfiniBand, EFA, RoCE) come at 100 Gbps and more per node; below is TCP."""
        return self.inter_node_link or ("infiniband" if self.inter_node_bandwidth >= 12.5e9 else "ethernet")
    price_per_hour: float | None = None     # US dollars per node-hour; None: unknown (see pricing.py)
    # Fields only serve mode reads (region, serving_throughput, serving_profile), kept as written; amp_tui.serving
    # validates them, training ignores them.
    serving_fields: dict = field(default_factory=dict, hash=False)

    @property
    def label(self) -> str:
        return self.instance or f"{self.gpus_per_node}x{self.gpu.name}"

    @property
    def num_gpus(self) -> int:
        return self.count * self.gpus_per_node

    def hardware_key(self) -> tuple:
        """Groups with equal keys are interchangeable in a placement."""
        return (self.gpu, self.gpus_per_node, self.intra_node_bandwidth, self.inter_node_bandwidth, self.measured)

    def link_figures(self, params) -> tuple[float, float, float, float, float]:
        """(inside a node: a ring hop's bytes/s; between nodes: the interface's bytes/s, one flow's
        bytes/s; the latency of a message inside a node, between nodes) as a collective gets them:
        what the network profile measured, else the catalog's bandwidth times its link class's
        achieved fraction (`link_efficiency`, `link_flow_share`) and the class's latency."""
        m = self.measured or MeasuredLinks()
        intra, inter = self.intra_link_class, self.inter_link_class
        flow = m.inter_flow_bandwidth or self.inter_node_bandwidth * params("link_flow_share", inter)
        return (m.intra_bandwidth or self.intra_node_bandwidth * params("link_efficiency", intra),
                m.inter_bandwidth or max(self.inter_node_bandwidth * params("link_efficiency", inter),
                                         m.inter_flow_bandwidth or 0.0),
                flow,
                m.intra_latency_s if m.intra_latency_s is not None else params("link_latency_s", intra),
                m.inter_latency_s if m.inter_latency_s is not None else params("link_latency_s", inter))

    def off_catalog(self) -> str | None:
        """Where the GPU or the GPU count differs from the listed instance's, so that its listed
        price does not apply: 'for T4s, not A10G'; None as listed, or without an instance."""
        entry = instance_catalog().get(self.instance) if self.instance else None
        if entry is None:
            return None
        listed = parse_gpu(entry["gpu"], "instance.gpu")
        if listed != self.gpu:
            return f"for {listed.name}s, not {self.gpu.name}"
        if int(entry["gpus_per_node"]) != self.gpus_per_node:
            return f"for {entry['gpus_per_node']} GPUs a node, not {self.gpus_per_node}"
        return None

    def price_note(self, index: int) -> str | None:
        """'no price for cluster.nodes[1] (g4dn.12xlarge): its price is for T4s, not A10G; ...'."""
        differs = self.off_catalog()
        if self.price_per_hour is not None or differs is None:
            return None
        return (f"no price for cluster.nodes[{index}] ({self.instance}): its price is {differs}; "
                f"set price_per_hour to price it")

    def to_dict(self) -> dict:
        out: dict = {}
        if self.instance:
            out["instance"] = self.instance
        out["count"] = self.count
        catalog_gpu = gpu_catalog().get(self.gpu.name)
        out["gpu"] = self.gpu.name if catalog_gpu == self.gpu else self.gpu.to_dict()
        out["gpus_per_node"] = self.gpus_per_node
        out["intra_node_bandwidth"] = exact_bandwidth(self.intra_node_bandwidth)
        out["inter_node_bandwidth"] = exact_bandwidth(self.inter_node_bandwidth)
        for key in ("intra_node_link", "inter_node_link"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        listed = instance_catalog().get(self.instance, {}).get("price_per_hour") if self.instance else None
        if self.price_per_hour is not None and (self.price_per_hour != listed or self.off_catalog()):
            out["price_per_hour"] = self.price_per_hour     # (the user's: a listed one is the catalog's)
        out.update(self.serving_fields)
        return out


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[NodeGroup, ...]
    name: str = "cluster"
    description: str = ""
    serving_fields: dict = field(default_factory=dict, hash=False)  # links, coordinator: see NodeGroup
    network: NetworkProfile | None = field(default=None, hash=False, compare=False)   # `network:` (measured links)
    # The GPU types of the cluster as written, kept by the parts of it that the idle-node search and
    # the what-ifs price: whether an unmeasured type carries a measured one's layer times
    # (costmodel/time_sources.py) is the whole cluster's question, not a part's.
    gpu_types: tuple[str, ...] = field(default=(), compare=False)

    @property
    def num_gpus(self) -> int:
        return sum(group.num_gpus for group in self.nodes)

    @property
    def num_nodes(self) -> int:
        return sum(group.count for group in self.nodes)

    def to_dict(self) -> dict:
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["nodes"] = [group.to_dict() for group in self.nodes]
        if self.network is not None:        # inline: a saved plan keeps the links it was priced with
            out["network"] = self.network.to_dict()
        out.update(self.serving_fields)
        return out


ATTENTION_KERNELS = ("fused", "flash2")
FP8_SCALINGS = ("tensorwise", "rowwise")


@dataclass(frozen=True)
class Training:
    global_batch_size: int
    precision: str = "fp16"
    optimizer: str = "adam"
    schedule: str = "1f1b"
    recompute: str = "none"             # or AUTO
    zero_stage: int | str = 0           # or AUTO
    sequence_parallel: bool | str = False   # or AUTO
    context_parallel: int | str = 1     # or AUTO
    virtual_stages: int | str = 1       # or AUTO
    # HSDP: data-parallel ranks per sharding group under ZeRO-3 (FULL: all of them, plain FSDP), or AUTO.
    data_parallel_shard: int | str = "full"
    # Expert-parallel degree for a mixture-of-experts model, or AUTO (the search chooses; 1 for a dense model).
    expert_parallel: int | str = AUTO
    framework: str = "megatron"         # frameworks.FRAMEWORKS: what it allocates, overlaps and launches
    # torch.compile (frameworks.COMPILE_MODES): False (eager), True (Inductor: fused element-wise
    # kernels, fewer launches, fewer saved activations), "cudagraphs" (mode="reduce-overhead").
    compile: bool | str = False
    fused_loss: bool = False            # a fused cross-entropy: no fp32 copies of the logits
    tp_comm_overlap: bool = False       # tensor-parallel collectives pipelined with the GEMMs (TE userbuffers, async TP)
    # Whether 16-bit training accumulates and reduces its gradients in fp32 main-gradient buffers:
    # None, the engine's own way (Megatron-LM forces it for bf16, DeepSpeed's BF16 optimizer keeps
    # them); false as NVIDIA's performance recipes run (Megatron-Bridge grad_reduce_in_fp32=False,
    # Megatron-LM --grad-reduce-in-bf16).
    grad_reduce_in_fp32: bool | None = None
    # The attention core's kernels (ATTENTION_KERNELS): "fused" (Transformer Engine / cuDNN,
    # FlashAttention-3) at the GPU's matrix-multiply efficiency, or "flash2" (the flash-attn 2
    # package, Triton) held to the GPU's flash2_fraction where it has one (Hopper).
    attention_kernel: str = "fused"
    # fp8's scaling granularity (FP8_SCALINGS): "tensorwise", one scale per tensor (Transformer
    # Engine's recipes, torchao's tensorwise), or "rowwise", one per row (torchao's rowwise: its
    # scaled GEMMs and casts are slower, params fp8_rowwise_efficiency).
    fp8_scaling: str = "tensorwise"
    # What the runtime holds per GPU besides the tensors, stated: it replaces the CUDA context and
    # NCCL's buffers the cost model counts (None, `auto`: counted, costmodel/terms/runtime.py).
    runtime_reserve_bytes: float | None = None
    # Weights + gradients + optimizer state per parameter before ZeRO; None: the optimizer's default.
    state_bytes_override: float | None = None

    @property
    def engine(self) -> str:
        """The engine the framework's stack follows (frameworks.ENGINES)."""
        return engine_of(self.framework)

    @property
    def bytes_per_element(self) -> int:
        return PRECISIONS[self.precision]

    @property
    def state_bytes_per_param(self) -> float:
        if self.state_bytes_override is not None:
            return self.state_bytes_override
        return float(DEFAULT_STATE_BYTES[(self.optimizer, self.precision not in FP32_PRECISIONS)])

    def to_dict(self) -> dict:
        return {"global_batch_size": self.global_batch_size, "precision": self.precision,
                "optimizer": self.optimizer, "schedule": self.schedule, "recompute": self.recompute,
                "zero_stage": self.zero_stage, "sequence_parallel": self.sequence_parallel,
                "context_parallel": self.context_parallel, "virtual_stages": self.virtual_stages,
                **({"data_parallel_shard": self.data_parallel_shard} if self.data_parallel_shard != FULL_SHARD else {}),
                **({"expert_parallel": self.expert_parallel} if self.expert_parallel != AUTO else {}),
                "framework": self.framework, **({"compile": self.compile} if self.compile else {}),
                "fused_loss": self.fused_loss,
                "tp_comm_overlap": self.tp_comm_overlap,
                **({"grad_reduce_in_fp32": self.grad_reduce_in_fp32} if self.grad_reduce_in_fp32 is not None else {}),
                **({"runtime_reserve": exact_bytes(self.runtime_reserve_bytes)}
                   if self.runtime_reserve_bytes is not None else {}),
                **({"attention_kernel": self.attention_kernel} if self.attention_kernel != "fused" else {}),
                **({"fp8_scaling": self.fp8_scaling} if self.fp8_scaling != "tensorwise" else {}),
                **({"state_bytes_per_param": self.state_bytes_override} if self.state_bytes_override is not None else {})}


@dataclass(frozen=True)
class SearchOptions:
    allow_cross_node_tp: bool = False   # tensor parallelism across nodes (normally a bad idea)
    reorder_nodes: bool = True          # let the search choose which node groups serve which stages
    top: int = 10                       # strategies to show
    max_micro_batch_size: int = 64
    use_all_gpus: bool = False          # False: the search may leave nodes idle when that is faster

    def to_dict(self) -> dict:
        return {"allow_cross_node_tp": self.allow_cross_node_tp, "reorder_nodes": self.reorder_nodes,
                "top": self.top, "max_micro_batch_size": self.max_micro_batch_size,
                "use_all_gpus": self.use_all_gpus}


@dataclass(frozen=True)
class Scenario:
    name: str
    cluster: Cluster
    model: Model
    training: Training
    search: SearchOptions = field(default_factory=SearchOptions)
    description: str = ""
    calibration: Calibration = field(default_factory=Calibration)

    @property
    def params(self) -> ModelParams:
        return ModelParams(self.calibration)

    def to_dict(self) -> dict:
        """A self-contained mapping (presets resolved) that `parse_scenario` reads back."""
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out.update(cluster=self.cluster.to_dict(), model=self.model.to_dict(),
                   training=self.training.to_dict(), search=self.search.to_dict())
        if self.calibration.values:
            out["calibration"] = self.calibration.to_dict()
        return out

    def with_training(self, **changes) -> "Scenario":
        """A new scenario with training fields changed; a family model is rebuilt for a new precision."""
        training = replace(self.training, **changes)
        return parse_scenario({**self.to_dict(), "training": training.to_dict()})


def _check_keys(value: dict, allowed: set[str], field_name: str, what: str) -> None:
    for key in value:
        if key not in allowed:
            raise SpecError(f"{field_name}.{key}", value[key], f"unknown {what} field; allowed: {', '.join(sorted(allowed))}")


def _choice(value: object, options: tuple, field_name: str):
    if isinstance(value, bool) or value not in options:  # YAML's true == 1 is not a ZeRO stage
        raise SpecError(field_name, value, f"expected one of {', '.join(str(o) for o in options)}")
    return value


def _auto_or_int(value: object, field_name: str) -> int | str:
    return AUTO if value == AUTO else parse_int(value, field_name)


def _compile_mode(value: object, field_name: str) -> bool | str:
    """false, true or cudagraphs (YAML's 1 is not a compile mode)."""
    if not (isinstance(value, bool) or value in COMPILE_MODES[2:]):
        raise SpecError(field_name, value, "expected false, true (torch.compile) or cudagraphs "
                                           "(torch.compile with mode='reduce-overhead')")
    return value


def _bool(value: object, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field_name, value, "expected true or false")
    return value


def parse_node_group(value: object, field_name: str) -> NodeGroup:
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a mapping (instance, count, gpu, gpus_per_node, bandwidths)")
    allowed = {"instance", "count", "gpu", "gpus_per_node", "intra_node_bandwidth", "inter_node_bandwidth",
               "intra_node_link", "inter_node_link", "price_per_hour"}
    _check_keys(value, allowed | set(SERVING_NODE_FIELDS), field_name, "node")
    fields: dict = {}
    instance = value.get("instance")
    if instance is not None:
        instance = check_name(instance, f"{field_name}.instance")
        entry = instance_catalog().get(instance)
        if entry is None:
            raise SpecError(f"{field_name}.instance", instance, f"unknown instance; known: {', '.join(instance_catalog())}")
        fields.update({k: entry[k] for k in allowed if k in entry})
    fields.update({k: v for k, v in value.items() if k != "instance" and k not in SERVING_NODE_FIELDS})
    for key in ("gpu", "gpus_per_node", "intra_node_bandwidth", "inter_node_bandwidth"):
        if key not in fields:
            raise SpecError(f"{field_name}.{key}", None, "required when no instance is given")
    gpus_per_node = parse_int(fields["gpus_per_node"], f"{field_name}.gpus_per_node", maximum=MAX_GPUS)
    group = NodeGroup(
        count=parse_int(fields.get("count", 1), f"{field_name}.count", maximum=MAX_GPUS),
        gpu=parse_gpu(fields["gpu"], f"{field_name}.gpu"),
        gpus_per_node=gpus_per_node,
        intra_node_bandwidth=parse_bandwidth(fields["intra_node_bandwidth"], f"{field_name}.intra_node_bandwidth"),
        inter_node_bandwidth=parse_bandwidth(fields["inter_node_bandwidth"], f"{field_name}.inter_node_bandwidth"),
        instance=str(instance) if instance is not None else None,
        intra_node_link=_choice(fields.get("intra_node_link", ""), ("", *LINK_CLASSES), f"{field_name}.intra_node_link"),
        inter_node_link=_choice(fields.get("inter_node_link", ""), ("", *LINK_CLASSES), f"{field_name}.inter_node_link"),
        price_per_hour=(float(parse_number(fields["price_per_hour"], f"{field_name}.price_per_hour", minimum=0))
                        if fields.get("price_per_hour") is not None else None),
        serving_fields={k: value[k] for k in SERVING_NODE_FIELDS if k in value},
    )
    if value.get("price_per_hour") is None and group.off_catalog():     # the listed price is another node's
        group = replace(group, price_per_hour=None)
    return group


def parse_cluster(value: object, field_name: str = "cluster", base_dir: Path | None = None) -> Cluster:
    """A cluster mapping or preset; `base_dir` (the scenario file's folder) anchors a relative `network`."""
    if isinstance(value, str):
        value = {"preset": value}
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a cluster preset name or a mapping with nodes")
    if "preset" in value:
        name = value["preset"]
        if not isinstance(name, str):
            raise SpecError(f"{field_name}.preset", name, "expected a cluster preset name")
        return parse_cluster({**load_preset("clusters", name), **{k: v for k, v in value.items() if k != "preset"}},
                             field_name, base_dir)
    _check_keys(value, {"name", "description", "nodes", "network", *SERVING_CLUSTER_FIELDS}, field_name, "cluster")
    nodes = value.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise SpecError(f"{field_name}.nodes", nodes, "expected a non-empty list of node groups")
    groups = tuple(parse_node_group(node, f"{field_name}.nodes[{i}]") for i, node in enumerate(nodes))
    gpus = sum(group.num_gpus for group in groups)
    if gpus > MAX_GPUS:
        raise SpecError(f"{field_name}.nodes", f"{gpus:,} GPUs", f"more than the limit of {MAX_GPUS:,} GPUs")
    network = load_network(value["network"], base_dir) if value.get("network") is not None else None
    if network is not None:
        kinds = [network.match(g.gpu.name, g.gpus_per_node) for g in groups]
        groups = tuple(replace(g, measured=links) if k is not None and (links := network.links(k)).any else g
                       for g, k in zip(groups, kinds))
    return Cluster(nodes=groups, name=check_name(value.get("name", "cluster"), f"{field_name}.name"),
                   gpu_types=tuple(dict.fromkeys(group.gpu.name for group in groups)),
                   description=_text(value, f"{field_name}.description"),
                   serving_fields={k: value[k] for k in SERVING_CLUSTER_FIELDS if k in value}, network=network)


def _text(value: dict, field_name: str) -> str:
    return check_name(value.get("description", ""), field_name, limit=MAX_TEXT_CHARS, text=True)


def parse_training(value: object, field_name: str = "training") -> Training:
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a mapping with at least global_batch_size")
    allowed = {"global_batch_size", "precision", "optimizer", "schedule", "recompute", "zero_stage", "runtime_reserve",
               "state_bytes_per_param", "sequence_parallel", "context_parallel", "virtual_stages", "framework",
               "data_parallel_shard", "expert_parallel", "fused_loss", "tp_comm_overlap", "attention_kernel",
               "grad_reduce_in_fp32",
               "fp8_scaling", "compile"}
    _check_keys(value, allowed, field_name, "training")
    if "global_batch_size" not in value:
        raise SpecError(f"{field_name}.global_batch_size", None, "required")
    reserve = value.get("runtime_reserve")
    precision = _choice(value.get("precision", "fp16"), tuple(PRECISIONS), f"{field_name}.precision")
    optimizer = _choice(value.get("optimizer", "adam"), OPTIMIZERS, f"{field_name}.optimizer")
    state = value.get("state_bytes_per_param")
    if state is not None:
        state = float(parse_number(state, f"{field_name}.state_bytes_per_param", positive=True))
    if state is not None and state < 2 * PRECISIONS[precision]:
        raise SpecError(f"{field_name}.state_bytes_per_param", state,
                        f"must hold at least the weights and gradients ({2 * PRECISIONS[precision]} bytes at {precision})")
    fp8_scaling = _choice(value.get("fp8_scaling", "tensorwise"), FP8_SCALINGS, f"{field_name}.fp8_scaling")
    if fp8_scaling != "tensorwise" and precision != "fp8":
        raise SpecError(f"{field_name}.fp8_scaling", fp8_scaling,
                        f"scales fp8 matrix multiplies; precision is {precision}")
    shard = value.get("data_parallel_shard", FULL_SHARD)
    if shard not in (FULL_SHARD, AUTO) and value.get("zero_stage", 0) not in (3, AUTO):
        raise SpecError(f"{field_name}.data_parallel_shard", shard,
                        "hybrid sharding (HSDP) needs zero_stage 3 or auto; use full for plain ZeRO")
    return Training(
        global_batch_size=parse_int(value["global_batch_size"], f"{field_name}.global_batch_size"),
        precision=precision,
        optimizer=optimizer,
        schedule=_choice(value.get("schedule", "1f1b"), SCHEDULES, f"{field_name}.schedule"),
        recompute=_choice(value.get("recompute", "none"), (*RECOMPUTE, AUTO), f"{field_name}.recompute"),
        zero_stage=_choice(value.get("zero_stage", 0), (*ZERO_STAGES, AUTO), f"{field_name}.zero_stage"),
        sequence_parallel=(AUTO if value.get("sequence_parallel") == AUTO
                           else _bool(value.get("sequence_parallel", False), f"{field_name}.sequence_parallel")),
        context_parallel=_auto_or_int(value.get("context_parallel", 1), f"{field_name}.context_parallel"),
        virtual_stages=_auto_or_int(value.get("virtual_stages", 1), f"{field_name}.virtual_stages"),
        data_parallel_shard=(FULL_SHARD if value.get("data_parallel_shard", FULL_SHARD) == FULL_SHARD else
                             _auto_or_int(value["data_parallel_shard"], f"{field_name}.data_parallel_shard")),
        expert_parallel=_auto_or_int(value.get("expert_parallel", AUTO), f"{field_name}.expert_parallel"),
        framework=_choice(value.get("framework", "megatron"), FRAMEWORKS, f"{field_name}.framework"),
        compile=_compile_mode(value.get("compile", False), f"{field_name}.compile"),
        fused_loss=_bool(value.get("fused_loss", False), f"{field_name}.fused_loss"),
        tp_comm_overlap=_bool(value.get("tp_comm_overlap", False), f"{field_name}.tp_comm_overlap"),
        grad_reduce_in_fp32=(None if value.get("grad_reduce_in_fp32", AUTO) == AUTO
                             else _bool(value["grad_reduce_in_fp32"], f"{field_name}.grad_reduce_in_fp32")),
        attention_kernel=_choice(value.get("attention_kernel", "fused"), ATTENTION_KERNELS,
                                 f"{field_name}.attention_kernel"),
        fp8_scaling=fp8_scaling,
        runtime_reserve_bytes=(parse_bytes(reserve, f"{field_name}.runtime_reserve")
                               if reserve is not None and reserve != AUTO else None),
        state_bytes_override=state,
    )


def parse_search_options(value: object, field_name: str = "search") -> SearchOptions:
    if value is None:
        return SearchOptions()
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a mapping of search options")
    _check_keys(value, {"allow_cross_node_tp", "reorder_nodes", "top", "max_micro_batch_size", "use_all_gpus"},
                field_name, "search")
    default = SearchOptions()
    return SearchOptions(
        allow_cross_node_tp=_bool(value.get("allow_cross_node_tp", default.allow_cross_node_tp), f"{field_name}.allow_cross_node_tp"),
        reorder_nodes=_bool(value.get("reorder_nodes", default.reorder_nodes), f"{field_name}.reorder_nodes"),
        top=parse_int(value.get("top", default.top), f"{field_name}.top"),
        max_micro_batch_size=parse_int(value.get("max_micro_batch_size", default.max_micro_batch_size),
                                       f"{field_name}.max_micro_batch_size"),
        use_all_gpus=_bool(value.get("use_all_gpus", default.use_all_gpus), f"{field_name}.use_all_gpus"),
    )


def parse_scenario(value: object, base_dir: Path | None = None) -> Scenario:
    """A scenario mapping; `base_dir` (the scenario file's folder) anchors a relative `model.profile`."""
    if not isinstance(value, dict):
        raise SpecError("scenario", type(value).__name__, "expected a mapping with cluster, model and training")
    _check_keys(value, {"name", "description", "cluster", "model", "training", "search", "format", "calibration",
                        "serving"}, "scenario", "scenario")
    if "training" not in value and "serving" in value:
        raise SpecError("training", None, "required; this scenario has only a serving section (use `amp-tui serve`)")
    for key in ("cluster", "model", "training"):
        if key not in value:
            raise SpecError(key, None, "required")
    training = parse_training(value["training"])
    cluster = parse_cluster(value["cluster"], base_dir=base_dir)
    _check_precision(training.precision, cluster)
    model = parse_model(value["model"], training.bytes_per_element, base_dir=base_dir)
    if model.measured_profile is not None:
        check_profile_fits(model.measured_profile, [group.gpu.name for group in cluster.nodes], training.precision,
                           model.sequence_length)
    return Scenario(
        name=check_name(value.get("name", "scenario"), "name"),
        description=_text(value, "description"),
        cluster=cluster,
        model=model,
        training=training,
        search=parse_search_options(value.get("search")),
        calibration=parse_calibration(value.get("calibration")),
    )


def _check_precision(precision: str, cluster: Cluster) -> None:
    """bf16 on a V100 or fp8 on an A100 would be predicted at a speed the GPU does not have."""
    for i, group in enumerate(cluster.nodes):
        if not group.gpu.supports(precision):
            raise SpecError("training.precision", precision,
                            f"cluster.nodes[{i}]'s {group.gpu.name} does not support it; "
                            f"it supports {', '.join(group.gpu.precisions)}")


def load_scenario(name_or_path: str) -> Scenario:
    """A scenario preset name, or a path to a scenario file (a plan file also holds a scenario)."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path_exists(path):
        return scenario_from_file(load_yaml_document(path, "a scenario (cluster, model and training)"), path.parent)
    if name_or_path in preset_names("scenarios"):
        return parse_scenario(load_preset("scenarios", name_or_path))
    raise SpecError("scenario", name_or_path,
                    f"neither a file nor a scenario preset; presets: {', '.join(preset_names('scenarios'))}")


def scenario_from_file(data: object, base_dir: Path | None = None) -> Scenario:
    """The scenario in a loaded scenario file, or in a plan file's `scenario` section."""
    if isinstance(data, dict) and ("strategy" in data or "prediction" in data):
        fmt = data.get("format")
        if not (isinstance(fmt, str) and fmt.startswith("amp-tui/plan/")):
            # A plan whose format line is gone or foreign: say so, rather than ask for strategies.
            raise SpecError("format", fmt, "not an amp-tui plan format; a plan file starts with format: amp-tui/plan/1")
    if isinstance(data, dict) and isinstance(data.get("scenario"), dict):
        data = data["scenario"]
    return parse_scenario(data, base_dir)
