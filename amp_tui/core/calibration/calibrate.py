"""Calibrate the cost model's physical parameters (core/spec/params.py) to runs measured on the user's cluster.

The fit is a maximum a posteriori estimate: robust least squares on log iteration time (and log peak
memory where measured), with every parameter's prior (its default and a log-space sigma) as an extra
residual. Priors are what make 3 to 5 measurements enough: a parameter the runs say little about
stays near its default instead of wandering, and bounds keep every value physical.

Parameters are optimised as u = log(value + shift): shift is 0 for parameters that must stay positive
(an efficiency), and a small fraction of the default for those whose lower bound is 0 (a fixed
overhead), so that a fitted overhead may reach zero at a finite prior cost.

The core is generic: `fit` and `suggest` take `predict(values, measurement) -> (seconds, peak_bytes)`.
`calibrate` and `suggest_measurements` bind it to a scenario through `core.evaluate`, the way every
other prediction is made, with the scenario's `calibration:` section carrying the values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import numpy as np

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import format_bytes
from amp_tui.core.calibration.measurements import Measurement
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.frameworks import execution_key
from amp_tui.core.spec.params import Calibration, bounds, parameter_names, prior, split_name
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import KNOB_FIELDS

Predict = Callable[[dict[str, float], Measurement], tuple[float, float]]

# How far a measured time or peak may sit from a good model's prediction, in log units: the noise
# of a measurement plus what no parameter captures. It weighs the data against the priors.
TIME_LOG_SD = 0.05
MEMORY_LOG_SD = 0.05
# Residuals beyond this many sigmas count linearly (soft_l1), so one bad run cannot drag the fit.
ROBUST_SCALE = 2.0
# Shift of a parameter whose lower bound is 0, as a share of its default: value 0 costs
# log(1 + 1 / 0.05) ~ 3 log units against the prior, ~3 sigma for a fixed overhead.
ZERO_SHIFT = 0.05
# |d log(prediction) / du| below this over every run: the runs cannot tell the parameter's value.
SENSITIVITY_FLOOR = 1e-3
SENSITIVITY_STEP = 0.05
# --suggest: the price of a suggestion that runs longer than the cheapest (per log of the ratio),
# and the bonus per tp, pp, dp, micro-batch size or placement not yet among the suggestions; both in log det units.
COST_WEIGHT = 0.25
SPREAD_WEIGHT = 0.1
SUGGEST_CANDIDATES = 400          # candidates --suggest weighs at most, spread over the enumeration
MEMORY_HEADROOM = 0.9             # suggested runs should fit with room: the memory model errs too


class _Space:
    """The optimisation coordinates u of a list of parameters, their bounds and priors."""

    def __init__(self, names: list[str]):
        self.names = list(names)
        lower, upper = (np.array(side, dtype=float) for side in zip(*(bounds(n) for n in names)))
        default, sigma = (np.array(side, dtype=float) for side in zip(*(prior(n) for n in names)))
        self.lower, self.upper = lower, upper
        self.shift = np.where(lower > 0, 0.0, ZERO_SHIFT * np.where(default > 0, default, upper))
        self.u_lower, self.u_upper = np.log(lower + self.shift), np.log(upper + self.shift)
        self.centre = np.log(default + self.shift)
        self.sigma = sigma

    def values(self, u: np.ndarray) -> dict[str, float]:
        value = np.clip(np.exp(u) - self.shift, self.lower, self.upper)
        return dict(zip(self.names, value.tolist()))

    def u(self, values: dict[str, float]) -> np.ndarray:
        """Coordinates of `values`, strictly inside the bounds (least_squares starts nowhere else)."""
        u = np.log(np.array([values[n] for n in self.names]) + self.shift)
        margin = 1e-6 * (self.u_upper - self.u_lower)
        return np.clip(u, self.u_lower + margin, self.u_upper - margin)

    def prior_residuals(self, u: np.ndarray) -> np.ndarray:
        """(u - centre) / sigma, stretched so that soft_l1 leaves its square as it is: the prior
        stays Gaussian while the data's residuals are treated robustly."""
        r = (u - self.centre) / self.sigma
        return r * np.sqrt(1.0 + r * r / (4.0 * ROBUST_SCALE ** 2))


