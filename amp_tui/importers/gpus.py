"""Which catalog GPU a SLURM gres type or an nvidia-smi device name is.

A name matches a catalog GPU when every word of the catalog name is among its words ('NVIDIA
A100-SXM4-80GB' and the gres type 'nvidia_a100-sxm4-80gb' are A100-80GB). A short gres type (`a100`)
may fit several (A100-40GB, A100-80GB): the memory nvidia-smi reports decides, and without it the
smallest is assumed, and said. `--gpu TYPE=NAME` names it outright.
"""

from __future__ import annotations

import re

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import format_bytes
from amp_tui.core.spec.hardware import catalog_names_in, gpu_catalog


def resolve_gpu(text: str, memory_bytes: float | None, overrides: dict[str, str], where: str
                ) -> tuple[str, str | None]:
    """(catalog GPU name, a note on what was assumed or None) for a gres type or device name."""
    if text in overrides:
        return overrides[text], None
    exact = catalog_names_in(text)
    if exact and memory_bytes is None:
        return exact[0], None
    words = set(re.findall(r"[a-z0-9]+", text.lower()))
    family = [name for name in gpu_catalog() if re.findall(r"[a-z0-9]+", name.lower())[0] in words]
    candidates = exact or family
    if not candidates:
        raise SpecError(where, text, "not a catalog GPU (see presets/gpus.yaml); say which one it is with "
                                     f"--gpu {text}=NAME, e.g. --gpu {text}=A100-80GB")
    if memory_bytes is not None:
        best = min(candidates, key=lambda n: abs(gpu_catalog()[n].usable_memory_bytes - memory_bytes))
        return best, None
    if len(candidates) == 1:
        return candidates[0], None
    smallest = min(candidates, key=lambda n: gpu_catalog()[n].memory_bytes)
    others = ", ".join(n for n in candidates if n != smallest)
    return smallest, (f"{text!r} does not say which of {smallest}, {others} it is: {smallest} assumed (the least "
                      f"memory); nvidia-smi --query-gpu output or --gpu {text}=NAME says")


def memory_note(name: str, memory_bytes: float) -> str | None:
    """A note where nvidia-smi's memory differs from the catalog GPU's by more than 3%."""
    usable = gpu_catalog()[name].usable_memory_bytes
    if abs(memory_bytes - usable) <= 0.03 * usable:
        return None
    return (f"nvidia-smi reports {format_bytes(memory_bytes)} per GPU, the catalog's {name} "
            f"{format_bytes(usable)}: planned with nvidia-smi's figure")


def parse_overrides(values: list[str]) -> dict[str, str]:
    """--gpu TYPE=NAME options: a gres type (or device name) to a catalog GPU."""
    out = {}
    for value in values:
        key, sep, name = value.partition("=")
        if not sep or not key.strip() or not name.strip():
            raise SpecError("--gpu", value, "expected TYPE=NAME, e.g. a100=A100-80GB")
        if name.strip() not in gpu_catalog():
            raise SpecError("--gpu", value, f"{name.strip()!r} is not a catalog GPU (see presets/gpus.yaml)")
        out[key.strip()] = name.strip()
    return out
