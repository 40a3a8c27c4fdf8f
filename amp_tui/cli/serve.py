"""`amp-tui serve`: solve a serving placement and print it (text or JSON), optionally save it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from amp_tui.cli.output import table
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import format_seconds


def add_parser(sub) -> None:
    se = sub.add_parser("serve", help="place a model for serving: most predicted decode tokens/s (or max flow)")
    se.add_argument("scenario", metavar="SCENARIO", help="serving scenario preset or file, or a saved placement")
    se.add_argument("--json", action="store_true", help="print JSON instead of a table")
    se.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                    help="a safety net on the search in seconds (default 60): the search is bounded by its work, so "
                         "the same input gives the same placement; past the limit it returns the best found so far")
    se.add_argument("--save", metavar="FILE.yaml", help="save the placement (reopen with serve or ui)")
    se.add_argument("--objective", choices=("decode", "flow"), default="decode",
                    help="decode: most predicted decode tokens/s (default); flow: most max flow (Helix's objective)")
    se.add_argument("--max-tpot", type=float, metavar="S", help="keep the predicted time per output token under S seconds")
    se.add_argument("--max-ttft", type=float, metavar="S", help="keep the predicted time to first token under S seconds")
    se.add_argument("--window", metavar="S", help="rank by decode tokens/s over S seconds of a closed-loop offline "
                                                  "benchmark after its warm-up (Helix's: 120 or 600); 'steady' for the "
                                                  "steady state (default: the scenario's benchmark, else steady)")
    se.add_argument("--export", metavar="DIR", help="write the placement where engines can run it: a Helix-style "
                                                    "layout, the routes, and vLLM launch scripts per pipeline")


def run(args) -> int:
    from amp_tui.serving.planfile import open_serving, save_placement
    from amp_tui.serving.result import run_serve
    from amp_tui.serving.spec import defaults_note, parse_window, with_window

    if not 0 < args.time_limit <= 3600:
        raise SpecError("--time-limit", args.time_limit, "expected seconds between 0 and 3600")
    if args.save and Path(args.save).is_dir():
        raise SpecError("--save", Path(args.save), "is a folder; give the file's name")
    for flag, value in (("--max-tpot", args.max_tpot), ("--max-ttft", args.max_ttft)):
        if value is not None and not 0 < value <= 86400:
            raise SpecError(flag, value, "expected seconds between 0 and 86400")
    scenario, placement = open_serving(args.scenario)
    if args.window is not None:
        scenario = with_window(scenario, parse_window(args.window))
    note = defaults_note(scenario)
    if note:
        print(f"note: {note}", file=sys.stderr)
    result = run_serve(scenario, time_limit_s=args.time_limit, placement=placement, objective=args.objective,
                       max_tpot_s=args.max_tpot, max_ttft_s=args.max_ttft)
    if args.save:
        saved = save_placement(args.save, result)
        print(f"saved the placement to {saved}", file=sys.stderr)
    if args.export:
        from amp_tui.serving.export import export_placement

        for path in export_placement(args.export, result):
            print(f"wrote {path}", file=sys.stderr)
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result))
    return 0


def render(result) -> str:
    sc, net, sol = result.scenario, result.net, result.solution
    model = sc.serving_model
    groups = " + ".join(f"{g.count} x {g.label}" + (f" ({g.region})" if len(sc.regions) > 1 else "") for g in sc.groups)
    how = "reopened placement" if sol.stopped_by == "given" else f"solved in {format_seconds(sol.solve_time_s)}"
    out = [f"{sc.name}: {sc.num_machines} machines ({groups}); {model.name}: {model.num_layers} layers; "
           f"{sc.serving.prompt_tokens} prompt + {sc.serving.output_tokens} output tokens per request"]
    if result.served is not None:
        p = result.served.prediction
        over = result.to_json()["predicted"]["measured_over"]
        out.append(f"predicted ({over}): decode {result.served.decode_tokens_per_s:,.1f} tokens/s, prompt "
                   f"{result.served.prompt_tokens_per_s:,.1f} tokens/s; TTFT {format_seconds(p.ttft_s)}, TPOT "
                   f"{format_seconds(p.tpot_s)}; {p.requests_in_flight:,.0f} requests in flight ({p.limited_by}); "
                   f"depth {p.depth:.1f} machines")
    if result.objective == "decode":
        bench = sc.serving.benchmark
        out.append("ranked by decode tokens/s " + (
            f"over [{bench[0]:g} s, {bench[0] + bench[1]:g} s] of a closed-loop offline run ({bench[2]} requests to "
            "start, Helix's feeder); --window S sets the window, --window steady ranks the steady state"
            if bench else "at steady state; --window S ranks a closed-loop run's first S seconds after its warm-up"))
    out += [f"max flow {sol.throughput:,.1f} tokens/s (prompt and decode)   bound {sol.upper_bound:,.1f}   "
            f"objective {result.objective}   {how} ({sol.evaluations} evaluations)"]
    gap = result.gap_sentence()
    out += ([f"  {gap}"] if gap else []) + [""]
    util = result.utilisation()
    rows = []
    for m in range(net.num_machines):
        k = sol.placement.count[m]
        a = sol.placement.first[m]
        bar = _bar(a, k, model.num_layers)
        rows.append([result.machine_label(m), net.machine_region[m], f"{a}-{a + k - 1}" if k else "idle", str(k),
                     f"{net.capacity(m, k):,.0f}" if k else "-", f"{util[m]:.0%}" if k else "-", bar])
    out.append(table(["machine", "region", "layers", "n", "capacity", "used", "layers held"], rows, {3, 4, 5}))
    out += ["", "baselines (max flow of their placements):"]
    for name, (_, value) in result.baselines.items():
        if value > 0:
            out.append(f"  {name:<20} {value:>10,.1f} tokens/s of max flow")
        else:
            out.append(f"  {name:<20} {0:>10,.1f} tokens/s   (no complete pipeline: the model does not fit)")
    busiest = sorted(range(net.num_machines), key=lambda m: -util[m])[:5]
    out += ["", "busiest machines: " + ", ".join(f"{result.machine_label(m)} {util[m]:.0%}" for m in busiest if util[m] > 0)]
    out.append("busiest links:")
    for a, b, f, u in result.busiest_links():
        out.append(f"  {a} -> {b}: {f:,.1f} tokens/s ({u:.1%} of the link)")
    out += ["", f"routes ({len(result.routes)}; weighted round robin by share):"]
    for route in result.routes[:10]:
        hops = [f"{result.machine_label(m)}[{x}-{y}]" for m, (x, y) in zip(route.machines, route.layers)]
        out.append(f"  {route.share:6.1%}  {route.tokens_per_s:9,.1f} tokens/s  {len(hops)} machines")
        out += ["      " + " -> ".join(hops[i:i + 4]) for i in range(0, len(hops), 4)]     # short lines
    if len(result.routes) > 10:
        out.append(f"  ... {len(result.routes) - 10} more (--json lists them all)")
    return "\n".join(out)


def _bar(first: int, count: int, layers: int, width: int = 40) -> str:
    cells = [" "] * width
    for c in range(width):
        lo, hi = c * layers / width, (c + 1) * layers / width
        if count and first < hi and first + count > lo:
            cells[c] = "#"
    return "|" + "".join(cells) + "|"
