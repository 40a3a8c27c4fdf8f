"""`amp-tui calibrate PLAN LOG`: fit the cost model to an engine's own training log
(amp_tui.core.calibration.logs reads it, log_runs checks it against the plan and measures)."""

from __future__ import annotations

import json
import math
from pathlib import Path

LOG_SUFFIXES_NOT = (".yaml", ".yml")      # anything else given as MEASUREMENTS is read as a training log


def is_log(path: str) -> bool:
    return Path(path).suffix.lower() not in LOG_SUFFIXES_NOT


def run_log(args, write, scenario_text, render_fit) -> int:
    """Calibrate from the log `args.measurements` (write, scenario_text, render_fit: calibrate.py's)."""
    from amp_tui.core.calibration.log_runs import calibrate_from_log, measure_log, strategy_from_log
    from amp_tui.core.calibration.logs import read_log
    from amp_tui.core.plans.confidence import confidence
    from amp_tui.core.plans.planfile import open_scenario
    from amp_tui.core.search.evaluate import evaluate

    scenario, plan = open_scenario(args.scenario)
    log = read_log(args.measurements, args.engine)
    strategy = plan.strategy if plan is not None else strategy_from_log(log, scenario)
    measured = measure_log(log, scenario, strategy, args.warmup)
    result = calibrate_from_log(scenario, measured)
    before = evaluate(scenario, measured.measurement.strategy).iteration_time_s
    after = evaluate(result.scenario, measured.measurement.strategy).iteration_time_s
    written = write(args, scenario_text(result.scenario, args.scenario)) if args.output else None
    if args.json:
        print(json.dumps({"scenario": scenario.name, "log": {"source": log.source, "engine": log.engine,
                                                             "iterations_kept": [r.step for r in measured.kept],
                                                             "dropped": measured.dropped,
                                                             "iteration_time_s": measured.measurement.iteration_time_s,
                                                             "spread_log_sd": measured.spread_log_sd,
                                                             "peak_memory_bytes": measured.measurement.peak_memory_bytes,
                                                             "stated": log.stated, "notes": list(measured.notes)},
                          "predicted_before_s": before, "predicted_after_s": after, **result.fit.to_dict(),
                          "notes": list(result.notes), "calibration": result.scenario.calibration.to_dict(),
                          "written": str(written) if written else None}, indent=2))
        return 0
    print("\n".join(measured.describe()))
    print()
    print(render_fit(result, log.source))
    spread = math.expm1(measured.spread_log_sd) * 100
    off = round((after / measured.measurement.iteration_time_s - 1) * 100, 1) or 0.0      # no "-0.0%"
    print(f"\n{strategy.label} micro-batch {strategy.micro_batch_size}: measured {_s(measured.measurement.iteration_time_s)}, "
          f"predicted {_s(before)} before, {_s(after)} after ({off:+.1f}%; "
          f"the log's spread {spread:.1f}%)")
    print(f"predicted times {confidence(result.scenario).describe()}")
    if written:
        print(f"wrote {written}: `amp-tui plan {written}`, `evaluate`, `ui` and plan files now use the fitted values")
    else:
        print("not written: give -o CALIBRATED.yaml to save the calibrated scenario")
    return 0


def _s(seconds: float) -> str:
    from amp_tui.core.base.units import format_seconds

    return format_seconds(seconds)
