"""Measured layer times from a profile file (`amp-tui profile`, spec/profiles.py) at any micro-batch size.

A profile holds, per layer, GPU type and tensor-parallel degree, the forward and backward seconds of
one micro-batch at a few sizes (say 1, 2, 4, 8), measured at the shard shape without the
collectives. Between two measured sizes the time is interpolated linearly (a layer's time is close
to affine in its micro-batch: a fixed part, kernel launches and the host, and a part per sample).
Outside them it is carried by the analytic model:

  above the largest size m_hi   t(m) = t(m_hi) + max(slope of the last two sizes x (m - m_hi),
                                                    analytic(m) - analytic(m_hi))
  below the smallest size m_lo  t(m) = max(t(m_lo) - (analytic(m_lo) - analytic(m)), t(m_lo) m / m_lo)

so that extra samples always cost at least what their FLOPs and bytes take, and a smaller
micro-batch is never cheaper per sample than the smallest one measured. Measure the sizes you plan
to run: the profile's own rows are exact.
"""

from __future__ import annotations

import numpy as np


def _carried(points_m: np.ndarray, points_t: np.ndarray, mbs: np.ndarray, analytic: np.ndarray,
             analytic_at: callable) -> np.ndarray:
    """One layer's time at each micro-batch size in `mbs` from its measured (m, t) points;
    `analytic` is the analytic time at each of `mbs`, `analytic_at(m)` at one measured size."""
    inside = np.interp(mbs, points_m, points_t)
    lo_m, lo_t, hi_m, hi_t = points_m[0], points_t[0], points_m[-1], points_t[-1]
    slope = (hi_t - points_t[-2]) / (hi_m - points_m[-2]) if len(points_m) > 1 else 0.0
    above = hi_t + np.maximum(max(slope, 0.0) * (mbs - hi_m), analytic - analytic_at(hi_m))
    below = np.maximum(lo_t - (analytic_at(lo_m) - analytic), lo_t * mbs / lo_m)
    return np.where(mbs > hi_m, above, np.where(mbs < lo_m, below, inside))


def measured_passes(layers, gpu_name: str, tp: int, mbs: np.ndarray, analytic_forward: np.ndarray,
                    analytic_for: callable, backward_ratio: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(measured?, forward seconds, backward seconds, checkpointed forward + backward seconds or
    NaN where not measured) per layer (columns) and micro-batch size (rows of `mbs`, shape
    (rows, 1)) for the layers a profile measured on this GPU type at this tp.
    `analytic_forward` is the analytic forward time (rows, layers); `analytic_for(m)` the same at
    one size, (layers,). The analytic backward is `backward_ratio` forwards."""
    sizes = mbs[:, 0]
    have = np.zeros(len(layers), dtype=bool)
    forward = np.zeros_like(analytic_forward)
    backward = np.zeros_like(analytic_forward)
    recompute = np.full_like(analytic_forward, np.nan)
    cache: dict = {}

    def at(m: float) -> np.ndarray:
        if m not in cache:
            cache[m] = analytic_for(m)
        return cache[m]

    done: dict[int, int] = {}     # repeated copies share one table: compute it once
    for index, layer in enumerate(layers):
        table = layer.measured_passes(gpu_name, tp)
        if not table:
            continue
        have[index] = True
        if id(table) in done:
            source = done[id(table)]
            for array in (forward, backward, recompute):
                array[:, index] = array[:, source]
            continue
        done[id(table)] = index
        points = np.array(table, dtype=np.float64)
        column = analytic_forward[:, index]
        for array, values, ratio in ((forward, points[:, 1], 1.0), (backward, points[:, 2], backward_ratio),
                                     (recompute, points[:, 3], 2.0 + backward_ratio)):
            if np.isnan(values).any():    # not measured at every size (or at all): the caller's formula
                continue
            array[:, index] = _carried(points[:, 0], values, sizes, ratio * column,
                                       lambda m, ratio=ratio: ratio * at(m)[index])
    return have, forward, backward, recompute

