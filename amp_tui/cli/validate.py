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
    va.add_argument("--verbose", action="store_true", help="list every run not replayed, with its reasons")
    va.add_argument("--approximate", action="store_true",
                    help="also replay runs using techniques the cost model ignores (to find errors, not to score)")
    va.add_argument("--fit", action="store_true",
                    help="fit the cost model's default parameters to the replayed runs and print them (minutes)")
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
    if args.fit:
        return _fit_defaults()
    cases = None
    if args.runs:
        from pathlib import Path

        from amp_tui.core.validation.runs import load_cases
        cases = load_cases(Path(args.runs))
    validation = run_validation(args.source, approximate=args.approximate, cases=cases)
    rep = report(validation)
    what = f"the measured runs of {args.runs}" if args.runs else "published measured runs"
    print(json.dumps(rep, indent=2, allow_nan=False) if args.json else render(rep, verbose=args.verbose, runs=what))
    if args.write_bands:
        from amp_tui.core.validation.bands import compute_bands, write_bands

        path = write_bands(compute_bands(validation))
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _fit_defaults() -> int:
    from collections import Counter

    from amp_tui.core.spec.params import prior
    from amp_tui.core.validation.fit import fit_parameters
    from amp_tui.core.validation.runs import load_cases, unsupported

    cases = [c for c in load_cases() if c.scenario is not None and not unsupported(c)]
    gpus = Counter(g.gpu.name for c in cases for g in c.scenario.cluster.nodes if not g.gpu.name.startswith("T4"))
    names = [f"compute_efficiency.{g}" for g in gpus]
    # TCP Ethernet's efficiencies are set from physics and a sweep over AMP's runs (params.py): only
    # AMP's T4 runs use it, and there a free fit would absorb their profiles' overstated compute.
    names += [f"{family}.{link}" for family in ("link_efficiency", "link_latency_s")
              for link in ("nvlink", "infiniband", "ethernet", "pcie")
              if (family, link) != ("link_efficiency", "ethernet")]
    names += ["dp_overlap.megatron", "dp_overlap.fsdp", "layer_floor_s", "micro_batch_overhead_s",
              "iteration_overhead_s", "gemm_half_dim", "fp8_efficiency", "fp4_efficiency", "backward_ratio", "tp_overlap"]
    values, before, after = fit_parameters(cases, names, max_evaluations=150)
    rows = [[name, f"{prior(name)[0]:.4g}", f"{values[name]:.4g}"] for name in names]
    print(table(["parameter", "default", "fitted"], rows, {1, 2}))
    print(f"weighted rms log error over {len(cases)} runs: {before:.3f} at the defaults, {after:.3f} fitted; "
          f"compute_efficiency factors fold into the GPU catalog's peak_fraction")
    return 0
