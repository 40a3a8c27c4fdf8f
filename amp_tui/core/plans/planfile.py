"""Plan files: one self-contained YAML file holding a scenario, a chosen strategy and its prediction.

A plan is what `amp-tui plan --save` writes and what `amp-tui evaluate` and `amp-tui export` read:

    format: amp-tui/plan/1
    amp_tui_version: 0.1.0
    created: '2025-01-31T12:00:00Z'
    scenario: {...}      # Scenario.to_dict(): presets resolved, so the file stands alone
    strategy: {...}      # tp, pp, dp, micro_batch_size, partition, placement (all required)
    prediction: {...}    # the figures predicted when the plan was saved
    end: amp-tui/plan/1  # the last line: a file without it was cut short

The sections are written in that order on purpose: a file cut short anywhere lacks `end` (or more),
so `load_plan` refuses it, whatever else survived. The saved prediction is checked for shape and
kind (every figure a finite number, one entry per stage) but is only a record: `amp-tui evaluate`
recomputes it and `prediction_changes` says what moved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from amp_tui import __version__
from amp_tui.core.base.errors import SpecError, one_line
from amp_tui.core.base.units import format_bytes
from amp_tui.core.base.yamlio import atomic_write, dump_yaml, load_yaml_document
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.spec.scenario import Scenario, load_scenario, parse_scenario, scenario_from_file
from amp_tui.core.spec.strategy import Strategy, parse_strategy
from amp_tui.core.spec.validity import validate_strategy

PLAN_FORMAT = "amp-tui/plan/1"
_FORMAT_PREFIX = "amp-tui/plan/"
_PLAN_KEYS = ("format", "amp_tui_version", "created", "scenario", "strategy", "prediction", "end")
_STRATEGY_KEYS = ("tp", "pp", "dp", "micro_batch_size", "partition", "placement")

# The figures `prediction_changes` compares, in the order a person reads them, and how to show them.
HEADLINE_FIGURES = (
    "iteration_time_s", "samples_per_s", "num_micro_batches", "fits_memory", "peak_memory_bytes",
    "bubble_fraction", "steady_state_s", "fill_drain_s", "dp_and_optimizer_s", "dp_allreduce_s",
)


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    strategy: Strategy                  # partition and placement always filled in
    saved_prediction: dict = field(hash=False)   # the `prediction` section as saved
    version: str = __version__          # amp-tui version that wrote the file
    created: str = ""                   # ISO-8601 UTC time the file was written


def plan_dict(scenario: Scenario, prediction: Prediction, *, created: str | None = None) -> dict:
    """The plan file's content for one predicted strategy of `scenario`."""
    strategy = prediction.strategy
    if strategy.partition is None or strategy.placement is None:
        raise SpecError("strategy", strategy.label, "a plan needs the partition and placement filled in")
    validate_strategy(scenario, strategy)
    figures = {k: v for k, v in prediction.to_dict().items() if k not in _STRATEGY_KEYS}
    return {
        "format": PLAN_FORMAT,
        "amp_tui_version": __version__,
        "created": created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scenario": scenario.to_dict(),
        "strategy": strategy.to_dict(),
        "prediction": _plain(figures),
        "end": PLAN_FORMAT,
    }


def save_plan(path: str | Path, scenario: Scenario, prediction: Prediction, *, overwrite: bool = False) -> Path:
    """Write the plan atomically. An existing file is kept (SpecError) unless `overwrite`."""
    data = plan_dict(scenario, prediction)
    strategy = prediction.strategy
    degrees = strategy.to_dict()     # per-stage degrees as lists
    header = (f"# amp-tui plan for {one_line(scenario.name)}: tp={degrees['tp']} pp={strategy.pp} dp={degrees['dp']} "
              f"micro-batch {strategy.micro_batch_size}, predicted {prediction.iteration_time_s:.4g} s per iteration.\n"
              f"# Re-check with `amp-tui evaluate FILE`; turn into engine settings with `amp-tui export FILE`.\n")
    return atomic_write(path, header + dump_yaml(data), overwrite=overwrite)


def is_plan(data: object) -> bool:
    """True for a mapping that declares itself a plan (any amp-tui/plan/N format)."""
    return isinstance(data, dict) and isinstance(data.get("format"), str) and data["format"].startswith(_FORMAT_PREFIX)


def load_plan(path: str | Path) -> Plan:
    """Read and check a plan file. Anything damaged or foreign raises SpecError naming the file and
    what is wrong with it."""
    path = Path(path)
    return _plan_at(path, load_yaml_document(path, f"an amp-tui plan ({PLAN_FORMAT})"))


def open_scenario(name_or_path: str) -> tuple[Scenario, Plan | None]:
    """A scenario preset, a scenario file or a plan file, read once; for a plan file, the checked
    plan too (a damaged plan is refused, not opened as a bare scenario)."""
    path = Path(name_or_path)
    try:
        is_file = path.is_file()
    except (OSError, ValueError):       # a name too long to be a file: perhaps a preset
        is_file = False
    if not is_file:
        return load_scenario(name_or_path), None   # a preset, or the missing file's error
    data = load_yaml_document(path, "a scenario (cluster, model and training) or a plan")
    if is_plan(data):
        plan = _plan_at(path, data)
        return plan.scenario, plan
    return scenario_from_file(data, path.parent), None


def _plan_at(path: Path, data: object) -> Plan:
    try:
        return _parse_plan(data)
    except SpecError as err:
        raise SpecError(f"{path}: {err.field}", err.value, err.reason) from None


