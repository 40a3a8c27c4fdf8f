"""torch, the device and the clock: the part of profiling that needs PyTorch, imported lazily.

Timing: on a GPU, CUDA events around the work after a synchronize (they see the host's gaps when
it cannot keep the GPU busy, as in training); on the CPU, perf_counter. `warmups` runs first, then
the median of `repeats` runs.
"""

from __future__ import annotations

import os
import platform
import statistics
from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.hardware import catalog_names_in

INSTALL_HINT = "pip install 'amp-tui[profile]' (PyTorch; pick the CUDA build for your driver from pytorch.org)"


def require_torch():
    """torch, or the one-line error that says how to install it."""
    try:
        import torch
    except ImportError:
        raise SpecError("profile", "torch", f"PyTorch is not installed: {INSTALL_HINT}") from None
    return torch


@dataclass
class Device:
    """Where the layers run, and how they are timed."""

    torch: object
    kind: str               # cuda | cpu
    name: str               # e.g. "NVIDIA H200", "x86_64 CPU (2 threads)"
    dtype: object           # autocast dtype on CUDA (bf16/fp16), None for fp32
    warmups: int
    repeats: int

    @property
    def device(self):
        return self.torch.device(self.kind)

    @property
    def clock(self) -> str:
        return "cuda-events" if self.kind == "cuda" else "perf_counter"

    def autocast(self):
        if self.dtype is None:
            return self.torch.autocast(self.kind, enabled=False)
        return self.torch.autocast(self.kind, dtype=self.dtype)

    def synchronize(self) -> None:
        if self.kind == "cuda":
            self.torch.cuda.synchronize()

    def time_once(self, work) -> float:
        """Seconds `work()` takes on the device."""
        torch = self.torch
        self.synchronize()
        if self.kind == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            work()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        import time

        began = time.perf_counter()
        work()
        return time.perf_counter() - began

    def median(self, work, prepare=None) -> float:
        """Median seconds of `work()` over `repeats` runs after `warmups`; `prepare()` runs before
        each, untimed."""
        times = []
        for run in range(self.warmups + self.repeats):
            if prepare is not None:
                prepare()
            seconds = self.time_once(work)
            if run >= self.warmups:
                times.append(seconds)
        return statistics.median(times)

    def reset_peak(self) -> float:
        if self.kind != "cuda":
            return 0.0
        self.torch.cuda.reset_peak_memory_stats()
        return float(self.torch.cuda.memory_allocated())

    def peak_since(self, base: float) -> float | None:
        if self.kind != "cuda":
            return None
        return max(float(self.torch.cuda.max_memory_allocated()) - base, 0.0)

    def out_of_memory(self, err: BaseException) -> bool:
        oom = getattr(self.torch.cuda, "OutOfMemoryError", ())
        return isinstance(err, oom) or "out of memory" in str(err).lower()

    def free(self) -> None:
        import gc

        gc.collect()
        if self.kind == "cuda":
            self.torch.cuda.empty_cache()


def open_device(kind: str | None, precision: str, warmups: int, repeats: int) -> Device:
    """The device to measure on: CUDA unless `kind` says cpu; no GPU without `--device cpu` is an error."""
    torch = require_torch()
    if kind in (None, "cuda"):
        if not torch.cuda.is_available():
            raise SpecError("--device", "cuda", "no CUDA GPU is visible to PyTorch "
                                                f"(torch {torch.__version__}); use --device cpu to prove the code path")
        if precision not in ("bf16", "fp16", "fp32"):
            raise SpecError("training.precision", precision, "profiling measures bf16, fp16 or fp32 "
                                                             "(fp8 and fp4 need an engine's kernels)")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[precision]
        return Device(torch, "cuda", torch.cuda.get_device_name(0), dtype, warmups, repeats)
    # The CPU runs fp32: its bf16 matrix multiplies have no fast kernel on most CPUs (0.3 GFLOP/s
    # against 96 in fp32 on the development VM), and a CPU profile is not a GPU's times anyway.
    # One thread unless OMP_NUM_THREADS says otherwise: on a shared 2-core VM, torch's spinning
    # worker threads made a tiny model's iteration 2.78 s against 25 ms on one thread.
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
    threads = torch.get_num_threads()
    name = f"{platform.machine() or 'unknown'} CPU ({threads} thread{'s' if threads > 1 else ''})"
    return Device(torch, "cpu", name, None, warmups, repeats)


def software_versions(device: Device, tool_version: str) -> dict[str, str]:
    """What the profile was measured with (`tool_version`: amp-tui's, given by the command)."""
    import sys

    torch = device.torch
    out = {"torch": str(torch.__version__), "python": sys.version.split()[0], "amp_tui": tool_version}
    if device.kind == "cuda":
        out["cuda"] = str(torch.version.cuda)
        cudnn = torch.backends.cudnn.version()
        if cudnn:
            out["cudnn"] = str(cudnn)
    return out


def catalog_gpu(device_name: str) -> str | None:
    """The catalog GPU a CUDA device name is (every word of the catalog name in the device's:
    'NVIDIA A100-SXM4-80GB' is A100-80GB), the most specific match; None if none."""
    names = catalog_names_in(device_name)
    return names[0] if names else None
