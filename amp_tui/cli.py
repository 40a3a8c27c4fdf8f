"""The `amp-tui` command line: a thin front end over amp_tui.core.

Every user error is one line on stderr and exit status 2; nothing prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
import threading
import warnings
from pathlib import Path

from amp_tui import __version__
from amp_tui.core.base.errors import SpecError

DEFAULT_SCENARIO = "paper-homogeneous"

EPILOG = """\
examples:
  amp-tui                                   open the dashboard on paper-homogeneous
  amp-tui ui paper-het-cluster              open the dashboard on another preset (or a file, or a plan)
  amp-tui plan paper-het-model --top 5      rank strategies in the terminal
  amp-tui plan my.yaml --save plan.yaml     save the best strategy as a plan file
  amp-tui evaluate paper-homogeneous s.yaml predict the strategies listed in s.yaml
  amp-tui evaluate plan.yaml                re-predict a saved plan
  amp-tui evaluate plan.yaml s.yaml         predict other strategies on a plan's scenario
  amp-tui compare paper-het-cluster s.yaml  two strategies side by side, term by term
  amp-tui plan paper-homogeneous --sensitivity   does the best pick survive slower links, GPUs?
  amp-tui web --port 8000                   the dashboard in a browser on localhost
  amp-tui export plan.yaml --format megatron -o out/
  amp-tui presets                           list scenario, cluster and model presets
  amp-tui bench                             time the search on the benchmark scenarios
  amp-tui validate                          score the cost model on published measured runs
  amp-tui calibrate my.yaml runs.yaml -o calibrated.yaml   fit the model to your measured runs
  amp-tui serve helix-single24-llama2-70b   place a model for serving (max flow, Helix)
