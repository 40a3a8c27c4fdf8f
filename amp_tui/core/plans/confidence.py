"""How sure a prediction is: a +- band on iteration time, from the calibration's residuals where
the scenario is calibrated, else from `amp-tui validate`'s error on comparable published runs
(same GPU generation, homogeneous or mixed cluster); none where no such run was replayed (any
mixed cluster), and then it says so rather than borrow another class's band."""

from __future__ import annotations

from dataclasses import dataclass

from amp_tui.core.spec.scenario import Scenario


@dataclass(frozen=True)
class Confidence:
    band: float | None   # one-sigma relative band: 0.15 means within about 15% (None: no band)
    source: str          # where the band comes from, or why there is none, for the user

    def describe(self) -> str:
        return f"±{self.band:.0%} ({self.source})" if self.band is not None else f"without an error band ({self.source})"


def confidence(scenario: Scenario) -> Confidence:
    from amp_tui.core.calibration.calibrate import calibrated_uncertainty, calibrated_without_band
    from amp_tui.core.validation.bands import band_basis, uncertainty

    calibrated = calibrated_uncertainty(scenario)
    if calibrated is not None:
        return Confidence(calibrated, "calibrated: leave-one-out error of its measurements")
    basis = band_basis(scenario)
    if calibrated_without_band(scenario):
        basis = ("calibrated from too few runs to measure its own error; the published runs' band: "
                 + basis.removeprefix("uncalibrated: "))
    return Confidence(uncertainty(scenario), basis)


def within_band(times: list[float], band: float | None) -> int:
    """How many of the ranked times (best first) lie within the band of the best: strategies the
    model cannot tell apart from the first (0 without a band: nobody knows)."""
    if not times or band is None:
        return 0
    return sum(1 for t in times if t <= times[0] * (1.0 + band) ** 2)


# Peak memory is predicted about this well: `amp-tui validate`'s mean error on the published runs
# whose peak memory was measured (10.4%; a test keeps this at least that and near it).
MEMORY_BAND = 0.11


def memory_at_risk(prediction) -> bool:
    """Whether the fullest stage is predicted to fit, but within the memory band of its capacity:
    a real run might not fit."""
    stage = prediction.tightest_stage
    return prediction.fits_memory and stage.memory.total_bytes * (1.0 + MEMORY_BAND) > stage.capacity_bytes


MEMORY_RISK_NOTE = (f"! within {MEMORY_BAND:.0%} of the GPU's capacity, the memory model's error on measured runs: "
                    "it may not fit")
