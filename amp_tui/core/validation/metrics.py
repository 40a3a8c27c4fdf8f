"""Error measures of predictions against measurements: pure functions of plain sequences.

Errors are fractions (0.1 is 10%). A measure over nothing is None, never NaN, so reports stay
strict JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def abs_errors(predicted: Sequence[float], measured: Sequence[float]) -> np.ndarray:
    """|predicted - measured| / measured, per pair."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    if p.shape != m.shape:
        raise ValueError(f"{p.size} predictions for {m.size} measurements")
    if np.any(m <= 0):
        raise ValueError("measurements must be positive")
    return np.abs(p - m) / m


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    errors = abs_errors(predicted, measured)
    return float(errors.mean()) if errors.size else None


def median_ape(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    errors = abs_errors(predicted, measured)
    return float(np.median(errors)) if errors.size else None


def median_error(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Median signed error (predicted / measured - 1): below 0, predictions run fast."""
    p, m = np.asarray(predicted, dtype=np.float64), np.asarray(measured, dtype=np.float64)
    abs_errors(p, m)  # the same checks
    return float(np.median(p / m - 1)) if p.size else None


def share_within(predicted: Sequence[float], measured: Sequence[float], tolerance: float) -> float | None:
    """Share of the pairs whose error is at most `tolerance`."""
    errors = abs_errors(predicted, measured)
    return float(np.mean(errors <= tolerance + 1e-12)) if errors.size else None


def error_quantile(predicted: Sequence[float], measured: Sequence[float], q: float) -> float | None:
    errors = abs_errors(predicted, measured)
    return float(np.quantile(errors, q)) if errors.size else None


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n; tied values share the mean of the ranks they span."""
    x = np.asarray(values, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    # Runs of equal values: their first and last positions in sorted order.
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    ends = np.concatenate([starts[1:], [x.size]])
    mean_rank = (starts + ends + 1) / 2.0          # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(x.size)
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation with average ranks for ties; None when either side is constant
    or there are fewer than two pairs."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}")
    if len(x) < 2:
        return None
    rx, ry = average_ranks(x), average_ranks(y)
    dx, dy = rx - rx.mean(), ry - ry.mean()
    denominator = float(np.sqrt((dx * dx).sum() * (dy * dy).sum()))
    return float((dx * dy).sum() / denominator) if denominator > 0 else None


def median_group_spearman(groups: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                          min_size: int = 3) -> tuple[float | None, int]:
    """(median over groups of Spearman(predicted, measured), groups counted); a group counts when it
    has at least `min_size` pairs and a defined correlation."""
    values = [rho for predicted, measured in groups.values() if len(predicted) >= min_size
              if (rho := spearman(predicted, measured)) is not None]
    return (float(np.median(values)) if values else None), len(values)


def top_pick_ratio(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Measured time of the run predicted fastest over the fastest measured (1.0: the right pick;
    ties in the prediction take the first)."""
    if len(predicted) != len(measured):
        raise ValueError(f"{len(predicted)} predictions for {len(measured)} measurements")
    if not len(measured):
        return None
    return float(measured[int(np.argmin(predicted))] / min(measured))


def worst_group_top_pick(groups: Mapping[str, tuple[Sequence[float], Sequence[float]]],
                         min_size: int = 3) -> float | None:
    """The largest top-pick ratio over the groups of at least `min_size` runs."""
    ratios = [top_pick_ratio(p, m) for p, m in groups.values() if len(p) >= min_size]
    return max(ratios) if ratios else None


def memory_agreement(measured_oom: Iterable[bool], predicted_fits: Iterable[bool]) -> dict[str, int]:
    """Counts of the two disagreements: runs that ran out of memory but are predicted to fit, and
    runs that ran but are predicted not to fit."""
    pairs = list(zip(measured_oom, predicted_fits, strict=True))
    return {"oom_runs": sum(1 for oom, _ in pairs if oom),
            "oom_predicted_to_fit": sum(1 for oom, fits in pairs if oom and fits),
            "ran_runs": sum(1 for oom, _ in pairs if not oom),
            "ran_predicted_oom": sum(1 for oom, fits in pairs if not oom and not fits)}


def macro(values: Iterable[float | None]) -> float | None:
    """Mean of the defined values (one per source), None when there are none."""
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None
