"""Leave-one-source-out: each source predicted by parameters fitted without it.

`amp-tui validate --fit` fits the parameters several sources inform (validation/fit.py) to every
published run and the H200 block measurements, then once more per source without it. A GPU only
the held-out source ran on takes, in that source's fold, the peak fraction fitted for its
generation's other GPUs, else the median of every other fitted GPU's: a new GPU's. The folds are
package data (FOLDS_FILE, written by `validate --fit --write-folds`); `validate` replays each source
under its fold's parameters and prints that error beside the in-sample one. The fold of a source is
stale once the cost model changes; `validate` says so when the in-sample parameters it was written
with are not today's defaults.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from amp_tui.core.base.yamlio import atomic_write, dump_yaml, load_yaml_file
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.spec.hardware import gpu_catalog
from amp_tui.core.spec.params import Calibration, prior, split_name
from amp_tui.core.validation import metrics
from amp_tui.core.validation.bands import generation
from amp_tui.core.validation.blocks import SOURCE as BLOCKS, load_blocks
from amp_tui.core.validation.fit import (
    calibration_of,
    fit_parameters,
    fitted_names,
    informing_sources,
    log_jacobian,
    measured_s,
    predict_s,
    timed,
)
from amp_tui.core.validation.runs import ReplayCase, load_cases, unsupported

FOLDS_FILE = Path(__file__).resolve().parent.parent.parent / "data" / "fit_folds.yaml"

# Set from physics or a microbenchmark, never fitted, though a source moves them: T4's efficiency
# (AMP's measured layer times already hold it), the 500 W H100's (the 700 W part's times 500 / 700),
# and every GPU whose GEMM rate a microbenchmark gives (catalog gemm_fraction: A100, H100, H200,
# GH200): training's share of that rate is one parameter, gemm_training_share, which every source
# informs. (A refit per GPU raised A100's 0.72 to 0.758 and H100's 0.59 to 0.63 on the public runs
# and made the held-back A100 runs worse.)
NOT_FITTED_GPUS = ("T4", "H100-96GB-500W", "A100-40GB", "A100-80GB", "H100", "H200", "GH200")
# The other parameters the fit may move where several sources inform them (fitted_names).
CANDIDATES = ("link_efficiency.nvlink", "link_efficiency.infiniband", "link_latency_s.nvlink",
              "link_latency_s.infiniband", "dp_overlap.megatron", "layer_floor_s", "micro_batch_overhead_s",
              "iteration_overhead_s", "gemm_half_dim", "fp8_efficiency", "tp_overlap", "gemm_training_share")


FIT_ROUNDS = 3


def fit_targets() -> list:
    """Every published run the model replays, and the H200 block measurements."""
    cases = [c for c in load_cases() if c.scenario is not None and not unsupported(c)]
    return cases + list(load_blocks())


def candidate_names(targets) -> list[str]:
    gpus = Counter(g.gpu.name for t in targets for g in t.scenario.cluster.nodes)
    return [f"compute_efficiency.{g}" for g in gpus if _base(g) not in NOT_FITTED_GPUS] + list(CANDIDATES)


def _base(gpu: str) -> str:
    """A catalog GPU given another memory size ("H100 95 GB") is the catalog entry's silicon."""
    return gpu.split(" ")[0]


def fold_start(name: str, held_out: str, fitted: dict[str, float], informing: dict[str, set[str]]) -> float:
    """A held-out source's value of a parameter only it informs: a GPU's efficiency at its
    generation's fitted peak fraction, else every other fitted GPU's median (a new GPU's)."""
    family, gpu = split_name(name)
    if family.name != "compute_efficiency":
        return prior(name)[0]
    catalog = gpu_catalog()

    def fraction(key: str) -> float:
        return catalog[_base(key.split(".", 1)[1])].peak_fraction

    others = {key: fraction(key) * value for key, value in fitted.items()
              if key.startswith("compute_efficiency.") and key != name and informing.get(key, set()) - {held_out}}
    same = [f for key, f in others.items() if generation(_base(key.split(".", 1)[1])) == generation(_base(gpu))]
    return statistics.median(same or list(others.values()) or [fraction(name)]) / fraction(name)


