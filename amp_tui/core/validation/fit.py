"""Fit the cost model's default parameters to the published runs and the H200 block measurements
(`amp-tui validate --fit`), and judge the fit by leave-one-source-out error.

The same physical parameters a user calibrates on their own cluster (core/spec/params.py), fitted
once to every run the model replays and every block measured on the H200 (validation/blocks.py):
robust least squares on log(predicted / measured) time, each source weighted equally (so the 216
llm-foundry rows do not outvote the 22 Megatron ones), with the parameters' priors and bounds. No
run gets a correction of its own.

Only what several sources inform is fitted (`informing_sources`: a parameter moves a source's
predictions when nudged); a parameter only one source informs is set from physics or a
microbenchmark and left alone. Each source is then predicted by parameters fitted without it:
validation/loso.py.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np

from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.spec.params import Calibration, bounds, prior
from amp_tui.core.validation.blocks import BlockCase
from amp_tui.core.validation.replay import predict_case
from amp_tui.core.validation.runs import ReplayCase

ROBUST_SCALE = 0.15     # log errors beyond ~15% count linearly, not squared (soft L1)
NUDGE = 0.2             # log step that probes which sources a parameter informs
MOVES = 1e-3            # a source is informed when some prediction moves by more (log)

Target = ReplayCase | BlockCase


def timed(targets) -> list[Target]:
    """The targets with a measured time that ran (out-of-memory runs have no time to fit)."""
    return [t for t in targets if isinstance(t, BlockCase)
            or (t.measured.iteration_time_s and not t.measured.out_of_memory)]


def measured_s(target: Target) -> float:
    return target.forward_backward_s if isinstance(target, BlockCase) else target.measured.iteration_time_s


def predict_s(target: Target, calibration: Calibration, costs: dict | None = None) -> float:
    """The target's predicted seconds under `calibration`; `costs` shares one cost model between
    the targets of one scenario (keyed by the scenario's identity)."""
    costs = {} if costs is None else costs
    key = id(target.scenario)
    if key not in costs:
        costs[key] = CostModel(replace(target.scenario, calibration=calibration))
    if isinstance(target, BlockCase):
        return target.predict_s(cost=costs[key])
    return predict_case(target, costs[key]).iteration_time_s


def predict_all(targets, calibration: Calibration) -> np.ndarray:
    costs: dict = {}
    return np.array([predict_s(t, calibration, costs) for t in targets])


def calibration_of(values: dict[str, float]) -> Calibration:
    return Calibration(values=tuple(sorted(values.items())))


def _shift(name: str) -> float:
    """Parameters that may be 0 are moved in log(value + shift)."""
    return 0.05 * prior(name)[0] if bounds(name)[0] == 0 else 0.0


def fit_parameters(targets, names: list[str], start: dict[str, float] | None = None,
                   max_evaluations: int = 400, jacobian: np.ndarray | None = None
                   ) -> tuple[dict[str, float], float, float]:
    """(fitted values, weighted RMS log error before, after) over the timed targets; `start` also
    holds the values of parameters not fitted (e.g. a fold's priors). With `jacobian` (d log
    predicted / d log parameter, rows the timed targets, columns `names`: log_jacobian's, taken
    once) the solver steps along it instead of differencing again at every step."""
    from scipy.optimize import least_squares  # a solver earns scipy its place (see pyproject)

    start = {name: prior(name)[0] for name in names} | (start or {})
    targets = timed(targets)
    per_source = Counter(t.source for t in targets)
    weight = np.array([1.0 / math.sqrt(per_source[t.source]) for t in targets])
    measured = np.log([measured_s(t) for t in targets])
    shift = np.array([_shift(n) for n in names])
    low = np.log(np.array([bounds(n)[0] for n in names]) + shift + 1e-300)
    high = np.log(np.array([bounds(n)[1] for n in names]) + shift)
    centre = np.log(np.array([prior(n)[0] for n in names]) + shift)
    sigma = np.array([prior(n)[1] for n in names])

    def values(u: np.ndarray) -> dict[str, float]:
        return {n: float(v) for n, v in zip(names, np.exp(u) - shift)}

    def residuals(u: np.ndarray) -> np.ndarray:
        calibration = calibration_of({**start, **values(u)})
        predicted = np.log(predict_all(targets, calibration))
        return np.concatenate([weight * (predicted - measured), (u - centre) / sigma * 0.05])

    u0 = np.clip(np.log(np.array([start[n] for n in names]) + shift), low + 1e-9, high - 1e-9)
    before = residuals(u0)[:len(targets)]
    if not names:
        return dict(start), _rms(before, weight), _rms(before, weight)
    jac = "2-point" if jacobian is None else \
        (lambda u: np.vstack([weight[:, None] * jacobian, np.diag(0.05 / sigma)]))
    result = least_squares(residuals, u0, jac=jac, bounds=(low, high), loss="soft_l1", f_scale=ROBUST_SCALE,
                           diff_step=1e-2, max_nfev=max_evaluations)
    return {**start, **values(result.x)}, _rms(before, weight), _rms(result.fun[:len(targets)], weight)


def log_jacobian(targets, names: list[str], values: dict[str, float], step: float = 0.02) -> np.ndarray:
    """d log(predicted) / d log(parameter + shift) of each timed target at `values`, by forward
    differences of `step`: one replay per parameter."""
    targets = timed(targets)
    base = np.log(predict_all(targets, calibration_of(values)))
    columns = []
    for name in names:
        low, high = bounds(name)
        shift = _shift(name)
        moved = min(max((values[name] + shift) * math.exp(step) - shift, low), high)
        du = math.log((moved + shift) / (values[name] + shift)) or step
        columns.append((np.log(predict_all(targets, calibration_of({**values, name: moved}))) - base) / du)
    return np.column_stack(columns) if columns else np.zeros((len(targets), 0))


def _rms(r: np.ndarray, weight: np.ndarray) -> float:
    return float(np.sqrt(np.sum(r ** 2) / np.sum(weight ** 2)))


def informing_sources(targets, names: list[str]) -> dict[str, set[str]]:
    """Per parameter, the sources some of whose predictions move when it is nudged by NUDGE in log."""
    targets = timed(targets)
    base = np.log(predict_all(targets, Calibration()))
    sources = [t.source for t in targets]
    out = {}
    for name in names:
        value, shift = prior(name)[0], _shift(name)
        low, high = bounds(name)
        nudged = min(max((value + shift) * math.exp(NUDGE) - shift, low), high)
        if nudged == value:
            nudged = min(max((value + shift) * math.exp(-NUDGE) - shift, low), high)
        moved = np.abs(np.log(predict_all(targets, calibration_of({name: nudged}))) - base)
        out[name] = {s for s, m in zip(sources, moved) if m > MOVES}
    return out


def fitted_names(informing: dict[str, set[str]]) -> list[str]:
    """What the fit may move: parameters several sources inform, and each GPU's compute efficiency
    (a family every source informs; a GPU one source ran on falls back to its generation's in
    that source's fold)."""
    return [name for name, sources in informing.items()
            if len(sources) >= 2 or (name.startswith("compute_efficiency.") and sources)]
