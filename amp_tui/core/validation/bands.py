"""Uncertainty bands of predictions, from `validate`'s error on comparable published runs.

A run's class is its GPU generation(s) and whether its cluster is heterogeneous. A class's band is
the 68th percentile of the absolute time error of its replayed runs (about one standard deviation
for normal errors); a class with fewer than MIN_RUNS runs has none, and a class no run was replayed
in has none: no other class's band is borrowed for it (the published runs hold no heterogeneous
cluster, so no mixed cluster has a band). Each band says what it is built from: the class, how many
runs, on which GPUs. The figures live in amp_tui/data/error_bands.yaml, written by
`amp-tui validate --write-bands`; a test checks that the committed file matches the current cost
model.
"""

from __future__ import annotations

from collections import Counter, defaultdict
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
    """Per-class bands (None below MIN_RUNS), run counts and GPUs, from a strict replay."""
    if validation.approximate:
        raise ValueError("error bands come from the strict replay, not the approximate one")
    by_class: dict[str, list[Replayed]] = defaultdict(list)
    for r in validation.replayed:
        if r.case.measured.iteration_time_s:
            by_class[band_class(r.case.scenario)].append(r)

    def band(runs: list[Replayed]) -> float | None:
        if len(runs) < MIN_RUNS:
            return None
        return round(metrics.error_quantile([r.predicted_s for r in runs],
                                            [r.case.measured.iteration_time_s for r in runs], QUANTILE), DIGITS)

    def gpus(runs: list[Replayed]) -> dict[str, int]:
        counts = Counter(name for r in runs for name in {group.gpu.name for group in r.case.scenario.cluster.nodes})
        return dict(sorted(counts.items()))

    return {
        "quantile": QUANTILE,
        "replayed": len(validation.replayed),
        "classes": {key: {"band": band(runs), "runs": len(runs), "gpus": gpus(runs)}
                    for key, runs in sorted(by_class.items())},
    }


def write_bands(bands: dict, path: Path = BANDS_FILE) -> Path:
    header = ("# Written by `amp-tui validate --write-bands`; do not edit. Prediction uncertainty (+- fraction of\n"
              "# the iteration time): the 68th percentile of the cost model's error on the replayed published runs\n"
              "# of the class (GPU generation, homogeneous or mixed cluster); none below 5 runs.\n")
    written = atomic_write(path, header + dump_yaml(bands))
    load_bands.cache_clear()
    return written


@cache
def load_bands(path: Path = BANDS_FILE) -> dict:
    data = load_yaml_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("classes"), dict):
        raise SpecError("error bands", str(path), "expected `replayed` and `classes`; run `amp-tui validate --write-bands`")
    return data


def uncertainty(scenario: Scenario, bands: dict | None = None) -> float | None:
    """The +- fraction to show beside a prediction for this scenario: its class's band; None where
    the class has none (no run replayed, or too few: see band_basis)."""
    bands = load_bands() if bands is None else bands
    entry = bands["classes"].get(band_class(scenario))
    return None if entry is None or entry.get("band") is None else float(entry["band"])


def band_basis(scenario: Scenario, bands: dict | None = None) -> str:
    """What uncertainty()'s band is built from, or why there is none, for the user."""
    bands = load_bands() if bands is None else bands
    key = band_class(scenario)
    entry = bands["classes"].get(key)
    if entry is None and key.endswith("/heterogeneous"):
        return (f"none of validate's {bands.get('replayed', 0)} published runs is on mixed GPUs; "
                f"calibrate fits one to yours")
    if entry is None:
        return f"validate has replayed no published {key} run"
    runs = int(entry["runs"])
    if entry.get("band") is None:
        return f"validate replays only {runs} published {key} run{'s' if runs > 1 else ''}; a band needs {MIN_RUNS}"
    measured = list(entry.get("gpus") or {})
    bases = {name.split(" ")[0] for name in measured}      # ("GB300 279 GB": a GB300 with more memory)
    missing = sorted({group.gpu.name for group in scenario.cluster.nodes if group.gpu.name.split(" ")[0] not in bases})
    return (f"uncalibrated: validate's error on {runs} published {key} runs ({', '.join(measured)}"
            + (f"; none on {', '.join(missing)}" if missing else "") + ")")