def leave_one_source_out(targets, names: list[str], fitted: dict[str, float], informing: dict[str, set[str]],
                         max_evaluations: int = 20, progress=None) -> dict[str, dict[str, float]]:
    """Per source, the parameter values fitted without it, warm-started from `fitted` and stepping
    along the in-sample fit's Jacobian (taken once: one replay per parameter), each step's
    residuals exact."""
    targets = timed(targets)
    if progress:
        progress("differencing every parameter at the in-sample fit")
    jacobian = log_jacobian(targets, names, fitted)
    folds = {}
    for held_out in dict.fromkeys(t.source for t in targets):
        if progress:
            progress(f"fitting without {held_out}")
        rows = [i for i, t in enumerate(targets) if t.source != held_out]
        free = [n for n in names if informing[n] - {held_out}]
        columns = [names.index(n) for n in free]
        start = {**fitted, **{n: fold_start(n, held_out, fitted, informing) for n in names if n not in free}}
        folds[held_out], _, _ = fit_parameters([targets[i] for i in rows], free, start, max_evaluations,
                                               jacobian=jacobian[np.ix_(rows, columns)])
    return folds


@dataclass(frozen=True)
class FitResult:
    names: list[str]
    informing: dict[str, set[str]]
    fitted: dict[str, float]
    folds: dict[str, dict[str, float]]
    rms_before: float
    rms_after: float
    in_sample: dict[str, float]      # per source, MAPE with the in-sample fit
    held_out: dict[str, float]       # per source, MAPE with its fold's parameters


def run_fit(max_evaluations: int = 25, progress=None) -> FitResult:
    """The whole `validate --fit`: which parameters several sources inform, the in-sample fit,
    each source's fold, and every source's error under both."""
    targets = fit_targets()
    candidates = candidate_names(targets)
    if progress:
        progress(f"probing which of {len(candidates)} parameters each source informs")
    informing = informing_sources(targets, candidates)
    names = fitted_names(informing)
    if progress:
        progress(f"fitting {len(names)} parameters to {len(timed(targets))} runs and measurements")
    fitted: dict[str, float] = {}
    before = after = None
    for round_ in range(FIT_ROUNDS):     # each round steps along one Jacobian, taken where the last ended
        if progress:
            progress(f"round {round_ + 1} of {FIT_ROUNDS}: differencing, then stepping")
        jacobian = log_jacobian(targets, names, {n: prior(n)[0] for n in names} | fitted)
        fitted, rms_before, after = fit_parameters(targets, names, fitted or None, max_evaluations, jacobian)
        before = rms_before if before is None else before
    folds = leave_one_source_out(targets, names, fitted, informing, progress=progress)
    return FitResult(names, informing, fitted, folds, before, after,
                     _mape_by_source(targets, lambda source: fitted),
                     _mape_by_source(targets, lambda source: folds.get(source, fitted)))


def _mape_by_source(targets, values_of) -> dict[str, float]:
    by_source: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    costs: dict[str, dict] = defaultdict(dict)
    for t in timed(targets):
        predicted, measured = by_source[t.source]
        predicted.append(predict_s(t, calibration_of(values_of(t.source)), costs[t.source]))
        measured.append(measured_s(t))
    return {s: metrics.mape(p, m) for s, (p, m) in by_source.items()}


def write_folds(result: FitResult, path: Path = FOLDS_FILE) -> Path:
    """The in-sample values, what informs each parameter, and each source's fold."""
    data = {"note": "written by `amp-tui validate --fit --write-folds`: each source's parameters fitted "
                    "without it (amp_tui/core/validation/loso.py)",
            "defaults": dict(sorted(_defaults(result.names).items())),
            "fitted": {n: round(v, 6) for n, v in sorted(result.fitted.items()) if n in result.names},
            "informing": {n: sorted(result.informing[n]) for n in result.names},
            "folds": {s: {n: round(v, 6) for n, v in sorted(values.items()) if n in result.names}
                      for s, values in sorted(result.folds.items())}}
    atomic_write(path, dump_yaml(data))
    return path


