"""`amp-tui calibrate`: fit the cost model to runs measured on your cluster, or choose runs to measure.

The work is in amp_tui.core.calibration.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from amp_tui.cli.output import placement_text, table
from amp_tui.cli.parser import whole_number
from amp_tui.core.base.errors import SpecError

HELP = "fit the cost model's parameters to runs measured on your cluster (or --suggest runs to measure)"


def add_parser(sub) -> None:
    ca = sub.add_parser("calibrate", help=HELP, description=HELP + ".")
    ca.add_argument("scenario", metavar="SCENARIO", help="scenario preset name or scenario file (with a training "
                                                        "log: the plan file that ran)")
    ca.add_argument("measurements", nargs="?", metavar="MEASUREMENTS.yaml|LOG",
                    help="YAML list of measured runs: tp, pp, dp, micro_batch_size[, partition, placement], "
                         "iteration_time_s[, peak_memory, out_of_memory]; or an engine's training log (any other "
                         "file: Megatron-LM, torchtitan, DeepSpeed or plain PyTorch), with the plan that ran it")
    ca.add_argument("-o", "--output", metavar="FILE",
                    help="write the calibrated scenario here (with --suggest: the measurements file to fill in)")
    ca.add_argument("--suggest", type=int, metavar="N",
                    help="choose N cheap runs whose measurements pin the parameters best")
    ca.add_argument("--force", action="store_true", help="overwrite an existing output file")
    ca.add_argument("--json", action="store_true", help="print JSON instead of tables")
    ca.add_argument("--engine", choices=("megatron", "torchtitan", "deepspeed", "pytorch"),
                    help="with a log: the engine that wrote it (default: told from its lines)")
    ca.add_argument("--warmup", type=whole_number, default=5, metavar="N",
                    help="with a log: iterations of warm-up to drop besides its first line (default 5)")


def run(args) -> int:
    from amp_tui.core.spec.scenario import load_scenario

    if args.output:
        check_output(Path(args.output), args.force)
    if args.suggest is not None:
        if args.measurements:
            raise SpecError("MEASUREMENTS", args.measurements,
                            "not used with --suggest (it writes a measurements file)")
        return _suggest(args, load_scenario(args.scenario))
    if not args.measurements:
        raise SpecError("MEASUREMENTS", None, "give a YAML file of measured runs, or --suggest N to choose them")
    from amp_tui.cli.cluster.logs import is_log, run_log

    if is_log(args.measurements) or args.engine:
        return run_log(args, _write, _scenario_text, render_fit)
    from amp_tui.core.calibration.calibrate import calibrate
    from amp_tui.core.calibration.measurements import load_measurements

    scenario = load_scenario(args.scenario)
    measurements = load_measurements(args.measurements, scenario)
    result = calibrate(scenario, measurements, source=Path(args.measurements).name)
    written = _write(args, _scenario_text(result.scenario, args.scenario)) if args.output else None
    if args.json:
        print(json.dumps({"scenario": scenario.name, **result.fit.to_dict(), "notes": list(result.notes),
                          "calibration": result.scenario.calibration.to_dict(),
                          "written": str(written) if written else None}, indent=2))
        return 0
    print(render_fit(result, args.measurements))
    print()
    if written:
        print(f"wrote {written}: `amp-tui plan {written}`, `evaluate`, `ui` and plan files now use the fitted values")
    else:
        print("not written: give -o CALIBRATED.yaml to save the calibrated scenario")
    return 0


def check_output(path: Path, force: bool) -> None:
    """Refuse an output path that is a folder, or a file that exists without --force, before any work."""
    if path.is_dir():
        raise SpecError("-o", path, "is a folder; give a file name")
    if path.exists() and not force:
        raise SpecError("-o", path, "already exists (use --force to overwrite)")


def _write(args, text: str) -> Path:
    from amp_tui.core.base.yamlio import atomic_write

    return atomic_write(args.output, text, overwrite=args.force)


def _scenario_text(scenario, origin: str) -> str:
    from amp_tui.core.base.yamlio import dump_yaml

    return (f"# {scenario.name}, calibrated by amp-tui calibrate from {origin}: the `calibration:` section\n"
            f"# holds the fitted cost-model parameters; every other section is as it was.\n"
            + dump_yaml(scenario.to_dict()))


def _percent(log_ratio: float | None) -> str:
    return "" if log_ratio is None else f"{math.expm1(log_ratio) * 100:+.1f}%"


def render_fit(result, source: str) -> str:
    from amp_tui.core.base.units import format_bytes, format_seconds

    fit = result.fit
    fitted = [p for p in fit.parameters if p.fitted]
    idle = [p.name for p in fit.parameters if not p.fitted]
    out = [f"calibrated {result.scenario.name} from {len(fit.runs)} measured runs ({source})", ""]
    out.append(table(["parameter", "before", "after", "unit", "source"],
                      [[p.name, f"{p.before:.4g}", f"{p.after:.4g}", p.unit, p.source]
                       for p in fitted], {1, 2}))
    if idle:
        out.append(f"kept as they were (these runs do not inform them): {', '.join(idle)}")
    out.append("")
    peaks = any(run.measurement.peak_memory_bytes is not None for run in fit.runs)
    rows = []
    for run in fit.runs:
        m = run.measurement
        rows.append([str(m.index), m.strategy.label, str(m.strategy.micro_batch_size),
                     "out of memory" if m.out_of_memory else format_seconds(m.iteration_time_s),
                     format_seconds(run.predicted_before_s), format_seconds(run.predicted_s),
                     _percent(run.residual), _percent(run.loo_error)])
        if peaks:
            rows[-1].append("" if m.peak_memory_bytes is None else
                            f"{format_bytes(m.peak_memory_bytes)} / {format_bytes(run.predicted_peak_bytes)}")
    out.append(table(["run", "tp x pp x dp", "mbs", "measured", "predicted before", "after", "residual",
                       "leave-one-out"] + (["peak memory measured / after"] if peaks else []),
                      rows, {0, 2, 4, 5, 6, 7, 8}))
    out.append("")
    summary = f"residual spread {_percent(fit.residual_log_sd).lstrip('+')} (rms of log measured/predicted)"
    if fit.loo_log_sd is not None:
        summary += (f"; leave-one-out error {_percent(fit.loo_log_sd).lstrip('+')}: about how far off a run "
                    f"not measured is predicted")
    out.append(summary)
    out += [f"note: {note}" for note in result.notes]
    return "\n".join(out)


SUGGEST_HEADER = """\
# Runs to measure for {name}, chosen by `amp-tui calibrate --suggest {count}`.
# Run each strategy as written (partition and placement too), fill in iteration_time_s (seconds per
# iteration, steady state) and, where you have it, peak_memory (e.g. 14.2 GiB); mark a run that did not
# fit with `out_of_memory: true`. Then: amp-tui calibrate {scenario} THIS_FILE -o calibrated.yaml
"""


def _partition_text(partition: tuple[int, ...]) -> str:
    text = " ".join(map(str, partition))
    return text if len(text) <= 48 else f"{len(partition)} stages (see the file)"


def _suggest(args, scenario) -> int:
    from amp_tui.core.base.units import format_bytes, format_seconds
    from amp_tui.core.calibration.calibrate import suggest_measurements
    from amp_tui.core.calibration.measurements import measurements_yaml

    picked = suggest_measurements(scenario, args.suggest)
    header = SUGGEST_HEADER.format(name=scenario.name, count=args.suggest, scenario=args.scenario)
    text = measurements_yaml([m for m, _, _ in picked], header)
    written = _write(args, text) if args.output else None
    if args.json:
        print(json.dumps({"scenario": scenario.name, "written": str(written) if written else None,
                          "runs": [{**m.to_dict(), "predicted_s": t, "predicted_peak_bytes": peak}
                                   for m, t, peak in picked]}, indent=2))
        return 0
    if not written:
        print(text, end="")
        return 0
    rows = [[str(m.index), m.strategy.label, str(m.strategy.micro_batch_size), format_seconds(t), format_bytes(peak),
             _partition_text(m.strategy.partition), placement_text(scenario, m.strategy)]
            for m, t, peak in picked]
    print(f"{len(picked)} runs to measure on {scenario.name} (cheap, and together they pin the parameters):")
    print(table(["run", "tp x pp x dp", "mbs", "predicted", "peak memory", "partition", "placement"],
                 rows, {0, 2, 3, 4}))
    print(f"\nwrote {written}: fill in iteration_time_s, then `amp-tui calibrate {args.scenario} {written} "
          f"-o calibrated.yaml`")
    return 0
