"""GPU and node-type specs, and the catalogs that name them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_TEXT_CHARS, check_name
from amp_tui.core.base.units import exact_bandwidth, exact_bytes, parse_bandwidth, parse_bytes, parse_number
from amp_tui.core.spec.presets import catalog


@dataclass(frozen=True)
class GPU:
    """One GPU type. Rates in base units: bytes, bytes/s, FLOP/s."""

    name: str
    memory_bytes: float            # the label ("16 GB")
    usable_memory_bytes: float     # what the CUDA driver offers; the capacity we plan against
    memory_bandwidth: float        # bytes/s
    peak_flops_16: float           # dense fp16/bf16 tensor-core FLOP/s
    peak_flops_32: float
    peak_fraction: float           # best fraction of peak a large kernel reaches
    half_work: float               # work (tokens x width / tp) at which half of that is reached
    description: str = ""
    precisions: tuple[str, ...] = ("fp16", "bf16", "fp32")   # training precisions it supports
    peak_flops_8: float = 0.0      # dense fp8 tensor-core FLOP/s (0 where there is no fp8)
    peak_flops_4: float = 0.0      # dense fp4 (NVFP4) tensor-core FLOP/s (0 where there is no fp4)
    # Best fraction of the 16-bit peak FlashAttention-2's kernels reach here, where it is below a
    # GEMM's: on Hopper they do not use warpgroup MMA (0: no such limit, the GEMM's efficiency).
    flash2_fraction: float = 0.0
    # Whether its driver allows PCIe peer-to-peer copies (GeForce cards: no; NCCL then moves data
    # through host memory: NodeGroup.intra_link_class "host").
    peer_to_peer: bool = True
    generation: str = ""           # architecture (volta, ampere, hopper ...): what its runtime holds
    # Dense TF32 tensor-core FLOP/s (0: no TF32, Ampere's predecessors): fp32 matrix multiplies
    # where the stack allows TF32 (training.tf32).
    peak_flops_tf32: float = 0.0
    # The share of the 16-bit peak a large matrix multiply reaches in a microbenchmark (0: none
    # measured); where given, training's matrix multiplies run at it times the fitted share
    # training keeps of it (terms/compute.py best_fraction), and peak_fraction is not used.
    gemm_fraction: float = 0.0

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s of the matrix multiplies at this training precision."""
        if precision == "fp32":
            return self.peak_flops_32
        if precision == "tf32":                 # TF32 tensor cores where it has them
            return self.peak_flops_tf32 or self.peak_flops_32
        if precision == "fp8":
            return self.peak_flops_8
        if precision == "fp4":
            return self.peak_flops_4
        return self.peak_flops_16

    def supports(self, precision: str) -> bool:
        """Whether it trains in this precision (tf32 wherever fp32: as fp32 without TF32 cores)."""
        return precision in self.precisions or (precision == "tf32" and "fp32" in self.precisions)

    def efficiency(self, work: float) -> float:
        """Fraction of peak reached by a kernel of `work` = tokens x width / tp elements."""
        return self.peak_fraction * work / (work + self.half_work)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "memory": exact_bytes(self.memory_bytes),
            "usable_memory": exact_bytes(self.usable_memory_bytes),
            "memory_bandwidth": exact_bandwidth(self.memory_bandwidth),
            "fp16_tflops": self.peak_flops_16 / 1e12,
            "fp32_tflops": self.peak_flops_32 / 1e12,
            "efficiency": {"peak_fraction": self.peak_fraction, "half_work": self.half_work,
                           **({"flash2_fraction": self.flash2_fraction} if self.flash2_fraction else {}),
                           **({"gemm_fraction": self.gemm_fraction} if self.gemm_fraction else {})},
            "precisions": list(self.precisions),
            **({"fp8_tflops": self.peak_flops_8 / 1e12} if self.peak_flops_8 else {}),
            **({"fp4_tflops": self.peak_flops_4 / 1e12} if self.peak_flops_4 else {}),
            **({"peer_to_peer": False} if not self.peer_to_peer else {}),
            **({"generation": self.generation} if self.generation else {}),
            **({"tf32_tflops": self.peak_flops_tf32 / 1e12} if self.peak_flops_tf32 else {}),
        }


def parse_gpu(value: object, field: str) -> GPU:
    """A catalog name (`V100`) or an inline mapping with figures (optionally `base: V100`)."""
    if isinstance(value, str):
        entry = gpu_catalog().get(value)
        if entry is None:
            raise SpecError(field, value, f"unknown GPU; known: {', '.join(gpu_catalog())}")
        return entry
    if not isinstance(value, dict):
        raise SpecError(field, value, "expected a GPU name or a mapping of its figures")
    base = value.get("base")
    fields = dict(gpu_catalog()[base].to_dict()) if isinstance(base, str) and base in gpu_catalog() else {}
    if base is not None and not fields:
        raise SpecError(f"{field}.base", base, f"unknown GPU; known: {', '.join(gpu_catalog())}")
    if "memory" in value and "usable_memory" not in value:
        fields.pop("usable_memory", None)  # the base card's figure no longer applies
    fields.update({k: v for k, v in value.items() if k != "base"})
    return _gpu_from_fields(check_name(fields.get("name") or base or "custom", f"{field}.name"), fields, field)


