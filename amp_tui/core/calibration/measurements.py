"""Measurements files: strategies a user ran on their own cluster, with what they measured.

A measurements file is a YAML list; each entry is a strategy as `amp-tui evaluate` reads it (tp, pp,
dp, micro_batch_size, optional partition, placement and the technique knobs) plus

    iteration_time_s: 1.23      # seconds per training iteration, measured (steady state)
    peak_memory: 14.2 GiB       # optional: the fullest GPU's peak (bytes or a unit string)
    out_of_memory: true         # optional: the run did not fit; it needs no iteration_time_s

`amp-tui calibrate --suggest` writes one with `iteration_time_s` left blank for the user to fill.
Every mistake is one SpecError naming the entry and the field: `measurements[2].iteration_time_s`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import parse_bytes, parse_number
from amp_tui.core.base.yamlio import load_yaml_document
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import KNOB_FIELDS, Strategy, parse_strategy
from amp_tui.core.spec.validity import validate_strategy

MEASURED_FIELDS = ("iteration_time_s", "peak_memory", "out_of_memory")
STRATEGY_FIELDS = ("tp", "pp", "dp", "micro_batch_size", "partition", "placement", *KNOB_FIELDS)


@dataclass(frozen=True)
class Measurement:
    """One measured run (or, with nothing measured yet, a run to make)."""

    index: int                       # its entry number in the file, for messages
    strategy: Strategy
    iteration_time_s: float | None = None
    peak_memory_bytes: float | None = None
    out_of_memory: bool = False
    # The time's own uncertainty in log units where the run states it (a training log's spread,
    # core/calibration/log_runs.py); None: the fit's TIME_LOG_SD.
    time_log_sd: float | None = None

    @property
    def field(self) -> str:
        return f"measurements[{self.index}]"

    @property
    def timed(self) -> bool:
        return self.iteration_time_s is not None and not self.out_of_memory

    def to_dict(self) -> dict:
        out = self.strategy.to_dict()
        out["iteration_time_s"] = self.iteration_time_s
        if self.peak_memory_bytes is not None:
            out["peak_memory"] = self.peak_memory_bytes
        if self.out_of_memory:
            out["out_of_memory"] = True
        return out


def parse_measurement(value: object, index: int, *, blank_ok: bool = False) -> Measurement:
    """One entry. `blank_ok` accepts an empty iteration_time_s (a suggestion not yet run)."""
    field = f"measurements[{index}]"
    if not isinstance(value, dict):
        raise SpecError(field, value, "expected a mapping: a strategy (tp, pp, dp, micro_batch_size) "
                                      "and its iteration_time_s")
    for key in value:
        if key not in STRATEGY_FIELDS and key not in MEASURED_FIELDS:
            raise SpecError(f"{field}.{key}", value[key],
                            f"unknown field; allowed: {', '.join(STRATEGY_FIELDS + MEASURED_FIELDS)}")
    strategy = parse_strategy({k: v for k, v in value.items() if k in STRATEGY_FIELDS}, field)
    out_of_memory = value.get("out_of_memory", False)
    if not isinstance(out_of_memory, bool):
        raise SpecError(f"{field}.out_of_memory", out_of_memory, "expected true or false")
    time = value.get("iteration_time_s")
    if time is not None:
        time = float(parse_number(time, f"{field}.iteration_time_s", positive=True))
    elif not (out_of_memory or blank_ok):
        raise SpecError(f"{field}.iteration_time_s", time,
                        "required: the measured seconds per iteration (or out_of_memory: true)")
    peak = value.get("peak_memory")
    if peak is not None:
        peak = parse_bytes(peak, f"{field}.peak_memory")
    return Measurement(index, strategy, time, peak, out_of_memory)


def parse_measurements(data: object, scenario: Scenario, *, blank_ok: bool = False) -> list[Measurement]:
    """Every entry, each checked against the scenario (the strategy must run on its cluster)."""
    if isinstance(data, dict) and "measurements" in data:
        data = data["measurements"]
    if not isinstance(data, list) or not data:
        raise SpecError("measurements", type(data).__name__ if data else data,
                        "expected a list of measured runs (tp, pp, dp, micro_batch_size, iteration_time_s)")
    measurements = []
    for index, entry in enumerate(data):
        measurement = parse_measurement(entry, index, blank_ok=blank_ok)
        validate_strategy(scenario, measurement.strategy, measurement.field)
        measurements.append(measurement)
    if not blank_ok and not any(m.timed for m in measurements):
        raise SpecError("measurements", "every run out of memory",
                        "nothing to fit: give at least one run's iteration_time_s")
    return measurements


def load_measurements(path: str | Path, scenario: Scenario) -> list[Measurement]:
    """A measurements file's entries; errors name the file too when it is not a YAML list."""
    return parse_measurements(load_yaml_document(path, "a list of measured runs"), scenario)


def measurements_yaml(measurements: list[Measurement], header: str = "") -> str:
    """A measurements file (what --suggest writes): entries keep `iteration_time_s: null` to fill in."""
    # Block entries with inline lists: one line per field, easy to fill in by hand.
    return header + yaml.safe_dump([m.to_dict() for m in measurements], default_flow_style=None, sort_keys=False,
                                   width=1000)