"""


class _Parser(argparse.ArgumentParser):
    """argparse with the one-line errors of the rest of amp-tui: `amp-tui: error: plan: --top: 'abc' is
    not a whole number (see amp-tui plan --help)`, exit status 2."""

    def error(self, message: str):
        command = self.prog.removeprefix("amp-tui").strip()
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", " ".join(message.split()))
        where = f"{command}: " if command else ""
        help_hint = f"amp-tui {command} --help" if command else "amp-tui --help"
        sys.stderr.write(f"amp-tui: error: {where}{message} (see {help_hint})\n")
        raise SystemExit(2)


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _json(data: object) -> str:
    """Strict JSON: infinite or undefined figures (e.g. the time of a strategy that does not fit)
    are written as null, never as the Infinity or NaN that JSON does not have."""
    return json.dumps(_finite(data), indent=2, allow_nan=False)


def _finite(value: object) -> object:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    if hasattr(value, "item") and callable(value.item):     # a numpy scalar
        return _finite(value.item())
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="amp-tui", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Plan model-parallel training on heterogeneous GPU clusters (AMP, NeurIPS 2022).")
    parser.add_argument("--version", action="version", version=f"amp-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ui = sub.add_parser("ui", help="open the dashboard (the default command)")
    ui.add_argument("target", nargs="?", default=None, metavar="SCENARIO_OR_PLAN",
                    help=f"scenario preset, scenario file or plan file (default: {DEFAULT_SCENARIO})")

    ev = sub.add_parser("evaluate", help="predict given strategies, or re-predict a saved plan")
    ev.add_argument("scenario", metavar="SCENARIO_OR_PLAN", help="scenario preset or file, or a plan file")
    ev.add_argument("strategies", nargs="?", metavar="STRATEGIES",
                    help="YAML list of strategies (tp, pp, dp, micro_batch_size[, partition, placement])")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")

    pl = sub.add_parser("plan", help="search for the best strategies")
    pl.add_argument("scenario", metavar="SCENARIO", help="scenario preset name or scenario file")
    pl.add_argument("--top", type=_whole_number, default=None, metavar="N", help="strategies to show (default: the scenario's search.top, 10)")
    pl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pl.add_argument("--save", metavar="PLAN.yaml", help="save a strategy as a plan file")
    pl.add_argument("--rank", type=_whole_number, default=1, metavar="N", help="with --save: which ranked strategy (default 1)")
    pl.add_argument("--force", action="store_true", help="with --save: overwrite an existing file")
    pl.add_argument("--objective", choices=("time", "cost"), default="time",
                    help="rank by iteration time (default) or by cost per token (needs prices)")
    pl.add_argument("--budget", type=float, default=None, metavar="USD_PER_HOUR",
                    help="only strategies whose nodes cost at most this many dollars per hour")
    pl.add_argument("--use-all-gpus", action="store_true",
                    help="never leave nodes idle (as search.use_all_gpus: true)")
    pl.add_argument("--sensitivity", action="store_true",
                    help="also rerun the search with each link, GPU speed and the batch size scaled")

    co = sub.add_parser("compare", help="compare strategies term by term (the first against each other)")
    co.add_argument("scenario", metavar="SCENARIO_OR_PLAN", help="scenario preset or file, or a plan file")
    co.add_argument("strategies", metavar="STRATEGIES",
                    help="YAML list of two or more strategies; with a plan file, one or more (the plan's comes first)")

    we = sub.add_parser("web", help="serve the dashboard to a browser on localhost (needs amp-tui[web])")
    we.add_argument("target", nargs="?", default=None, metavar="SCENARIO_OR_PLAN")
    we.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")

    ex = sub.add_parser("export", help="turn a plan into Megatron-LM, DeepSpeed, torchrun, rank-map or torchtitan files")
    ex.add_argument("plan", metavar="PLAN.yaml")
    ex.add_argument("--format", required=True, metavar="FORMAT", help="megatron, deepspeed, torchrun, rankmap or torchtitan")
    ex.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR (default: print them)")
    ex.add_argument("--force", action="store_true", help="overwrite existing files in DIR")

    se = sub.add_parser("serve", help="place a model for serving by max flow (Helix) and print it")
    se.add_argument("scenario", metavar="SCENARIO", help="serving scenario preset or file, or a saved placement")
    se.add_argument("--json", action="store_true", help="print JSON instead of a table")
    se.add_argument("--time-limit", type=float, default=10.0, metavar="S", help="search time limit in seconds (default 10)")
    se.add_argument("--save", metavar="FILE.yaml", help="save the placement (reopen with serve or ui)")

    sub.add_parser("presets", help="list the presets").add_argument("--json", action="store_true")

    be = sub.add_parser("bench", help="time the search on the benchmark scenarios")
    be.add_argument("--json", action="store_true", help="print JSON instead of a table")
    be.add_argument("--runs", type=_whole_number, default=5, help="timed runs per scenario after a warm-up (default 5)")
    be.add_argument("--only", metavar="NAME", action="append", help="run only this benchmark (repeatable)")

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
    from amp_tui.cli_calibrate import add_parser as add_calibrate
    add_calibrate(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:      # --help, --version, or a one-line usage error
        return exit.code if isinstance(exit.code, int) else 0
    command = args.command or "ui"
    previous = _terminate_on_sigterm() if command != "ui" else None   # the dashboard has its own handling
    try:
        handler = {"ui": cmd_ui, "evaluate": cmd_evaluate, "plan": cmd_plan, "export": cmd_export,
                   "presets": cmd_presets, "bench": cmd_bench, "validate": cmd_validate,
                   "calibrate": cmd_calibrate,
                   "compare": cmd_compare, "web": cmd_web, "serve": cmd_serve}[command]
        with warnings.catch_warnings():
            # Infinite figures (a stage that does not fit) are meant; numpy's notes about them are not.
            warnings.simplefilter("ignore", RuntimeWarning)
            return handler(args) or 0
    except SpecError as err:
        print(f"amp-tui: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("amp-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as err:     # a path the system refuses (too long, no permission...): the user's to fix
        print(f"amp-tui: error: {SpecError('file', Path(str(err.filename or '?')), err.strerror or str(err))}",
              file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - the last line of defence: no traceback for users
        text = " ".join(str(err).split())[:300]
        print(f"amp-tui: internal error: {type(err).__name__}: {text} (please report this)", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminate_on_sigterm():
    """Turn SIGTERM into an exception, so that cleanup (temporary files) runs as for Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def terminate(signum, frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, terminate)


# -- commands ---------------------------------------------------------------------------------

def cmd_ui(args) -> int:
    target = getattr(args, "target", None)
    from amp_tui.tui.app import run_app

    run_app(target)
    return 0