def _gpu_from_fields(name: str, fields: dict, field: str) -> GPU:
    allowed = {"name", "description", "memory", "usable_memory", "memory_bandwidth", "fp16_tflops",
               "fp32_tflops", "fp8_tflops", "fp4_tflops", "tf32_tflops", "efficiency", "precisions", "peer_to_peer",
               "generation"}
    for key in fields:
        if key not in allowed:
            raise SpecError(f"{field}.{key}", fields[key], f"unknown GPU field; allowed: {', '.join(sorted(allowed))}")
    for key in ("memory", "memory_bandwidth", "fp16_tflops", "fp32_tflops"):
        if key not in fields:
            raise SpecError(f"{field}.{key}", None, "required for a GPU given by its figures")
    memory = parse_bytes(fields["memory"], f"{field}.memory")
    usable = parse_bytes(fields["usable_memory"], f"{field}.usable_memory") if "usable_memory" in fields else memory
    # Labels round the HBM a part is sold with (an H200's "141 GB" gives PyTorch 139.8 GiB, 150 GB):
    # what can be allocated may pass the label read in bytes, but not by more than a tenth.
    if usable > 1.1 * memory:
        raise SpecError(f"{field}.usable_memory", fields["usable_memory"],
                        f"more than the memory ({fields['memory']}) by over a tenth")
    efficiency = fields.get("efficiency") or {}
    if not isinstance(efficiency, dict):
        raise SpecError(f"{field}.efficiency", efficiency, "expected a mapping with peak_fraction and half_work")
    peak_fraction = parse_number(efficiency.get("peak_fraction", 0.4), f"{field}.efficiency.peak_fraction", positive=True)
    if peak_fraction > 1:
        raise SpecError(f"{field}.efficiency.peak_fraction", peak_fraction, "must be at most 1")
    unknown = set(efficiency) - {"peak_fraction", "half_work", "flash2_fraction", "gemm_fraction"}
    if unknown:
        key = sorted(unknown)[0]
        raise SpecError(f"{field}.efficiency.{key}", efficiency[key],
                        "unknown efficiency field; allowed: flash2_fraction, gemm_fraction, half_work, peak_fraction")
    flash2 = parse_number(efficiency.get("flash2_fraction", 0), f"{field}.efficiency.flash2_fraction", minimum=0)
    if flash2 > 1:
        raise SpecError(f"{field}.efficiency.flash2_fraction", flash2, "must be at most 1")
    gemm = parse_number(efficiency.get("gemm_fraction", 0), f"{field}.efficiency.gemm_fraction", minimum=0)
    if gemm > 1:
        raise SpecError(f"{field}.efficiency.gemm_fraction", gemm, "must be at most 1")
    precisions = fields.get("precisions", ["fp16", "bf16", "fp32"])
    if not isinstance(precisions, list) or not precisions or any(p not in _PRECISION_NAMES for p in precisions):
        raise SpecError(f"{field}.precisions", precisions, f"expected a list drawn from {', '.join(_PRECISION_NAMES)}")
    low = {}
    for bits in ("fp8", "fp4"):
        peak = fields.get(f"{bits}_tflops")
        if bits in precisions and peak is None:
            raise SpecError(f"{field}.{bits}_tflops", None, f"required for a GPU that supports {bits}")
        low[bits] = parse_number(peak, f"{field}.{bits}_tflops", positive=True) * 1e12 if peak is not None else 0.0
    return GPU(
        name=name,
        memory_bytes=memory,
        usable_memory_bytes=usable,
        memory_bandwidth=parse_bandwidth(fields["memory_bandwidth"], f"{field}.memory_bandwidth"),
        peak_flops_16=parse_number(fields["fp16_tflops"], f"{field}.fp16_tflops", positive=True) * 1e12,
        peak_flops_32=parse_number(fields["fp32_tflops"], f"{field}.fp32_tflops", positive=True) * 1e12,
        peak_fraction=float(peak_fraction),
        half_work=float(parse_number(efficiency.get("half_work", 131072), f"{field}.efficiency.half_work", minimum=0)),
        description=check_name(fields.get("description", ""), f"{field}.description", limit=MAX_TEXT_CHARS, text=True),
        precisions=tuple(precisions),
        peak_flops_8=low["fp8"],
        peak_flops_4=low["fp4"],
        flash2_fraction=float(flash2),
        gemm_fraction=float(gemm),
        peer_to_peer=_flag(fields.get("peer_to_peer", True), f"{field}.peer_to_peer"),
        generation=check_name(fields.get("generation", ""), f"{field}.generation", limit=32),
        peak_flops_tf32=(parse_number(fields["tf32_tflops"], f"{field}.tf32_tflops", minimum=0) * 1e12
                         if fields.get("tf32_tflops") is not None else 0.0),
    )


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(field, value, "expected true or false")
    return value


_PRECISION_NAMES = ("fp32", "fp16", "bf16", "fp8", "fp4")


_GPUS: dict[str, GPU] | None = None


def gpu_catalog() -> dict[str, GPU]:
    global _GPUS
    if _GPUS is None:
        _GPUS = {name: _gpu_from_fields(name, dict(fields), f"presets/gpus.yaml:{name}")
                 for name, fields in catalog("gpus").items()}
    return _GPUS


def instance_catalog() -> dict[str, dict]:
    """Instance name to its node fields (gpu, gpus_per_node, bandwidths, provider, description)."""
    return catalog("instances")


def catalog_names_in(text: str) -> list[str]:
    """The catalog GPUs every word of whose name is a word of `text` (a device name such as
    'NVIDIA A100-SXM4-80GB', or a SLURM gres type such as 'nvidia_a100-sxm4-80gb'), the most
    specific first: 'NVIDIA H100 PCIe' is H100-PCIe before H100."""
    words = set(re.findall(r"[a-z0-9]+", text.lower()))
    found = [(name, set(re.findall(r"[a-z0-9]+", name.lower()))) for name in gpu_catalog()]
    return [name for name, need in sorted(found, key=lambda item: -len(item[1])) if need <= words]