@dataclass(frozen=True)
class ParameterFit:
    name: str
    before: float
    after: float
    unit: str
    fitted: bool                  # False: the measurements do not inform it; it kept its value
    sensitivity: float            # largest |d log(prediction) / d log(value + shift)| over the runs

    @property
    def source(self) -> str:
        return "fitted" if self.fitted else "not informed"

    def to_dict(self) -> dict:
        return {"name": self.name, "before": self.before, "after": self.after, "unit": self.unit,
                "source": self.source, "sensitivity": self.sensitivity}


@dataclass(frozen=True)
class RunFit:
    """One measurement against the model before and after the fit."""

    measurement: Measurement
    predicted_before_s: float
    predicted_s: float
    predicted_peak_bytes: float
    loo_predicted_s: float | None = None    # predicted by a fit made without this run

    @property
    def residual(self) -> float | None:
        """log(measured / predicted) after the fit; None for a run with no time."""
        m = self.measurement
        return math.log(m.iteration_time_s / self.predicted_s) if m.timed else None

    @property
    def loo_error(self) -> float | None:
        m = self.measurement
        if not m.timed or self.loo_predicted_s is None:
            return None
        return math.log(m.iteration_time_s / self.loo_predicted_s)

    def to_dict(self) -> dict:
        m = self.measurement
        return {"entry": m.index, **m.strategy.to_dict(), "measured_s": m.iteration_time_s,
                "out_of_memory": m.out_of_memory, "measured_peak_bytes": m.peak_memory_bytes,
                "predicted_before_s": self.predicted_before_s, "predicted_s": self.predicted_s,
                "predicted_peak_bytes": self.predicted_peak_bytes, "log_residual": self.residual,
                "loo_predicted_s": self.loo_predicted_s, "loo_log_error": self.loo_error}


@dataclass(frozen=True)
class Fit:
    parameters: tuple[ParameterFit, ...]
    runs: tuple[RunFit, ...]
    residual_log_sd: float        # root mean square of the runs' log residuals after the fit
    loo_log_sd: float | None      # root mean square of the leave-one-out errors (2+ timed runs)

    @property
    def values(self) -> dict[str, float]:
        """The fitted parameters only."""
        return {p.name: p.after for p in self.parameters if p.fitted}

    def to_dict(self) -> dict:
        return {"parameters": [p.to_dict() for p in self.parameters], "runs": [r.to_dict() for r in self.runs],
                "residual_log_sd": self.residual_log_sd, "loo_log_sd": self.loo_log_sd}


def _log_predictions(predict: Predict, values: dict[str, float], runs: list[Measurement]) -> np.ndarray:
    """(runs, 2): log seconds and log peak bytes; a non-positive prediction is floored, not fatal."""
    return np.log(np.maximum(np.array([predict(values, m) for m in runs], dtype=float), 1e-30))