def cmd_evaluate(args) -> int:
    from amp_tui.core.search.evaluate import evaluate, parse_strategy_list
    from amp_tui.core.plans.planfile import open_scenario, prediction_changes
    from amp_tui.core.base.yamlio import load_yaml_file

    scenario, plan = open_scenario(args.scenario)
    if plan is not None and not args.strategies:
        prediction = evaluate(plan.scenario, plan.strategy)
        changes = prediction_changes(plan.saved_prediction, prediction)
        if args.json:
            print(_json({**prediction.to_dict(), "changed_since_saved": changes}))
        else:
            print(render_predictions(plan.scenario, [prediction]))
            print()
            print("figures changed since the plan was saved:\n  " + "\n  ".join(changes) if changes
                  else f"figures unchanged since the plan was saved ({plan.created}, amp-tui {plan.version})")
        return 0
    if not args.strategies:
        raise SpecError("STRATEGIES", None, "give a YAML file listing strategies (or pass a plan file)")
    strategies = parse_strategy_list(load_yaml_file(args.strategies), args.strategies)
    from amp_tui.core.costmodel.cost import CostModel

    cost = CostModel(scenario)
    predictions = []
    for i, strategy in enumerate(strategies):
        predictions.append(evaluate(scenario, strategy, cost, field=f"strategies[{i}]"))
    if args.json:
        print(_json([p.to_dict() for p in predictions]))
    else:
        print(render_predictions(scenario, predictions))
    return 0


