"""The cost model's physical parameters: named, with defaults, bounds and priors.

Every constant the cost model uses beyond the hardware catalog is one of these (defaults fitted to
the 429 published runs `amp-tui validate` replays, each source weighted equally: `validate --fit`): how far below
peak a GPU's kernels run, what fraction of a link's bandwidth a collective achieves and what each
message costs in latency, the fixed costs of a layer, a micro-batch and an iteration, and the
memory a framework adds to the tensors it holds. Defaults are fitted to the published runs
(`amp-tui validate`); a scenario's `calibration:` section overrides any of them (written by
`amp-tui calibrate` from the user's own measurements). The cost model reads values through
`ModelParams`; it does not know how they were chosen.

Names are `family` or `family.key`: the key is a GPU type (`compute_efficiency.V100`) or a link
class (`link_efficiency.ethernet`).
"""

from __future__ import annotations

from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import parse_number
from amp_tui.core.spec.frameworks import ENGINES, PROFILES, engine_of

# Link classes: what a GPU-to-GPU path runs over. Each reaches its own fraction of the nominal
# (catalog) bandwidth and pays its own per-message latency. "host": PCIe between GPUs whose driver
# disables peer-to-peer (GeForce), where NCCL's shared-memory transport writes each chunk into host
# memory and the next GPU reads it back.
LINK_CLASSES = ("nvlink", "pcie", "host", "infiniband", "ethernet")
# Training frameworks (frameworks.FRAMEWORKS) differ in what they allocate and what they overlap
# (scenario.Training.framework); execution profiles (frameworks.PROFILES: the frameworks, and
# compiled execution) in the host time it takes to issue their kernels.


def _by_profile(field: str) -> dict[str, float]:
    """A profile-keyed family's defaults: each execution profile's figure (eager PyTorch's for '*')."""
    return {**{key: getattr(p, field) for key, p in PROFILES.items()}, "*": getattr(PROFILES["pytorch"], field)}


@dataclass(frozen=True)
class Family:
    """One kind of parameter; `keyed` families have one value per GPU type or link class."""

    name: str
    default: float | dict[str, float]
    lower: float
    upper: float
    prior_sigma: float      # in natural-log units: how far calibration may stray without evidence
    unit: str
    doc: str
    keyed_by: str = ""      # "gpu", "link", "framework", "profile", or "" for a single value

    def default_for(self, key: str) -> float:
        if isinstance(self.default, dict):
            return self.default.get(key, self.default["*"])
        return self.default


FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("compute_efficiency", 1.0, 0.25, 3.0, 0.35, "x",
           "multiplies the GPU's catalog peak fraction: how fast its large matrix multiplies really run",
           keyed_by="gpu"),
    # ethernet: one NCCL connection over TCP sockets reaches about half the line rate (AWS caps one
    # flow at 5 to 10 Gbps), set from physics in link_flow_share; several flows through one
    # interface together reach 0.7, fitted to AMP's runs, whose pipelines send 4 flows per NIC (docs/cost-model.md).
    # host: two PCIe crossings and host DRAM per hop, all GPUs' rings through the same memory and,
    # across sockets, the inter-socket link: about a third of the x16 rate (nccl-tests on GeForce
    # boxes without peer-to-peer reach 5-6 GB/s bus bandwidth on Gen3, 10-12 on Gen4). Not fitted.
    Family("link_efficiency", {"nvlink": 1.0, "pcie": 0.95, "host": 0.35, "infiniband": 0.838, "ethernet": 0.7,
                               "*": 0.95},
           0.05, 1.0, 0.4, "x", "achieved fraction of the catalog bandwidth for collectives and sends",
           keyed_by="link"),
    Family("link_flow_share", {"ethernet": 0.5, "*": 1.0}, 0.05, 1.0, 0.4, "x",
           "share of the line rate one connection reaches alone (NCCL over TCP sockets: about half); "
           "several through one interface together reach link_efficiency", keyed_by="link"),
    Family("link_latency_s", {"nvlink": 2.11e-6, "pcie": 15e-6, "host": 30e-6, "infiniband": 3.72e-5, "ethernet": 65e-6,
                              "*": 30e-6},
           0.0, 5e-3, 1.0, "s", "per-message latency (the alpha term) of one step of a collective or one send "
           "(kept in the classes' physical order, RDMA below TCP, so that a slower link is never faster)",
           keyed_by="link"),
    # pytorch: DDP's bucketed reducer, and PyTorch FSDP, overlap as FSDP trainers do (not fitted).
    # NCCL's tuning model (src/graph/tuning.cc): a ring's base latency per call under its Simple
    # protocol; LL's and LL128's in NCCL's ratios to it (terms/collectives.py). Not fitted.
    Family("collective_base_s", 8.4e-6, 0.0, 1e-3, 0.5, "s",
           "base latency of one collective call (NCCL's Simple protocol; LL and LL128 in NCCL's ratios)"),
    Family("dp_overlap", {"megatron": 0.41, "deepspeed": 0.0, "fsdp": 0.88, "pytorch": 0.88, "*": 0.0},
           0.0, 1.0, 1.0, "x",
           "share of the last micro-batch's backward pass that hides the gradient all-reduce "
           "(bucketed reduction as gradients become ready; DeepSpeed's pipeline engine reduces after)",
           keyed_by="framework"),
    Family("tp_overlap", 0.625, 0.0, 1.0, 0.4, "x",
           "share of the tensor-parallel collectives hidden behind the GEMMs they feed when the "
           "training section asks for tp_comm_overlap (Transformer Engine userbuffers, async TP)"),
    Family("gemm_training_share", 0.828, 0.3, 1.0, 0.3, "x",
           "share of a GEMM microbenchmark's rate (catalog gemm_fraction) a training step's matrix "
           "multiplies keep: one figure for every GPU with a microbenchmark"),
    Family("gemm_half_dim", 73.4, 8.0, 1024.0, 0.7, "rows",
           "matrix-multiply rows (or columns) at which a GEMM reaches half its GPU's best efficiency"),
    Family("fp8_efficiency", 0.889, 0.3, 1.0, 0.3, "x",
           "share of the bf16 matrix-multiply efficiency fp8 keeps at its doubled peak (casts, scaling)"),
    Family("fp8_rowwise_efficiency", 0.5, 0.2, 1.0, 0.3, "x",
           "share of the fp8 matrix-multiply efficiency left with a scale per row (torchao's rowwise "
           "recipe: rowwise-scaled GEMM kernels, and casts that reduce along rows and, for backward, "
           "columns)"),
    Family("fp4_efficiency", 0.6, 0.15, 1.0, 0.3, "x",
           "share of the bf16 matrix-multiply efficiency NVFP4 keeps at its quadrupled peak (casts, "
           "block scaling, Hadamard transforms, the layers a recipe keeps in bf16)"),
    # 2 by FLOPs (input and weight gradients), 2.05-2.1 in the H200 block measurements' large shapes
    # (flash attention's backward computes the scores again). Only AMP's runs measure layer forwards,
    # so one source informs it: set from physics, not fitted (1.85 fitted to AMP's runs before:
    # amp-homogeneous MAPE 4.2% in-sample; 6% to 8% at 2).
    Family("backward_ratio", 2.0, 1.0, 3.0, 0.15, "x",
           "backward over forward time of a layer whose forward is measured (2 by FLOPs: input and "
           "weight gradients; memory-bound kernels and GEMM shapes move it)"),
    Family("layer_floor_s", 3.87e-5, 0.0, 2e-3, 1.0, "s",
           "kernel-launch floor of one layer's forward pass: a latency-bound layer takes at least this"),
    # Set from microbenchmarks, not fitted (frameworks.py): what the host spends issuing one
    # transformer block's kernels; a layer takes at least this, whatever its FLOPs (terms/host.py).
    Family("host_forward_s", _by_profile("host_forward_s"), 0.0, 0.05, 0.5, "s",
           "host time to issue one transformer block's forward kernels (Python, dispatcher, autocast)",
           keyed_by="profile"),
    Family("host_backward_s", _by_profile("host_backward_s"), 0.0, 0.05, 0.5, "s",
           "host time to issue one transformer block's backward kernels (the autograd engine)",
           keyed_by="profile"),
    Family("collective_host_s", _by_profile("collective_host_s"), 0.0, 0.01, 0.5, "s",
           "host time to issue one collective (c10d and NCCL's enqueue)", keyed_by="profile"),
    Family("micro_batch_overhead_s", 3.79e-4, 0.0, 0.1, 1.0, "s",
           "the pipeline engine's fixed cost per micro-batch on each stage (scheduling, P2P setup)"),
    # Set from each engine's source (frameworks.py), not fitted: DeepSpeed's pipeline engine's
    # instructions and blocking sends; 0 for the others, whose cost is micro_batch_overhead_s's.
    Family("pipeline_engine_s", _by_profile("pipeline_engine_s"), 0.0, 0.1, 0.5, "s",
           "a pipeline engine's own cost per micro-batch on each stage beyond micro_batch_overhead_s "
           "(DeepSpeed's instruction loop and blocking sends)", keyed_by="profile"),
    Family("iteration_overhead_s", 0.0172, 0.0, 5.0, 1.5, "s",
           "fixed cost per iteration: gradient clipping, loss scaling, logging, step bookkeeping"),
    Family("memory_fragmentation", 0.08, 0.0, 0.5, 0.6, "x",
           "allocator fragmentation: extra share of the activation and buffer memory the allocator holds"),
)}


@dataclass(frozen=True)
class Calibration:
    """Fitted values by parameter name, with where they came from; empty means the defaults."""

    values: tuple[tuple[str, float], ...] = ()
    source: str = ""              # e.g. "amp-tui calibrate, 5 measurements, 2026-11-24"
    residual_log_sd: float | None = None   # spread of log(measured / predicted) after the fit
    loo_log_sd: float | None = None        # the same for each run predicted by a fit made without it

    def as_dict(self) -> dict[str, float]:
        return dict(self.values)

    def to_dict(self) -> dict:
        out: dict = {"parameters": dict(self.values)}
        if self.source:
            out["source"] = self.source
        if self.residual_log_sd is not None:
            out["residual_log_sd"] = self.residual_log_sd
        if self.loo_log_sd is not None:
            out["loo_log_sd"] = self.loo_log_sd
        return out