def sensitivities(measurements: list[Measurement], predict: Predict, names: list[str],
                  start: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(log predictions at `start` (runs, 2), d log(prediction) / du (runs, parameters, 2)) by
    finite differences: one step per parameter, down where up would leave the bounds."""
    space = _Space(names)
    start = {n: prior(n)[0] for n in names} | (start or {})
    u0 = space.u(start)
    base = _log_predictions(predict, start, measurements)
    slopes = np.zeros((len(measurements), len(names), 2))
    for j in range(len(names)):
        step = SENSITIVITY_STEP if u0[j] + SENSITIVITY_STEP <= space.u_upper[j] else -SENSITIVITY_STEP
        u = u0.copy()
        u[j] += step
        moved = _log_predictions(predict, {**start, **space.values(u)}, measurements)
        slopes[:, j, :] = (moved - base) / step
    return base, slopes


def fit(measurements: list[Measurement], predict: Predict, names: list[str], *,
        start: dict[str, float] | None = None, leave_one_out: bool = True) -> Fit:
    """Fit the parameters `names` that the measurements inform; keep the others at `start`
    (default: each parameter's prior default). Raises SpecError when no parameter is informed."""
    start = {n: prior(n)[0] for n in names} | (start or {})
    timed = np.array([m.timed for m in measurements])
    weighed = np.array([m.peak_memory_bytes is not None for m in measurements])
    if not timed.any():
        raise SpecError("measurements", len(measurements), "no run has an iteration_time_s to fit")
    base, slopes = sensitivities(measurements, predict, names, start)
    reach = np.maximum(np.abs(slopes[timed, :, 0]).max(axis=0),
                       np.abs(slopes[weighed, :, 1]).max(axis=0) if weighed.any() else 0.0)
    informed = [n for n, s in zip(names, reach) if s > SENSITIVITY_FLOOR]
    if not informed:
        raise SpecError("measurements", f"{len(measurements)} runs",
                        "no model parameter changes their predictions, so there is nothing to fit")
    space = _Space(informed)
    measured = np.log(np.array([[m.iteration_time_s if m.timed else 1.0, m.peak_memory_bytes or 1.0]
                                for m in measurements]))
    # A run that states its time's uncertainty (a training log's spread) is weighed by it.
    time_sd = np.array([m.time_log_sd or TIME_LOG_SD for m in measurements])

    # imported here: scipy.optimize takes half a second to import, and `plan` reads this module
    # (calibrated_uncertainty) without fitting anything
    from scipy.optimize import least_squares

    def solve(keep: np.ndarray, u0: np.ndarray) -> np.ndarray:
        runs = [m for m, k in zip(measurements, keep) if k]
        use_time, use_memory = timed[keep], weighed[keep]
        target, sd = measured[keep], time_sd[keep][use_time]

        def residuals(u: np.ndarray) -> np.ndarray:
            predicted = _log_predictions(predict, {**start, **space.values(u)}, runs)
            return np.concatenate([(target[use_time, 0] - predicted[use_time, 0]) / sd,
                                   (target[use_memory, 1] - predicted[use_memory, 1]) / MEMORY_LOG_SD,
                                   space.prior_residuals(u)])

        result = least_squares(residuals, u0, bounds=(space.u_lower, space.u_upper), loss="soft_l1",
                               f_scale=ROBUST_SCALE, diff_step=1e-3, x_scale=1.0, max_nfev=40 * (len(u0) + 1))
        return result.x

    everything = np.ones(len(measurements), dtype=bool)
    u_fit = solve(everything, space.u(start))
    after = {**start, **space.values(u_fit)}
    final = _log_predictions(predict, after, measurements)
    loo = [None] * len(measurements)
    if leave_one_out and timed.sum() >= 2:
        for i in np.flatnonzero(timed):
            keep = everything.copy()
            keep[i] = False
            u_without = solve(keep, u_fit)
            loo[i] = float(predict({**start, **space.values(u_without)}, measurements[i])[0])
    runs = tuple(RunFit(m, float(np.exp(b[0])), float(np.exp(f[0])), float(np.exp(f[1])), loo_s)
                 for m, b, f, loo_s in zip(measurements, base, final, loo))
    residuals = np.array([r.residual for r in runs if r.residual is not None])
    loo_errors = np.array([r.loo_error for r in runs if r.loo_error is not None])
    parameters = tuple(ParameterFit(n, start[n], after[n], split_name(n)[0].unit, n in informed, float(s))
                       for n, s in zip(names, reach))
    return Fit(parameters, runs, residual_log_sd=float(np.sqrt(np.mean(residuals ** 2))),
               loo_log_sd=float(np.sqrt(np.mean(loo_errors ** 2))) if loo_errors.size else None)


# -- choosing what to measure -------------------------------------------------------------------

def information_log_det(slopes: np.ndarray, names: list[str]) -> float:
    """log det of the fit's information about the parameters: J^T J / sigma^2 + prior precision,
    with J the runs' d log(time) / du (runs x parameters). Larger: the runs pin the parameters better."""
    sigma = np.array([prior(n)[1] for n in names])
    information = slopes.T @ slopes / TIME_LOG_SD ** 2 + np.diag(1.0 / sigma ** 2)
    return float(np.linalg.slogdet(information)[1])


@dataclass(frozen=True)
class Suggestion:
    chosen: tuple[int, ...]       # indices into the candidates, in the order picked
    names: tuple[str, ...]        # the parameters the candidates inform
    slopes: np.ndarray            # per candidate, d log(time) / du over `names`


def _novelty(chosen: list[Measurement], candidates: list[Measurement]) -> np.ndarray:
    """Per candidate: how many of its tp, pp, dp, micro-batch size and placement no chosen run has yet."""
    def key(m: Measurement) -> tuple:
        s = m.strategy
        return s.tp, s.pp, s.dp, s.micro_batch_size, s.placement
    seen = [set(values) for values in zip(*(key(m) for m in chosen))] or [set()] * 5
    return np.array([sum(v not in seen[i] for i, v in enumerate(key(m))) for m in candidates], dtype=float)


def suggest(candidates: list[Measurement], predict: Predict, names: list[str], count: int, *,
            start: dict[str, float] | None = None) -> Suggestion:
    """Pick `count` candidates greedily by D-optimality: each adds the run that most raises log det
    of the information (matrix determinant lemma), less a price for a long run, plus a bonus for
    a tp, pp, dp, micro-batch size or placement not yet covered (which alone decides when no run informs any
    parameter)."""
    base, slopes = sensitivities(candidates, predict, names, start)
    informed = np.abs(slopes[:, :, 0]).max(axis=0) > SENSITIVITY_FLOOR
    J = slopes[:, informed, 0]
    kept = [n for n, keep in zip(names, informed) if keep]
    sigma = np.array([prior(n)[1] for n in kept])
    information = np.diag(1.0 / sigma ** 2)
    price = COST_WEIGHT * (base[:, 0] - base[:, 0].min())
    chosen: list[int] = []
    for _ in range(min(count, len(candidates))):
        projected = J @ np.linalg.inv(information)
        gain = np.log1p(np.einsum("ij,ij->i", projected, J) / TIME_LOG_SD ** 2)
        score = gain - price + SPREAD_WEIGHT * _novelty([candidates[i] for i in chosen], candidates)
        score[chosen] = -np.inf
        pick = int(np.argmax(score))
        chosen.append(pick)
        information = information + np.outer(J[pick], J[pick]) / TIME_LOG_SD ** 2
    return Suggestion(tuple(chosen), tuple(kept), J)


# -- bound to a scenario ------------------------------------------------------------------------

def scenario_parameters(scenario: Scenario) -> list[str]:
    """The parameters this scenario's GPU types and link classes use."""
    groups = scenario.cluster.nodes
    links = [g.intra_link_class for g in groups if g.gpus_per_node > 1]
    if scenario.cluster.num_nodes > 1:
        links += [g.inter_link_class for g in groups]
    return parameter_names(list(dict.fromkeys(g.gpu.name for g in groups)), list(dict.fromkeys(links)),
                           scenario.training.framework,
                           execution_key(scenario.training.framework, scenario.training.compile))


def current_values(scenario: Scenario, names: list[str]) -> dict[str, float]:
    params = scenario.params
    return {n: params(*n.split(".", 1)) for n in names}


def with_values(scenario: Scenario, values: dict[str, float], **fields) -> Scenario:
    """The scenario with these parameter values in its calibration (others as calibrated before)."""
    merged = {**scenario.calibration.as_dict(), **values}
    return replace(scenario, calibration=Calibration(values=tuple(sorted(merged.items())), **fields))


def scenario_predictor(scenario: Scenario) -> Predict:
    """predict(values, run) through `evaluate` on the scenario calibrated to `values`; the cost
    model's caches are shared by every run predicted with the same values."""
    last: dict = {}

    def predict(values: dict[str, float], measurement: Measurement) -> tuple[float, float]:
        key = tuple(sorted(values.items()))
        if last.get("key") != key:
            calibrated = with_values(scenario, values)
            last.update(key=key, scenario=calibrated, cost=CostModel(calibrated))
        prediction = evaluate(last["scenario"], measurement.strategy, last["cost"], field=measurement.field)
        return prediction.iteration_time_s, prediction.peak_memory_bytes

    return predict


def pin_partitions(scenario: Scenario, measurements: list[Measurement]) -> list[Measurement]:
    """Fill in the partition and placement `evaluate` would choose, once: a partition that changed
    while the parameters move would make the fit's objective jump."""
    cost = CostModel(scenario)
    pinned = []
    for m in measurements:
        chosen = evaluate(scenario, m.strategy, cost, field=m.field).strategy
        pinned.append(replace(m, strategy=replace(m.strategy, partition=chosen.partition, placement=chosen.placement)))
    return pinned


@dataclass(frozen=True)
class Calibrated:
    scenario: Scenario            # with the new calibration section
    fit: Fit
    notes: tuple[str, ...]        # where the calibrated model still disagrees about memory


def _significant(value: float, digits: int = 4) -> float:
    return float(f"{value:.{digits}g}")


def calibrate(scenario: Scenario, measurements: list[Measurement], *, source: str = "",
              leave_one_out: bool = True) -> Calibrated:
    """Fit the scenario's parameters to the measured runs; the result carries the fitted values in
    its `calibration:` section with where they came from and the residual spread."""
    names = scenario_parameters(scenario)
    pinned = pin_partitions(scenario, measurements)
    result = fit(pinned, scenario_predictor(scenario), names, start=current_values(scenario, names),
                 leave_one_out=leave_one_out)
    timed = sum(1 for m in pinned if m.timed)
    fitted = sum(1 for p in result.parameters if p.fitted)
    # Leave-one-out measures the fit's error only where the runs outnumber what they fit: with
    # fewer, each left-out run is matched by moving the parameters it alone informs, and the band
    # it gives says nothing about a strategy not measured (4 runs for 12 parameters showed +-1%).
    loo = result.loo_log_sd if timed > fitted else None
    values = {}
    for name, value in result.values.items():
        lower, upper = bounds(name)
        values[name] = min(max(_significant(value), lower), upper)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    calibrated = with_values(
        scenario, values,
        source=f"amp-tui calibrate, {len(measurements)} measurements{f' from {source}' if source else ''}, {date}",
        residual_log_sd=_significant(result.residual_log_sd),
        loo_log_sd=None if loo is None else _significant(loo))
    return Calibrated(calibrated, result, tuple(_fit_notes(result, timed, fitted) + _memory_notes(calibrated, pinned)))


# Runs that disagree with every setting of the parameters by more than this (rms of log measured /
# predicted after the fit; 25%), or that predict each other this badly (leave-one-out; 50%), are
# more likely mistyped or from different setups than a model error.
DISAGREE_RESIDUAL = math.log(1.25)
DISAGREE_LOO = math.log(1.5)


def _fit_notes(result: Fit, timed: int, fitted: int) -> list[str]:
    notes = []
    if timed <= fitted:
        notes.append(f"{timed} timed run{'s' if timed != 1 else ''} for {fitted} fitted parameters: too few to "
                     f"measure how far off a strategy not measured is, so predictions keep the uncalibrated band "
                     f"(or none); measure at least {fitted + 1 - timed} more (`calibrate --suggest`)")
    loo = result.loo_log_sd or 0.0
    if result.residual_log_sd > DISAGREE_RESIDUAL or loo > DISAGREE_LOO:
        notes.append(f"warning: these runs disagree with each other: {math.expm1(result.residual_log_sd):.0%} off "
                     f"after the fit" + (f", {math.expm1(loo):.0%} leave-one-out" if loo else "")
                     + ": check each run's strategy, units and warm-up before trusting the calibrated scenario")
    return notes


def _memory_notes(scenario: Scenario, measurements: list[Measurement]) -> list[str]:
    notes = []
    cost = CostModel(scenario)
    for m in measurements:
        prediction = evaluate(scenario, m.strategy, cost, field=m.field)
        if m.out_of_memory and prediction.fits_memory:
            tight = prediction.tightest_stage
            notes.append(f"{m.field} ran out of memory but is still predicted to fit "
                         f"({format_bytes(tight.memory.total_bytes)} of {format_bytes(tight.capacity_bytes)})")
        elif m.timed and not prediction.fits_memory:
            notes.append(f"{m.field} ran but is predicted not to fit: {prediction.reason}")
    return notes


def calibrated_uncertainty(scenario: Scenario) -> float | None:
    """A calibrated scenario's one-sigma relative band on a predicted iteration time (0.08: within
    about 8%), or None when the scenario is not calibrated, or was calibrated from too few runs to
    say (no leave-one-out error: one run, or no more runs than fitted parameters). The larger of the
    in-sample residual spread and the leave-one-out error: the latter is what a run not among the
    measurements sees."""
    calibration = scenario.calibration
    if not calibration.values or calibration.loo_log_sd is None:
        return None
    return math.expm1(max(calibration.residual_log_sd or 0.0, calibration.loo_log_sd))


def calibrated_without_band(scenario: Scenario) -> bool:
    """Whether the scenario is calibrated but from too few runs to measure its own error."""
    return bool(scenario.calibration.values) and scenario.calibration.loo_log_sd is None


def suggest_measurements(scenario: Scenario, count: int) -> list[tuple[Measurement, float, float]]:
    """`count` runs worth measuring, each (run with iteration_time_s blank, predicted seconds,
    predicted peak bytes): feasible strategies of the search's enumeration with their best
    partition, chosen by `suggest`."""
    from amp_tui.core.search.partition.walk import best_partition
    from amp_tui.core.search.search import enumerate_candidates
    from amp_tui.core.spec.knobs import fixed_knobs, resolve

    if count < 1:
        raise SpecError("--suggest", count, "must be at least 1")
    keys = enumerate_candidates(scenario)
    if len(keys) > SUGGEST_CANDIDATES:   # every k-th, to keep the spread of degrees and sizes
        keys = keys[::math.ceil(len(keys) / SUGGEST_CANDIDATES)]
    cost = CostModel(scenario)
    auto = [k for k in KNOB_FIELDS if k not in fixed_knobs(scenario.training)]
    feasible = []
    for key in keys:
        candidate = cost.candidate(*key)
        partition = best_partition(candidate).partition
        if partition is None:
            continue
        prediction = candidate.predict(partition)
        if not prediction.fits_memory:
            continue
        strategy = prediction.strategy
        knobs = resolve(strategy, scenario.training)   # what the run must use where training says auto
        strategy = replace(strategy, **{k: getattr(knobs, k) for k in auto})
        room = prediction.tightest_stage.memory.total_bytes / prediction.tightest_stage.capacity_bytes
        feasible.append((strategy, prediction, room))
    if not feasible:
        raise SpecError("scenario", scenario.name, "no strategy fits in memory, so there is nothing to measure")
    roomy = [entry for entry in feasible if entry[2] <= MEMORY_HEADROOM]
    if len(roomy) >= count:
        feasible = roomy
    candidates = [Measurement(i, strategy) for i, (strategy, _, _) in enumerate(feasible)]
    names = scenario_parameters(scenario)
    picked = suggest(candidates, scenario_predictor(scenario), names, count, start=current_values(scenario, names))
    return [(replace(candidates[i], index=n), feasible[i][1].iteration_time_s, feasible[i][1].peak_memory_bytes)
            for n, i in enumerate(picked.chosen)]
