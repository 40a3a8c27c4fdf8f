"""Fit the cost model's default parameters to the published runs (`amp-tui validate --fit`).

The same physical parameters a user calibrates on their own cluster (core/spec/params.py), fitted once
to every run the model replays: robust least squares on log(predicted / measured) iteration time,
each source weighted equally (so the 216 llm-foundry rows do not outvote the 22 Megatron ones),
with the parameters' priors and bounds. No run gets a correction of its own. The printed values
are what params.py's defaults should say; tests/test_validate.py pins the errors they reach.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace

import numpy as np

from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.params import Calibration, bounds, prior
from amp_tui.core.validation.runs import ReplayCase

ROBUST_SCALE = 0.15     # log errors beyond ~15% count linearly, not squared (soft L1)


def fit_parameters(cases: list[ReplayCase], names: list[str], start: dict[str, float] | None = None,
                   max_evaluations: int = 400) -> tuple[dict[str, float], float, float]:
    """(fitted values, weighted RMS log error before, after) over the timed, fitting cases."""
    from scipy.optimize import least_squares  # a solver earns scipy its place (see pyproject)

    start = {name: prior(name)[0] for name in names} | (start or {})
    timed = [c for c in cases if c.measured.iteration_time_s and not c.measured.out_of_memory]
    per_source = Counter(c.source for c in timed)
    weight = np.array([1.0 / math.sqrt(per_source[c.source]) for c in timed])
    measured = np.log([c.measured.iteration_time_s for c in timed])
    shift = np.array([0.05 * prior(n)[0] if bounds(n)[0] == 0 else 0.0 for n in names])
    low = np.log(np.array([bounds(n)[0] for n in names]) + shift + 1e-300)
    high = np.log(np.array([bounds(n)[1] for n in names]) + shift)
    centre = np.log(np.array([prior(n)[0] for n in names]) + shift)
    sigma = np.array([prior(n)[1] for n in names])

    def values(u: np.ndarray) -> dict[str, float]:
        return {n: float(v) for n, v in zip(names, np.exp(u) - shift)}

    def residuals(u: np.ndarray) -> np.ndarray:
        calibration = Calibration(values=tuple(sorted({**start, **values(u)}.items())))
        predicted = np.log([evaluate(replace(c.scenario, calibration=calibration), c.strategy).iteration_time_s
                            for c in timed])
        return np.concatenate([weight * (predicted - measured), (u - centre) / sigma * 0.05])

    u0 = np.clip(np.log(np.array([start[n] for n in names]) + shift), low + 1e-9, high - 1e-9)
    before = residuals(u0)[:len(timed)]
    result = least_squares(residuals, u0, bounds=(low, high), loss="soft_l1", f_scale=ROBUST_SCALE,
                           diff_step=1e-2, max_nfev=max_evaluations)
    after = result.fun[:len(timed)]

    def rms(r: np.ndarray) -> float:
        return float(np.sqrt(np.sum(r ** 2) / np.sum(weight ** 2)))

    return {**start, **values(result.x)}, rms(before), rms(after)
