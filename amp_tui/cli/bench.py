"""`amp-tui bench`: time the search (and the serving solver) on the benchmark scenarios."""

from __future__ import annotations

import sys

from amp_tui.cli.output import json_text
from amp_tui.cli.parser import whole_number
from amp_tui.core.base.errors import SpecError


def add_parser(sub) -> None:
    be = sub.add_parser("bench", help="time the search on the benchmark scenarios")
    be.add_argument("--json", action="store_true", help="print JSON instead of a table")
    be.add_argument("--runs", type=whole_number, default=5, help="timed runs per scenario after a warm-up (default 5)")
    be.add_argument("--only", metavar="NAME", action="append", help="run only this benchmark (repeatable)")
    be.add_argument("--markdown", action="store_true", help="print docs/benchmarks.md's table instead")


def run(args) -> int:
    from amp_tui.core.base.limits import MAX_BENCH_RUNS
    from amp_tui.core.search.bench import BENCHMARKS, render_bench, render_markdown, run_bench
    from amp_tui.serving.bench import SERVING_BENCHMARKS, render_serving_bench, run_serving_bench

    if not 1 <= args.runs <= MAX_BENCH_RUNS:
        raise SpecError("--runs", args.runs, f"must be 1 to {MAX_BENCH_RUNS}")
    names = args.only or [b.name for b in BENCHMARKS] + list(SERVING_BENCHMARKS)
    known = {b.name for b in BENCHMARKS} | set(SERVING_BENCHMARKS)
    for name in names:
        if name not in known:
            raise SpecError("--only", name, f"not a benchmark; known: {', '.join(sorted(known))}")
    progress = None if args.json else lambda line: print(line, file=sys.stderr)
    rows = run_bench(names, runs=args.runs, progress=progress)
    if args.markdown:
        print(render_markdown(rows))
        return 0
    serving = run_serving_bench(names, runs=min(args.runs, 3), progress=progress)
    if args.json:
        print(json_text(rows + serving))
    else:
        print("\n\n".join(text for text in (render_bench(rows) if rows else "",
                                              render_serving_bench(serving) if serving else "") if text))
    return 0
