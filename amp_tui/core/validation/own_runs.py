"""Your own runs as replay cases: a `calibrate` measurements file (runs of one scenario, each a
strategy with its measured time) scored by `validate --runs FILE --scenario SCENARIO` the way the
published runs are, so the file that calibrates a cluster can also be checked against the model."""

from __future__ import annotations

from pathlib import Path

from amp_tui.core.calibration.measurements import load_measurements
from amp_tui.core.spec.knobs import resolve
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.validation.runs import Measured, ReplayCase


def measurement_cases(path: Path, scenario: Scenario) -> list[ReplayCase]:
    """Each entry of the measurements file as a case on `scenario`: one source (the file's name)
    and one group (its strategies are ranked against each other)."""
    source = path.stem
    gpus = sorted({group.gpu.name for group in scenario.cluster.nodes})
    cases = []
    for m in load_measurements(path, scenario):
        knobs = resolve(m.strategy, scenario.training)
        cases.append(ReplayCase(
            id=f"{source}[{m.index}]", source=source, group=scenario.name, gpu="+".join(gpus),
            heterogeneous=len(gpus) > 1, precision=scenario.training.precision, recompute=knobs.recompute,
            zero_stage=knobs.zero_stage, sequence_parallel=knobs.sequence_parallel, cp=knobs.cp,
            virtual_stages=knobs.virtual_stages, ep=knobs.ep, scenario=scenario, strategy=m.strategy,
            measured=Measured(m.iteration_time_s, "measured", m.peak_memory_bytes, m.out_of_memory),
            amp_predicted_s=None,
            data_gaps=() if m.timed or m.out_of_memory else ("no iteration_time_s",)))
    return cases