def cmd_plan(args) -> int:
    from dataclasses import replace

    from amp_tui.core.search.objective import Objective
    from amp_tui.core.plans.planfile import open_scenario
    from amp_tui.core.search.subclusters import search_parts

    if args.top is not None and args.top < 1:
        raise SpecError("--top", args.top, "must be at least 1")
    if args.rank < 1:
        raise SpecError("--rank", args.rank, "must be at least 1")
    if args.save is not None:
        _check_save_target(args.save, args.force)
    objective = Objective(args.objective, args.budget)
    scenario = open_scenario(args.scenario)[0]     # a plan file is checked whole, not just its scenario
    if args.use_all_gpus:
        scenario = replace(scenario, search=replace(scenario.search, use_all_gpus=True))
    top = max(args.top or scenario.search.top, args.rank if args.save else 1)
    result, idle_search = search_parts(scenario, objective, top=top)
    from amp_tui.core.search.uneven import improve

    result, uneven = improve(scenario, result, objective)
    saved = None
    if args.save:
        from amp_tui.core.plans.planfile import save_plan

        if args.rank > len(result.strategies):
            raise SpecError("--rank", args.rank, f"only {len(result.strategies)} feasible strategies were found")
        saved = save_plan(args.save, scenario, result.strategies[args.rank - 1], overwrite=args.force)
    shown = args.top or scenario.search.top     # the search may have ranked more, for --rank
    if args.json:
        from amp_tui.core.plans.confidence import confidence

        print(_json({**result.to_dict(top=shown), "uncertainty": confidence(scenario).band, "objective": objective.kind,
                     "budget_usd_per_hour": objective.budget_usd_per_hour,
                     "idle_search": idle_search.to_dict(), "uneven_search": uneven.to_dict()}))
    else:
        print(render_search(result, shown, objective, idle_search))
        print(f"note: {uneven.note}")
    if args.sensitivity:
        from amp_tui.core.plans.sensitivity import render, sensitivity

        print("\nwhat if the figures are off (each what-if reruns the search):", file=sys.stderr if args.json else sys.stdout)
        print(render(sensitivity(scenario, result)), file=sys.stderr if args.json else sys.stdout)
    if saved:
        print(f"saved strategy {args.rank} to {saved}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _check_save_target(save: str, force: bool) -> None:
    """Refuse a --save target before the search, rather than after it."""
    from amp_tui.core.base.yamlio import path_exists

    path = Path(save)
    if not save.strip():
        raise SpecError("--save", save, "give the plan file's name")
    if path.is_dir():
        raise SpecError("--save", path, "is a folder; give the plan file's name")
    if not force and path_exists(path):
        raise SpecError("--save", path, "already exists (use --force to overwrite)")
    if not path.parent.is_dir():
        raise SpecError("--save", path, f"folder {str(path.parent)!r} does not exist")


def cmd_compare(args) -> int:
    from amp_tui.core.plans.compare import compare
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.search.evaluate import evaluate, parse_strategy_list
    from amp_tui.core.plans.planfile import open_scenario
    from amp_tui.core.base.yamlio import load_yaml_file

    scenario, plan = open_scenario(args.scenario)
    strategies = ([plan.strategy] if plan is not None else []) + parse_strategy_list(
        load_yaml_file(args.strategies), args.strategies)
    if len(strategies) < 2:
        raise SpecError("STRATEGIES", args.strategies, "list at least two strategies to compare (or pass a plan)")
    cost = CostModel(scenario)
    predictions = [evaluate(scenario, s, cost, field=f"strategies[{i}]") for i, s in enumerate(strategies)]
    blocks = [_summary(scenario)]
    for other in predictions[1:]:
        blocks += ["", *compare(predictions[0], other, scenario).lines()]
    print("\n".join(blocks))
    return 0


def cmd_web(args) -> int:
    from amp_tui.tui.web import serve

    serve(args.target, args.port)
    return 0


def cmd_export(args) -> int:
    from amp_tui.core.base.atomic import write_files
    from amp_tui.core.plans.exports import export_plan
    from amp_tui.core.plans.planfile import load_plan

    plan = load_plan(args.plan)
    export = export_plan(plan, args.format)
    if args.output:
        folder = Path(args.output)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError("-o", args.output, f"cannot create the folder ({exc.strerror})") from None
        for path in write_files(folder, export.files, overwrite=args.force, field="-o"):
            print(f"wrote {path}")
    else:
        for name, text in export.files.items():
            print(f"# ---- {name} ----")
            print(text.rstrip("\n"))
    for note in export.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def cmd_calibrate(args) -> int:
    from amp_tui.cli_calibrate import cmd_calibrate as calibrate

    return calibrate(args)


def cmd_serve(args) -> int:
    from amp_tui.serving.cli import cmd_serve as serve

    return serve(args)


def cmd_presets(args) -> int:
    from amp_tui.core.spec.hardware import gpu_catalog, instance_catalog
    from amp_tui.core.spec.presets import PRESET_KINDS, describe_preset, preset_names

    listing = {kind: {name: describe_preset(kind, name) for name in preset_names(kind)} for kind in PRESET_KINDS}
    listing["instances"] = {name: _describe_instance(name, fields) for name, fields in instance_catalog().items()}
    listing["gpus"] = {name: gpu.description or name for name, gpu in gpu_catalog().items()}
    if args.json:
        print(_json(listing))
        return 0
    for kind, entries in listing.items():
        print(f"{kind}:")
        width = max(len(name) for name in entries)
        for name, description in entries.items():
            print(f"  {name:<{width}}  {description}")
        print()
    return 0


def _describe_instance(name: str, fields: dict) -> str:
    price = fields.get("price_per_hour")
    return (f"{fields.get('provider', '')} {fields['gpus_per_node']} x {fields['gpu']}, "
            f"{fields['intra_node_bandwidth']} inside, {fields['inter_node_bandwidth']} network"
            + (f", ${price:,.2f}/hour on demand" if price is not None else "")).strip()


def cmd_bench(args) -> int:
    from amp_tui.core.search.bench import BENCHMARKS, render_bench, run_bench
    from amp_tui.serving.bench import SERVING_BENCHMARKS, render_serving_bench, run_serving_bench

    from amp_tui.core.base.limits import MAX_BENCH_RUNS

    if not 1 <= args.runs <= MAX_BENCH_RUNS:
        raise SpecError("--runs", args.runs, f"must be 1 to {MAX_BENCH_RUNS}")
    names = args.only or [b.name for b in BENCHMARKS] + list(SERVING_BENCHMARKS)
    known = {b.name for b in BENCHMARKS} | set(SERVING_BENCHMARKS)
    for name in names:
        if name not in known:
            raise SpecError("--only", name, f"not a benchmark; known: {', '.join(sorted(known))}")
    progress = None if args.json else lambda line: print(line, file=sys.stderr)
    rows = run_bench(names, runs=args.runs, progress=progress)
    serving = run_serving_bench(names, runs=min(args.runs, 3), progress=progress)
    if args.json:
        print(_json(rows + serving))
    else:
        print("\n\n".join(text for text in (render_bench(rows) if rows else "",
                                              render_serving_bench(serving) if serving else "") if text))
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
    print(_table(["parameter", "default", "fitted"], rows, {1, 2}))
    print(f"weighted rms log error over {len(cases)} runs: {before:.3f} at the defaults, {after:.3f} fitted; "
          f"compute_efficiency factors fold into the GPU catalog's peak_fraction")
    return 0


def cmd_validate(args) -> int:
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


# -- rendering --------------------------------------------------------------------------------

def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _placement_text(scenario, strategy) -> str:
    from amp_tui.core.costmodel.parts import placement_text

    return placement_text(scenario, strategy)


def _summary(scenario) -> str:
    c, m, t = scenario.cluster, scenario.model, scenario.training
    groups = " + ".join(f"{g.count} x {g.label}" for g in c.nodes)
    from amp_tui.core.spec.knobs import describe

    calibrated = f"; calibrated ({scenario.calibration.source or 'calibration section'})" \
        if scenario.calibration.values else ""
    return (f"{scenario.name}: {c.num_gpus} GPUs ({groups}); {m.name}: {m.num_layers} layers, "
            f"{m.total_params / 1e9:.3g} B params; global batch {t.global_batch_size}, {t.precision}"
            f"{' (rowwise scaling)' if t.fp8_scaling == 'rowwise' else ''}, "
            f"{t.schedule}{calibrated}\ntechniques {describe(t, m)}")


def _prediction_row(scenario, p, rank: str, best: float | None) -> list[str]:
    from amp_tui.core.base.units import format_bytes, format_seconds

    s = p.strategy
    tight = p.tightest_stage
    row = [rank, s.label, str(s.micro_batch_size), str(p.num_micro_batches), format_seconds(p.iteration_time_s),
           f"{p.samples_per_s:.1f}", f"{format_bytes(tight.memory.total_bytes)} / {format_bytes(tight.capacity_bytes)}"
           + ("" if p.fits_memory else " OVER")]
    if best is not None:
        row.append("best" if p.iteration_time_s <= best and rank == "1" or p.iteration_time_s == best
                   else f"{(p.iteration_time_s / best - 1) * 100:+.1f}%")
    from amp_tui.core.spec.knobs import resolve

    row += [resolve(s, scenario.training).short_label, _money(p.cost_per_hour_usd),
            _money(p.cost_per_million_tokens_usd), " ".join(str(n) for n in s.partition),
            _placement_text(scenario, s) + _idle_text(scenario, s) + _shares_text(s)]
    return row


def _speedup_text(speedup: float) -> str:
    """'2.97x faster', or '3.20x slower' for a top strategy ranked by cost or under a budget."""
    return f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _idle_text(scenario, strategy) -> str:
    """'; idle: 1 x p3.8xlarge (group 2)' for the nodes a strategy leaves out."""
    if not strategy.idle:
        return ""
    groups = scenario.cluster.nodes
    return "; idle: " + ", ".join(f"{n} x {groups[g].label} (group {g})" for g, n in strategy.idle)


def _shares_text(strategy) -> str:
    """'; batch shares 16 x 12 + 16 x 4' for uneven data-parallel shares, runs of equal shares merged."""
    if not strategy.batch_shares:
        return ""
    from amp_tui.core.costmodel.placement import merge_runs

    runs = merge_runs((share, 1) for share in strategy.batch_shares)
    return "; batch shares " + " + ".join(f"{n} x {share}" if n > 1 else str(share) for share, n in runs)


def _cost_headers(scenario) -> list[str]:
    from amp_tui.core.costmodel.pricing import cost_unit

    return ["$/hour", f"$/M {cost_unit(scenario)}"]


def render_predictions(scenario, predictions) -> str:
    from amp_tui.core.base.units import format_seconds

    headers = ["#", "tp x pp x dp", "mbs", "B", "iteration", "samples/s", "fullest stage memory",
               "techniques", *_cost_headers(scenario), "partition", "placement"]
    rows = [_prediction_row(scenario, p, str(i + 1), None) for i, p in enumerate(predictions)]
    from amp_tui.core.plans.confidence import confidence

    out = [_summary(scenario), f"predicted times {confidence(scenario).describe()}", "",
           _table(headers, rows, {0, 2, 3, 4, 5, 8, 9})]
    for i, p in enumerate(predictions):
        out.append("")
        out.append(f"strategy {i + 1}: {p.strategy.label}, micro-batch {p.strategy.micro_batch_size}: "
                   f"{format_seconds(p.steady_state_s)} steady state + {format_seconds(p.fill_drain_s)} fill/drain "
                   f"+ {format_seconds(p.dp_and_optimizer_s)} all-reduce/optimizer; bubble {p.bubble_fraction:.0%}")
        terms = p.time_terms()
        out.append("  made of: " + ", ".join(f"{name} {format_seconds(value)}" for name, value in terms.items()
                                            if value > 0) + f"; of which per-message latency {format_seconds(p.latency_s)}")
        if p.reason:
            out.append(f"  does not fit: {p.reason}")
        out.append(_stage_table(p))
    return "\n".join(out)


def _stage_table(p) -> str:
    from amp_tui.core.base.units import format_bytes, format_seconds

    headers = ["stage", "layers", "GPU", "compute", "p2p comm", "all-reduce", "memory / capacity"]
    rows = [[str(st.index), f"{st.first_layer}-{st.last_layer}", "+".join(st.gpu_types), format_seconds(st.compute_s),
             format_seconds(st.comm_s), format_seconds(st.dp_allreduce_s),
             f"{format_bytes(st.memory.total_bytes)} / {format_bytes(st.capacity_bytes)}" + ("" if st.fits else " OVER")]
            for st in p.stages]
    return "  " + _table(headers, rows, {0, 3, 4, 5}).replace("\n", "\n  ")


def render_search(result, top: int, objective=None, idle_search=None) -> str:
    from amp_tui.core.search.orders import ORDERS_NOTE
    from amp_tui.core.base.units import format_seconds

    st = result.stats
    scenario = result.scenario
    orders = f" over {st.node_orders} node orders" if st.node_orders > 1 else ""
    out = [_summary(scenario),
           f"searched {st.candidates} candidates{orders} in {st.search_time_s * 1000:.0f} ms: {st.evaluated} "
           f"evaluated, {st.pruned} pruned by bounds, {st.infeasible} out of memory"]
    if idle_search is not None:
        idle = ("all GPUs used (search.use_all_gpus)" if scenario.search.use_all_gpus
                else f"{idle_search.searched} of {idle_search.parts} ways to leave nodes idle searched"
                     f"{'' if idle_search.exact else ' (not exhaustive)'}")
        out.append(f"ranked by {objective.describe()}; {idle}")
        if idle_search.note:
            out.append(f"note: {idle_search.note}")
    if not st.all_node_orders:
        gap = st.orders_gap(result.strategies[0].iteration_time_s if result.strategies else None)
        if st.exact:
            out.append(f"note: {ORDERS_NOTE}; a lower bound over every other order shows that none enters "
                       "the ranking, so it is exact")
        elif gap is not None and idle_search is None:
            out.append(f"note: {ORDERS_NOTE}; another order could be at most {gap:.1%} better")
        else:
            out.append(f"note: {ORDERS_NOTE}")
    if result.strategies:
        from amp_tui.core.plans.confidence import confidence, within_band

        sure = confidence(scenario)
        close = within_band([p.iteration_time_s for p in result.strategies[:top]], sure.band)
        out.append(f"predicted times {sure.describe()}"
                   + (f"; the top {close} are within each other's band" if close > 1 else "; the top pick stands clear"))
    out.append("")
    if not result.strategies:
        out.append("no strategy fits in memory; see the reasons below" if objective is None
                   or objective.budget_usd_per_hour is None else
                   f"no strategy fits in memory on nodes costing at most ${objective.budget_usd_per_hour:,.2f}/hour")
    else:
        best = result.strategies[0].iteration_time_s
        headers = ["rank", "tp x pp x dp", "mbs", "B", "iteration", "samples/s", "fullest stage memory", "gap",
                   "techniques", *_cost_headers(scenario), "partition", "placement"]
        rows = [_prediction_row(scenario, p, str(i + 1), best) for i, p in enumerate(result.strategies[:top])]
        out.append(_table(headers, rows, {0, 2, 3, 4, 5, 9, 10}))
    if result.baseline is not None:
        b = result.baseline
        out += ["", f"uniform baseline (even split, rank order): {b.strategy.label} micro-batch "
                    f"{b.strategy.micro_batch_size}, {format_seconds(b.iteration_time_s)}"
                + (f"; the top strategy is {_speedup_text(result.speedup_vs_baseline)}" if result.strategies else "")]
    if result.infeasible:
        out += ["", f"{len(result.infeasible)} candidates do not fit in memory, e.g.:"]
        for entry in result.infeasible[:3]:
            s = entry.strategy
            out.append(f"  {s.label} micro-batch {s.micro_batch_size}, {_placement_text(scenario, s)}: "
                       f"{entry.reason}")
    return "\n".join(out)
