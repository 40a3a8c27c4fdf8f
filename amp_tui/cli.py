"""The `amp-tui` command line: a thin front end over amp_tui.core.

Every user error is one line on stderr and exit status 2; nothing prints a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from amp_tui import __version__
from amp_tui.core.errors import SpecError

DEFAULT_SCENARIO = "paper-homogeneous"

EPILOG = """\
examples:
  amp-tui                                   open the dashboard on paper-homogeneous
  amp-tui ui paper-het-cluster              open the dashboard on another preset (or a file, or a plan)
  amp-tui plan paper-het-model --top 5      rank strategies in the terminal
  amp-tui plan my.yaml --save plan.yaml     save the best strategy as a plan file
  amp-tui evaluate paper-homogeneous s.yaml predict the strategies listed in s.yaml
  amp-tui evaluate plan.yaml                re-predict a saved plan
  amp-tui export plan.yaml --format megatron -o out/
  amp-tui presets                           list scenario, cluster and model presets
  amp-tui bench                             time the search on the benchmark scenarios
  amp-tui serve helix-single24-llama2-70b   place a model for serving (max flow, Helix)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    pl.add_argument("--top", type=int, default=None, metavar="N", help="strategies to show (default: the scenario's search.top, 10)")
    pl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pl.add_argument("--save", metavar="PLAN.yaml", help="save a strategy as a plan file")
    pl.add_argument("--rank", type=int, default=1, metavar="N", help="with --save: which ranked strategy (default 1)")
    pl.add_argument("--force", action="store_true", help="with --save: overwrite an existing file")

    ex = sub.add_parser("export", help="turn a plan into Megatron-LM, DeepSpeed, torchrun or rank-map files")
    ex.add_argument("plan", metavar="PLAN.yaml")
    ex.add_argument("--format", required=True, metavar="FORMAT", help="megatron, deepspeed, torchrun or rankmap")
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
    be.add_argument("--runs", type=int, default=5, help="timed runs per scenario after a warm-up (default 5)")
    be.add_argument("--only", metavar="NAME", action="append", help="run only this benchmark (repeatable)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = args.command or "ui"
    try:
        handler = {"ui": cmd_ui, "evaluate": cmd_evaluate, "plan": cmd_plan, "export": cmd_export,
                   "presets": cmd_presets, "bench": cmd_bench, "serve": cmd_serve}[command]
        return handler(args) or 0
    except SpecError as err:
        print(f"amp-tui: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("amp-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:  # noqa: BLE001 - the last line of defence: no traceback for users
        print(f"amp-tui: internal error: {type(err).__name__}: {err} (please report this)", file=sys.stderr)
        return 1


# -- commands ---------------------------------------------------------------------------------

def cmd_ui(args) -> int:
    target = getattr(args, "target", None)
    from amp_tui.tui.app import run_app

    run_app(target)
    return 0


def cmd_evaluate(args) -> int:
    from amp_tui.core.evaluate import evaluate, parse_strategy_list
    from amp_tui.core.planfile import open_scenario, prediction_changes
    from amp_tui.core.yamlio import load_yaml_file

    scenario, plan = open_scenario(args.scenario)
    if plan is not None:
        if args.strategies:
            raise SpecError("STRATEGIES", args.strategies, "not used with a plan file (the plan holds its strategy)")
        prediction = evaluate(plan.scenario, plan.strategy)
        changes = prediction_changes(plan.saved_prediction, prediction)
        if args.json:
            print(json.dumps({**prediction.to_dict(), "changed_since_saved": changes}, indent=2))
        else:
            print(render_predictions(plan.scenario, [prediction]))
            print()
            print("figures changed since the plan was saved:\n  " + "\n  ".join(changes) if changes
                  else f"figures unchanged since the plan was saved ({plan.created}, amp-tui {plan.version})")
        return 0
    if not args.strategies:
        raise SpecError("STRATEGIES", None, "give a YAML file listing strategies (or pass a plan file)")
    strategies = parse_strategy_list(load_yaml_file(args.strategies), args.strategies)
    from amp_tui.core.cost import CostModel

    cost = CostModel(scenario)
    predictions = []
    for i, strategy in enumerate(strategies):
        predictions.append(evaluate(scenario, strategy, cost, field=f"strategies[{i}]"))
    if args.json:
        print(json.dumps([p.to_dict() for p in predictions], indent=2))
    else:
        print(render_predictions(scenario, predictions))
    return 0


def cmd_plan(args) -> int:
    from amp_tui.core.scenario import load_scenario
    from amp_tui.core.search import search

    if args.top is not None and args.top < 1:
        raise SpecError("--top", args.top, "must be at least 1")
    if args.rank < 1:
        raise SpecError("--rank", args.rank, "must be at least 1")
    if args.save and Path(args.save).is_dir():
        raise SpecError("--save", Path(args.save), "is a folder; give the plan file's name")
    if args.save and not args.force and Path(args.save).exists():
        raise SpecError("--save", Path(args.save), "already exists (use --force to overwrite)")
    scenario = load_scenario(args.scenario)
    top = max(args.top or scenario.search.top, args.rank if args.save else 1)
    result = search(scenario, top=top)
    saved = None
    if args.save:
        from amp_tui.core.planfile import save_plan

        if args.rank > len(result.strategies):
            raise SpecError("--rank", args.rank, f"only {len(result.strategies)} feasible strategies were found")
        saved = save_plan(args.save, scenario, result.strategies[args.rank - 1], overwrite=args.force)
    shown = args.top or scenario.search.top     # the search may have ranked more, for --rank
    if args.json:
        print(json.dumps(result.to_dict(top=shown), indent=2))
    else:
        print(render_search(result, shown))
    if saved:
        print(f"saved strategy {args.rank} to {saved}", file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_export(args) -> int:
    from amp_tui.core.exports import export_plan
    from amp_tui.core.planfile import load_plan
    from amp_tui.core.yamlio import atomic_write

    plan = load_plan(args.plan)
    export = export_plan(plan, args.format)
    if args.output:
        folder = Path(args.output)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError("-o", args.output, f"cannot create the folder ({exc.strerror})") from None
        for name, text in export.files.items():
            path = atomic_write(folder / name, text, overwrite=args.force)
            print(f"wrote {path}")
    else:
        for name, text in export.files.items():
            print(f"# ---- {name} ----")
            print(text.rstrip("\n"))
    for note in export.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def cmd_serve(args) -> int:
    from amp_tui.serving.cli import cmd_serve as serve

    return serve(args)


def cmd_presets(args) -> int:
    from amp_tui.core.hardware import gpu_catalog, instance_catalog
    from amp_tui.core.presets import PRESET_KINDS, describe_preset, preset_names

    listing = {kind: {name: describe_preset(kind, name) for name in preset_names(kind)} for kind in PRESET_KINDS}
    listing["instances"] = {name: _describe_instance(name, fields) for name, fields in instance_catalog().items()}
    listing["gpus"] = {name: gpu.description or name for name, gpu in gpu_catalog().items()}
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    for kind, entries in listing.items():
        print(f"{kind}:")
        width = max(len(name) for name in entries)
        for name, description in entries.items():
            print(f"  {name:<{width}}  {description}")
        print()
    return 0


def _describe_instance(name: str, fields: dict) -> str:
    return (f"{fields.get('provider', '')} {fields['gpus_per_node']} x {fields['gpu']}, "
            f"{fields['intra_node_bandwidth']} inside, {fields['inter_node_bandwidth']} network").strip()


def cmd_bench(args) -> int:
    from amp_tui.core.bench import BENCHMARKS, render_bench, run_bench
    from amp_tui.serving.bench import SERVING_BENCHMARKS, render_serving_bench, run_serving_bench

    if args.runs < 1:
        raise SpecError("--runs", args.runs, "must be at least 1")
    names = args.only or [b.scenario for b in BENCHMARKS] + list(SERVING_BENCHMARKS)
    known = {b.scenario for b in BENCHMARKS} | set(SERVING_BENCHMARKS)
    for name in names:
        if name not in known:
            raise SpecError("--only", name, f"not a benchmark; known: {', '.join(sorted(known))}")
    progress = None if args.json else lambda line: print(line, file=sys.stderr)
    rows = run_bench(names, runs=args.runs, progress=progress)
    serving = run_serving_bench(names, runs=min(args.runs, 3), progress=progress)
    if args.json:
        print(json.dumps(rows + serving, indent=2))
    else:
        print("\n\n".join(text for text in (render_bench(rows) if rows else "",
                                              render_serving_bench(serving) if serving else "") if text))
    return 0


# -- rendering --------------------------------------------------------------------------------

def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _placement_text(scenario, placement) -> str:
    from amp_tui.core.placement import placement_label

    return placement_label(scenario.cluster, placement)


def _summary(scenario) -> str:
    c, m, t = scenario.cluster, scenario.model, scenario.training
    groups = " + ".join(f"{g.count} x {g.label}" for g in c.nodes)
    return (f"{scenario.name}: {c.num_gpus} GPUs ({groups}); {m.name}: {m.num_layers} layers, "
            f"{m.total_params / 1e9:.3g} B params; global batch {t.global_batch_size}, {t.precision}, "
            f"{t.schedule}, recompute {t.recompute}, ZeRO {t.zero_stage}")


def _prediction_row(scenario, p, rank: str, best: float | None) -> list[str]:
    from amp_tui.core.units import format_bytes, format_seconds

    s = p.strategy
    tight = p.tightest_stage
    row = [rank, s.label, str(s.micro_batch_size), str(p.num_micro_batches), format_seconds(p.iteration_time_s),
           f"{p.samples_per_s:.1f}", f"{format_bytes(tight.memory.total_bytes)} / {format_bytes(tight.capacity_bytes)}"
           + ("" if p.fits_memory else " OVER")]
    if best is not None:
        row.append(f"+{(p.iteration_time_s / best - 1) * 100:.1f}%" if p.iteration_time_s > best else "best")
    row += [" ".join(str(n) for n in s.partition), _placement_text(scenario, s.placement)]
    return row


def render_predictions(scenario, predictions) -> str:
    from amp_tui.core.units import format_seconds

    headers = ["#", "tp x pp x dp", "mbs", "B", "iteration", "samples/s", "fullest stage memory",
               "partition", "placement"]
    rows = [_prediction_row(scenario, p, str(i + 1), None) for i, p in enumerate(predictions)]
    out = [_summary(scenario), "", _table(headers, rows, {0, 2, 3, 4, 5})]
    for i, p in enumerate(predictions):
        out.append("")
        out.append(f"strategy {i + 1}: {p.strategy.label}, micro-batch {p.strategy.micro_batch_size}: "
                   f"{format_seconds(p.steady_state_s)} steady state + {format_seconds(p.fill_drain_s)} fill/drain "
                   f"+ {format_seconds(p.dp_and_optimizer_s)} all-reduce/optimizer; bubble {p.bubble_fraction:.0%}")
        if p.reason:
            out.append(f"  does not fit: {p.reason}")
        out.append(_stage_table(p))
    return "\n".join(out)


def _stage_table(p) -> str:
    from amp_tui.core.units import format_bytes, format_seconds

    headers = ["stage", "layers", "GPU", "compute", "p2p comm", "all-reduce", "memory / capacity"]
    rows = [[str(st.index), f"{st.first_layer}-{st.last_layer}", "+".join(st.gpu_types), format_seconds(st.compute_s),
             format_seconds(st.comm_s), format_seconds(st.dp_allreduce_s),
             f"{format_bytes(st.memory.total_bytes)} / {format_bytes(st.capacity_bytes)}" + ("" if st.fits else " OVER")]
            for st in p.stages]
    return "  " + _table(headers, rows, {0, 3, 4, 5}).replace("\n", "\n  ")


def render_search(result, top: int) -> str:
    from amp_tui.core.orders import ORDERS_NOTE
    from amp_tui.core.units import format_seconds

    st = result.stats
    scenario = result.scenario
    orders = f" over {st.node_orders} node orders" if st.node_orders > 1 else ""
    out = [_summary(scenario),
           f"searched {st.candidates} candidates{orders} in {st.search_time_s * 1000:.0f} ms: {st.evaluated} "
           f"evaluated, {st.pruned} pruned by bounds, {st.infeasible} out of memory"]
    if not st.all_node_orders:
        out.append(f"note: {ORDERS_NOTE}")
    out.append("")
    if not result.strategies:
        out.append("no strategy fits in memory; see the reasons below")
    else:
        best = result.strategies[0].iteration_time_s
        headers = ["rank", "tp x pp x dp", "mbs", "B", "iteration", "samples/s", "fullest stage memory", "gap",
                   "partition", "placement"]
        rows = [_prediction_row(scenario, p, str(i + 1), best) for i, p in enumerate(result.strategies[:top])]
        out.append(_table(headers, rows, {0, 2, 3, 4, 5}))
    if result.baseline is not None:
        b = result.baseline
        out += ["", f"uniform baseline (even split, rank order): {b.strategy.label} micro-batch "
                    f"{b.strategy.micro_batch_size}, {format_seconds(b.iteration_time_s)}"
                + (f"; the top strategy is {result.speedup_vs_baseline:.2f}x faster" if result.strategies else "")]
    if result.infeasible:
        out += ["", f"{len(result.infeasible)} candidates do not fit in memory, e.g.:"]
        for entry in result.infeasible[:3]:
            s = entry.strategy
            out.append(f"  {s.label} micro-batch {s.micro_batch_size}, {_placement_text(scenario, s.placement)}: "
                       f"{entry.reason}")
    return "\n".join(out)
