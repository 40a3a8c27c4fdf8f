"""A floor that couples the pipeline's bottleneck with the tail by work, not by layer counts.

A low bottleneck M caps the work the stages with a fast all-reduce can hold, so the others must
hold the rest, and the parameters that come with it, and all-reduce them: the pipeline and the
tail cannot both be at their own floors. The whole-layer coupling of floors._coupled_floors counts
core layers and gives each the fewest parameters of any; on uneven layers (a thousand sublayers of
different widths) that lets a slow stage hold many cheap layers with few parameters, and it sees
only the first few thresholds above the least bottleneck, a sliver of it where layers are many.
This one measures work in the fastest GPU's layer times instead:

  - stage s, busy at most M, holds at most A_s(M) = min((M - f_s) / rho_s, cap_s) of that work
    (rho_s its least slow-down over the core layers, f_s its cheapest sends, cap_s what its memory
    can hold, floors._stage_caps);
  - any set T of stages then holds at least W - sum over the others of A_s(M) of the W in all,
    and holding work w takes at least G(w) parameters, G the least over fractions of layers
    (the layers by parameters per unit of work, fewest first: convex, rising);
  - with those parameters spread over T so that their tails e_s P_s + c_s are equal, the
    largest is at least (G + sum_T c_s / e_s) / sum_T 1 / e_s (negative shares are allowed, so
    that is below the true least); T runs over the stages with the slowest tails, 1 to pp of them.

Over M in [m_r, m_{r+1}) the pipeline is at least its floor from m_r and the tail at least the
coupled one at m_{r+1} (A_s only grows with M); beyond the last point, the memory caps alone. The
points run from the least bottleneck to GRID_SPAN above it: the iteration is at least the least
over those ranges. Where backward hides up to h x a stage's compute of its all-reduce, either the
steady state counts B - 1 - h bottlenecks and the tail is whole, or the tail is the optimizer's
step alone (its constants still paid), and each range takes the larger.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

GRID_POINTS = 48      # ranges of the bottleneck the coupled floor bounds separately
GRID_SPAN = 0.25      # ... from its least value up to this share above it


def least_params(work: np.ndarray, params: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cumulative work, cumulative parameters) of the layers taken fewest parameters per unit
    of work first, from 0: G(w) is the interpolation at w (the least parameters over fractions of
    layers whose work adds up to w)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(work > 0, params / np.where(work > 0, work, 1.0), np.inf)
    order = np.argsort(ratio, kind="stable")
    return (np.concatenate([[0.0], np.cumsum(work[order])]), np.concatenate([[0.0], np.cumsum(params[order])]))


def coupled_tail_floors(pipeline: Callable[[np.ndarray, np.ndarray], np.ndarray], lowest: np.ndarray,
                        rho: np.ndarray, sends: np.ndarray, caps: np.ndarray, work: np.ndarray,
                        curves: list[tuple[np.ndarray, np.ndarray]], variants: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
                        ) -> np.ndarray:
    """Per row (candidate), the floor of the module docstring. `pipeline(steps, lowest)` bounds
    steps x M + S(M) over M >= lowest (flat arrays, n x points long, row-major); `lowest` (n,) a
    floor on the bottleneck; `rho`, `sends`, `caps` (n, pp) as A_s above; `work` (n,) W;
    `curves` per row least_params's arrays; `variants` (steps (n,), coef (n, pp), const (n, pp))
    for each way of counting the tail (see the module), each range taking the larger."""
    n, pp = rho.shape
    points = lowest[:, None] * (1.0 + GRID_SPAN * np.arange(GRID_POINTS + 1) / GRID_POINTS)[None, :]    # (n, P)
    held = np.minimum(np.maximum(points[:, :, None] - sends[:, None, :], 0.0) / rho[:, None, :], caps[:, None, :])
    # the range from point r uses the capacities at point r + 1; the last, the memory caps alone
    held = np.concatenate([held[:, 1:, :], caps[:, None, :]], axis=1)                                # (n, P, pp)
    total = np.full(points.shape, -np.inf)
    for steps, coef, const in variants:
        slowest = np.argsort(-coef, axis=1, kind="stable")                 # the slowest tails first
        coef_s = np.take_along_axis(coef, slowest, axis=1)
        const_s = np.take_along_axis(const, slowest, axis=1)
        held_s = np.take_along_axis(held, slowest[:, None, :], axis=2)
        # T = the first k stages: the others hold at most the capacities of stages k + 1 ... pp
        others = np.concatenate([np.cumsum(held_s[:, :, ::-1], axis=2)[:, :, ::-1][:, :, 1:],
                                 np.zeros((n, points.shape[1], 1))], axis=2)                   # (n, P, pp)
        need = np.maximum(work[:, None, None] - others, 0.0)
        params = np.empty_like(need)
        for row, (cum_work, cum_params) in enumerate(curves):
            params[row] = np.interp(need[row], cum_work, cum_params)
        with np.errstate(divide="ignore", invalid="ignore"):
            inverse = np.cumsum(np.where(coef_s > 0, 1.0 / coef_s, np.inf), axis=1)            # (n, pp)
            shifted = np.cumsum(np.where(coef_s > 0, const_s / coef_s, 0.0), axis=1)
            tail = np.where(np.isfinite(inverse)[:, None, :], (params + shifted[:, None, :]) / inverse[:, None, :],
                            -np.inf).max(axis=2)
        tail = np.maximum(tail, const.max(axis=1)[:, None]) * (1.0 - 1e-9)     # (a hair lower, against rounding)
        flow = pipeline(np.repeat(np.maximum(steps, 0.0), points.shape[1]), points.ravel()).reshape(points.shape)
        total = np.maximum(total, np.where((steps >= 0)[:, None], flow + tail, -np.inf))
    return total.min(axis=1)
