"""`amp-tui validate`: replay published (or your own) measured runs through the cost model and score it."""

from __future__ import annotations

import json
import sys

from amp_tui.cli.output import table
from amp_tui.core.base.errors import SpecError


def add_parser(sub) -> None:
    va = sub.add_parser("validate", help="replay published measured runs through the cost model and score it")
    va.add_argument("--json", action="store_true", help="print JSON instead of a table")
    va.add_argument("--source", metavar="NAME", help="only this source's runs (e.g. llmfoundry, nemo, torchtitan)")
    va.add_argument("--runs", metavar="FILE",
                    help="replay these measured runs instead of the published ones (same schema as "
                         "amp_tui/data/measured_runs.yaml: e.g. your own cluster's)")
    va.add_argument("--scenario", metavar="SCENARIO",
                    help="with --runs: the scenario a `calibrate` measurements file (a list of strategies with "
                         "iteration_time_s) was run on")
    va.add_argument("--verbose", action="store_true", help="list every run not replayed, with its reasons")
    va.add_argument("--approximate", action="store_true",
                    help="also replay runs using techniques the cost model ignores (to find errors, not to score)")
    va.add_argument("--fit", action="store_true",
                    help="fit the parameters several sources inform to the replayed runs and the H200 block "
                         "measurements, then each source without it: in-sample and leave-one-source-out "
                         "error per source (about seven minutes on two cores)")
    va.add_argument("--write-folds", action="store_true",
                    help="with --fit: write each source's fold (amp_tui/data/fit_folds.yaml), which plain "
                         "`validate` replays for its leave-one-source-out column")
    va.add_argument("--write-bands", action="store_true",
                    help="write the prediction error bands (amp_tui/data/error_bands.yaml) from this replay")


def run(args) -> int:
    from amp_tui.core.validation.replay import render, report, run_validation

    if args.write_bands and (args.source or args.approximate or args.runs):
        raise SpecError("--write-bands", "--source/--approximate/--runs",
                        "bands come from the strict replay of every published run")
    if args.fit and args.runs:
        raise SpecError("--fit", "--runs", "the defaults are fitted to the published runs; "
                                           "`amp-tui calibrate` fits your own")
    if args.write_folds and not args.fit:
        raise SpecError("--write-folds", True, "the folds come from a fit: add --fit")
    if args.fit:
        return _fit_defaults(args.write_folds)
    cases = None
    if args.runs:
        from pathlib import Path

        cases = _own_cases(Path(args.runs), args.scenario)
    elif args.scenario:
        raise SpecError("--scenario", args.scenario, "goes with --runs (the scenario its measurements file ran on)")
    validation = run_validation(args.source, approximate=args.approximate, cases=cases)
    rep = report(validation)
    if not (args.runs or args.approximate):     # the folds are the published sources'
        from amp_tui.core.validation.loso import add_held_out

        add_held_out(rep, validation)
    what = f"the measured runs of {args.runs}" if args.runs else "published measured runs"
    print(json.dumps(rep, indent=2, allow_nan=False) if args.json else render(rep, verbose=args.verbose, runs=what))
    if args.write_bands:
        from amp_tui.core.validation.bands import compute_bands, write_bands

        path = write_bands(compute_bands(validation))
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _fit_defaults(write: bool) -> int:
    from amp_tui.core.spec.params import prior
    from amp_tui.core.validation.loso import run_fit, write_folds
    from amp_tui.core.validation.metrics import macro

    result = run_fit(progress=lambda line: print(line, file=sys.stderr, flush=True))
    rows = [[name, ", ".join(sorted(result.informing[name])), f"{prior(name)[0]:.4g}", f"{result.fitted[name]:.4g}"]
            for name in result.names]
    print(table(["parameter", "informed by", "default", "fitted"], rows, {2, 3}))
    alone = sorted(set(result.informing) - set(result.names))
    if alone:
        print(f"not fitted (one source or none informs them: set from physics or a microbenchmark): {', '.join(alone)}")
    print(f"weighted rms log error: {result.rms_before:.3f} at the defaults, {result.rms_after:.3f} fitted; "
          "compute_efficiency factors fold into the GPU catalog's peak_fraction")
    sources = list(result.in_sample)
    rows = [[s, f"{result.in_sample[s] * 100:.1f}%", f"{result.held_out[s] * 100:.1f}%"] for s in sources]
    public = [s for s in sources if s != "h200-blocks"]
    rows.append([f"macro ({len(public)} published source{'s' if len(public) != 1 else ''})", f"{macro(result.in_sample[s] for s in public) * 100:.1f}%",
                 f"{macro(result.held_out[s] for s in public) * 100:.1f}%"])
    print(table(["source", "in-sample MAPE", "leave-one-source-out MAPE"], rows, {1, 2}))
    if write:
        print(f"wrote {write_folds(result)}")
    return 0


def _own_cases(path, scenario_name: str | None) -> list:
    """--runs: published-schema runs (a mapping with `runs`), or a `calibrate` measurements file (a
    list) on --scenario."""
    from amp_tui.core.base.yamlio import load_yaml_file
    from amp_tui.core.validation.runs import load_cases

    if scenario_name is None:
        try:
            return load_cases(path)
        except SpecError:
            if isinstance(load_yaml_file(path), list):      # (it read as YAML: its shape was refused)
                raise SpecError("--runs", str(path), "is a `calibrate` measurements file (runs of one scenario): "
                                                     "give the scenario it ran on with --scenario") from None
            raise
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.core.validation.own_runs import measurement_cases

    return measurement_cases(path, load_scenario(scenario_name))
