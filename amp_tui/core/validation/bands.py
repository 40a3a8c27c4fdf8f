"""Uncertainty bands of predictions, from `validate`'s error on comparable published runs.

A run's class is its GPU generation(s) and whether its cluster is heterogeneous. A class's band is
the 68th percentile of the absolute time error of its replayed runs (about one standard deviation
for normal errors); a class with fewer than MIN_RUNS runs has none. The figures live in
amp_tui/data/error_bands.yaml, written by `amp-tui validate --write-bands`; a test checks that the
committed file matches the current cost model.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import atomic_write, dump_yaml, load_yaml_file
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.validation import metrics

if TYPE_CHECKING:       # (types only: `plan` reads the bands without replaying anything)
    from amp_tui.core.validation.replay import Replayed, Validation

BANDS_FILE = Path(__file__).resolve().parent.parent.parent / "data" / "error_bands.yaml"
QUANTILE = 0.68
MIN_RUNS = 5
DIGITS = 4   # the file's precision: enough to see a model change, stable across platforms

# Catalog GPU -> architecture generation (a GPU given by its figures falls back to its name).
_GENERATIONS = {"T4": "turing", "V100": "volta", "V100-32GB": "volta", "V100-PCIe": "volta", "A10G": "ampere",
                "A100-40GB": "ampere", "A100-80GB": "ampere", "L4": "ada", "L40S": "ada", "H100": "hopper",
                "H200": "hopper", "B200": "blackwell", "GB200": "blackwell", "GB300": "blackwell",
                "MI250X": "cdna", "MI300X": "cdna"}


def generation(gpu_name: str) -> str:
    base = gpu_name.split(" ")[0]   # "H100 96 GB": the catalog H100 with another memory size
    return _GENERATIONS.get(base, base.lower())


def band_class(scenario: Scenario) -> str:
    """`hopper/homogeneous`, `ampere+turing/heterogeneous`: the key the bands are kept under."""
    gens = sorted({generation(group.gpu.name) for group in scenario.cluster.nodes})
    mixed = len({group.gpu.name for group in scenario.cluster.nodes}) > 1
    return f"{'+'.join(gens)}/{'heterogeneous' if mixed else 'homogeneous'}"


def compute_bands(validation: Validation) -> dict:
    """Per-class bands and the macro band (the mean of the per-source bands) from a strict replay."""
    if validation.approximate:
        raise ValueError("error bands come from the strict replay, not the approximate one")
    by_class: dict[str, list[Replayed]] = defaultdict(list)
    by_source: dict[str, list[Replayed]] = defaultdict(list)
    for r in validation.replayed:
        if r.case.measured.iteration_time_s:
            by_class[band_class(r.case.scenario)].append(r)
            by_source[r.case.source].append(r)

    def band(runs: list[Replayed]) -> float:
        return round(metrics.error_quantile([r.predicted_s for r in runs],
                                            [r.case.measured.iteration_time_s for r in runs], QUANTILE), DIGITS)

    macro = metrics.macro(band(runs) for runs in by_source.values())
    return {
        "quantile": QUANTILE,
        "macro": None if macro is None else round(macro, DIGITS),
        "classes": {key: {"band": band(runs), "runs": len(runs)}
                    for key, runs in sorted(by_class.items()) if len(runs) >= MIN_RUNS},
    }


def write_bands(bands: dict, path: Path = BANDS_FILE) -> Path:
    header = ("# Written by `amp-tui validate --write-bands`; do not edit. Prediction uncertainty (+- fraction of\n"
              "# the iteration time): the 68th percentile of the cost model's error on comparable published runs.\n")
    written = atomic_write(path, header + dump_yaml(bands))
    load_bands.cache_clear()
    return written


@cache
def load_bands(path: Path = BANDS_FILE) -> dict:
    data = load_yaml_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        raise SpecError("error bands", str(path), "expected `macro` and `classes`; run `amp-tui validate --write-bands`")
    return data


def uncertainty(scenario: Scenario, bands: dict | None = None) -> float:
    """The +- fraction to show beside a prediction for this scenario: its class's band; for a
    heterogeneous cluster without one, the widest band of its generations' homogeneous classes or
    the macro band, whichever is wider; else the macro band."""
    bands = load_bands() if bands is None else bands
    classes, macro = bands["classes"], float(bands.get("macro") or 0.0)
    key = band_class(scenario)
    if key in classes:
        return float(classes[key]["band"])
    gens, kind = key.split("/")
    if kind == "heterogeneous":
        parts = [float(classes[f"{g}/homogeneous"]["band"]) for g in gens.split("+") if f"{g}/homogeneous" in classes]
        return max([macro, *parts])
    return macro