def split_name(name: str) -> tuple[Family, str]:
    family_name, _, key = name.partition(".")
    family = FAMILIES.get(family_name)
    if family is None:
        raise KeyError(name)
    return family, key


def check_name(name: object, field: str) -> str:
    if not isinstance(name, str):
        raise SpecError(field, name, "expected a parameter name")
    try:
        family, key = split_name(name)
    except KeyError:
        raise SpecError(field, name, f"unknown parameter; families: {', '.join(FAMILIES)}") from None
    if family.keyed_by and not key:
        raise SpecError(field, name, f"needs a {family.keyed_by} key, e.g. {family.name}.{_example(family)}")
    if not family.keyed_by and key:
        raise SpecError(field, name, f"{family.name} takes no key")
    if family.keyed_by == "link" and key not in LINK_CLASSES:
        raise SpecError(field, name, f"unknown link class; known: {', '.join(LINK_CLASSES)}")
    if family.keyed_by == "framework" and key not in ENGINES:
        raise SpecError(field, name, f"unknown engine; known: {', '.join(ENGINES)}")
    if family.keyed_by == "profile" and key not in PROFILES:
        raise SpecError(field, name, f"unknown framework profile; known: {', '.join(PROFILES)}")
    return name


def _example(family: Family) -> str:
    return {"gpu": "V100", "link": "ethernet", "profile": "pytorch"}.get(family.keyed_by, "fsdp")


def parse_calibration(value: object, field: str = "calibration") -> Calibration:
    if value is None:
        return Calibration()
    if not isinstance(value, dict):
        raise SpecError(field, value, "expected a mapping with parameters")
    allowed = {"parameters", "source", "residual_log_sd", "loo_log_sd"}
    for key in value:
        if key not in allowed:
            raise SpecError(f"{field}.{key}", value[key], f"unknown calibration field; allowed: {', '.join(sorted(allowed))}")
    parameters = value.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise SpecError(f"{field}.parameters", parameters, "expected a mapping of parameter name to value")
    values = []
    for name, number in parameters.items():
        check_name(name, f"{field}.parameters")
        family, _ = split_name(name)
        number = float(parse_number(number, f"{field}.parameters.{name}"))
        if not family.lower <= number <= family.upper:
            raise SpecError(f"{field}.parameters.{name}", number,
                            f"outside the physical range {family.lower:g} .. {family.upper:g} {family.unit}")
        values.append((name, number))
    spread = value.get("residual_log_sd")
    loo = value.get("loo_log_sd")
    return Calibration(
        values=tuple(sorted(values)),
        source=str(value.get("source", "")),
        residual_log_sd=None if spread is None else float(parse_number(spread, f"{field}.residual_log_sd", minimum=0)),
        loo_log_sd=None if loo is None else float(parse_number(loo, f"{field}.loo_log_sd", minimum=0)),
    )


class ModelParams:
    """The values the cost model uses: the calibration's where it has one, else the default."""

    def __init__(self, calibration: Calibration | None = None):
        self.calibration = calibration or Calibration()
        self._fitted = self.calibration.as_dict()

    def __call__(self, family: str, key: str = "") -> float:
        name = f"{family}.{key}" if key else family
        if name in self._fitted:
            return self._fitted[name]
        return FAMILIES[family].default_for(key)

    def source(self, family: str, key: str = "") -> str:
        name = f"{family}.{key}" if key else family
        return "calibrated" if name in self._fitted else "default"


# Set across GPUs by `validate --fit` and left out of a cluster's own calibration: training's share
# of a GEMM microbenchmark's rate multiplies the same rate as the cluster's compute_efficiency.<gpu>,
# so fitting both to one cluster's runs splits one factor between them.
ACROSS_GPUS = ("gemm_training_share",)


def parameter_names(gpu_names: list[str], link_classes: list[str], framework: str = "megatron",
                    profile: str | None = None) -> list[str]:
    """Every parameter a scenario with these GPU types, link classes, framework and execution
    profile (frameworks.execution_key; the framework's own by default) uses and its own runs
    may calibrate (not ACROSS_GPUS)."""
    names = []
    for family in FAMILIES.values():
        if family.name in ACROSS_GPUS:
            continue
        keys = {"gpu": gpu_names, "link": link_classes, "framework": [engine_of(framework)],
                "profile": [profile or framework]}.get(family.keyed_by, [""])
        names += [f"{family.name}.{key}" if key else family.name for key in dict.fromkeys(keys)]
    return names


def bounds(name: str) -> tuple[float, float]:
    family, _ = split_name(name)
    return family.lower, family.upper


def prior(name: str) -> tuple[float, float]:
    """(default value, prior sigma in log units) of a parameter."""
    family, key = split_name(name)
    return family.default_for(key), family.prior_sigma