def load_folds(path: Path = FOLDS_FILE) -> dict:
    """{"fitted": ..., "informing": ..., "folds": {source: {name: value}}}; empty without a file."""
    if not path.exists():
        return {}
    data = load_yaml_file(path)
    return data if isinstance(data, dict) and isinstance(data.get("folds"), dict) else {}


def _defaults(names: list[str]) -> dict[str, float]:
    """Today's value of each parameter (a GPU's compute efficiency: its catalog peak fraction,
    into which fitted factors are folded)."""
    catalog = gpu_catalog()
    out = {}
    for name in names:
        family, key = split_name(name)
        out[name] = catalog[_base(key)].peak_fraction if family.name == "compute_efficiency" else prior(name)[0]
    return out


def stale_parameters(folds: dict) -> list[str]:
    """The parameters whose default (or GPU peak fraction) is not what it was when the folds were
    written: the folds no longer describe this cost model."""
    written = {n: float(v) for n, v in (folds.get("defaults") or {}).items()}
    try:
        today = _defaults(list(written))
    except KeyError:
        return sorted(written)
    return [n for n, v in written.items() if abs(today[n] - v) > 1e-6 * max(abs(v), 1e-12)]


def fold_calibration(folds: dict, source: str) -> Calibration | None:
    values = (folds.get("folds") or {}).get(source)
    return calibration_of({n: float(v) for n, v in values.items()}) if values else None


def held_out_prediction(case: ReplayCase, calibration: Calibration) -> float:
    """A replayed run's time under its source's fold (the replay's choice of recomputation kept)."""
    from amp_tui.core.validation.replay import predict_case

    return predict_case(case, CostModel(replace(case.scenario, calibration=calibration))).iteration_time_s


def blocks_error(folds: dict) -> tuple[float, float | None]:
    """(in-sample MAPE, leave-one-source-out MAPE) of the H200 block measurements."""
    blocks = load_blocks()
    measured = [b.forward_backward_s for b in blocks]
    in_sample = metrics.mape([b.predict_s() for b in blocks], measured)
    calibration = fold_calibration(folds, BLOCKS)
    held = metrics.mape([b.predict_s(calibration) for b in blocks], measured) if calibration else None
    return in_sample, held


def add_held_out(rep: dict, validation, folds: dict | None = None) -> dict:
    """`report`'s dict with each published source's leave-one-source-out MAPE (`loso_mape`: its
    replayed runs under its fold), the macro over sources, the H200 blocks' two errors, and the
    parameters that went stale since the folds were written (then no figures)."""
    folds = load_folds() if folds is None else folds
    if not folds:
        rep["held_out"] = {"available": False, "reason": "no folds written (validate --fit --write-folds)"}
        return rep
    stale = stale_parameters(folds)
    if stale:
        rep["held_out"] = {"available": False, "stale": stale,
                           "reason": f"the folds predate today's defaults of {', '.join(stale[:3])}"
                                     f"{' ...' if len(stale) > 3 else ''}: run validate --fit --write-folds"}
        return rep
    by_source: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for r in validation.replayed:
        calibration = fold_calibration(folds, r.case.source)
        if calibration is None or not r.case.measured.iteration_time_s:
            continue
        predicted, measured = by_source[r.case.source]
        predicted.append(held_out_prediction(r.case, calibration))
        measured.append(r.case.measured.iteration_time_s)
    for source, (predicted, measured) in by_source.items():
        rep["sources"][source]["loso_mape"] = metrics.mape(predicted, measured)
    rep["macro"]["loso_mape"] = metrics.macro(s.get("loso_mape") for s in rep["sources"].values() if s["timed"])
    blocks_in, blocks_out = blocks_error(folds)
    rep["held_out"] = {"available": True, "blocks": {"runs": len(load_blocks()), "mape": blocks_in,
                                                     "loso_mape": blocks_out}}
    return rep