def _parse_plan(data: object) -> Plan:
    if not isinstance(data, dict):
        raise SpecError("plan", type(data).__name__, f"not an amp-tui plan: expected a mapping with format: {PLAN_FORMAT}")
    fmt = data.get("format")
    if fmt is None:
        looks_like = "a scenario file" if {"cluster", "model", "training"} <= set(data) else "no `format` key"
        raise SpecError("format", None, f"not an amp-tui plan ({looks_like}); expected format: {PLAN_FORMAT}")
    if not isinstance(fmt, str) or not fmt.startswith(_FORMAT_PREFIX):
        raise SpecError("format", fmt, f"not an amp-tui plan format; expected {PLAN_FORMAT}")
    if fmt != PLAN_FORMAT:
        raise SpecError("format", fmt, f"unsupported plan format version; amp-tui {__version__} reads {PLAN_FORMAT}")
    for key in data:
        if key not in _PLAN_KEYS:
            raise SpecError(str(key), data[key], f"unknown plan field; allowed: {', '.join(_PLAN_KEYS)}")
    for key in ("scenario", "strategy", "prediction"):
        if not isinstance(data.get(key), dict):
            raise SpecError(key, data.get(key), "required: a mapping (the file may be cut short)")

    try:
        scenario = parse_scenario(data["scenario"])
    except SpecError as err:
        raise (err if err.field.split(".")[0] == "scenario" else err.within("scenario")) from None
    strategy = parse_strategy(data["strategy"], "strategy")
    for key in ("partition", "placement"):
        if getattr(strategy, key) is None:
            raise SpecError(f"strategy.{key}", None, "required in a plan file")
    validate_strategy(scenario, strategy, "strategy")
    prediction = data["prediction"]
    _check_prediction(prediction, strategy)
    if data.get("end") != PLAN_FORMAT:
        raise SpecError("end", data.get("end"), f"missing or damaged: the file is cut short (a plan's last line "
                                                f"is `end: {PLAN_FORMAT}`)")
    created = data.get("created", "")
    return Plan(scenario=scenario, strategy=strategy, saved_prediction=prediction,
                version=str(data.get("amp_tui_version", "unknown")),
                created=created.isoformat() if isinstance(created, datetime) else str(created))


def _check_prediction(prediction: dict, strategy: Strategy) -> None:
    for key in HEADLINE_FIGURES:
        value = prediction.get(key)
        if key == "fits_memory":
            if not isinstance(value, bool):
                raise SpecError(f"prediction.{key}", value, "missing or not true/false (the file may be cut short)")
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"prediction.{key}", value, "missing or not a number (the file may be cut short)")
    stages = prediction.get("stages")
    if stages is not None and (not isinstance(stages, list) or len(stages) != strategy.pp):
        raise SpecError("prediction.stages", f"{len(stages) if isinstance(stages, list) else stages}",
                        f"expected {strategy.pp} stages, one per pipeline stage")
    for i, stage in enumerate(stages or []):
        if not isinstance(stage, dict):
            raise SpecError(f"prediction.stages[{i}]", stage, "expected a mapping of the stage's figures")
    _check_figures(prediction, "prediction")


def _check_figures(value: object, field: str) -> None:
    """Every figure in a saved prediction is a number (finite, or the infinity of a stage that does not
    fit), true/false, text or a list or mapping of those."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_figures(item, f"{field}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_figures(item, f"{field}[{i}]")
    elif isinstance(value, float) and math.isnan(value):
        raise SpecError(field, value, "not a number")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        raise SpecError(field, value, "too large to be a saved figure")
    elif value is not None and not isinstance(value, (bool, int, float, str)):
        raise SpecError(field, value, "expected a figure")


def prediction_changes(saved: dict, new: Prediction, rel_tol: float = 1e-9) -> list[str]:
    """One line per headline figure that differs between a saved prediction and a fresh one,
    e.g. "iteration_time_s: 1.054 -> 1.101 (+4.5%)". Empty when nothing moved."""
    fresh = new.to_dict()
    lines = []
    for key in HEADLINE_FIGURES:
        old, now = saved.get(key), fresh[key]
        if old is None:
            lines.append(f"{key}: (not saved) -> {_show(key, now)}")
        elif isinstance(now, bool) or isinstance(old, bool):
            if bool(old) != bool(now) or isinstance(old, bool) != isinstance(now, bool):
                lines.append(f"{key}: {_show(key, old)} -> {_show(key, now)}")
        elif not isinstance(old, (int, float)):
            lines.append(f"{key}: {old!r} -> {_show(key, now)}")
        elif not math.isclose(float(old), float(now), rel_tol=rel_tol, abs_tol=1e-15):
            change = f" ({(now - old) / abs(old):+.1%})" if old else ""
            lines.append(f"{key}: {_show(key, old, now)} -> {_show(key, now, old)}{change}")
    return lines


def _show(key: str, value: object, other: object = None) -> str:
    """A figure for a person: 4 significant digits, more when needed to tell it from `other`."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (int, float)):
        return repr(value)
    if key.endswith("_bytes"):
        text = format_bytes(float(value))
        if other is None or not isinstance(other, (int, float)) or text != format_bytes(float(other)):
            return text
        return f"{float(value):.0f} B"
    if isinstance(value, int):
        return str(value)
    for digits in (4, 6, 9, 17):
        text = f"{value:.{digits}g}"
        if other is None or not isinstance(other, (int, float)) or text != f"{other:.{digits}g}":
            return text
    return repr(value)


def _plain(value: object) -> object:
    """Numpy scalars and tuples to plain Python, so that the safe YAML dumper takes them."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
