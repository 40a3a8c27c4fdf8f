"""`amp-tui plan`: search for the best strategies, print them, optionally save one as a plan."""

from __future__ import annotations

import sys
from pathlib import Path

from amp_tui.cli.output import json_text, render_search
from amp_tui.cli.parser import whole_number
from amp_tui.core.base.errors import SpecError


def add_parser(sub) -> None:
    pl = sub.add_parser("plan", help="search for the best strategies")
    pl.add_argument("scenario", metavar="SCENARIO", help="scenario preset name or scenario file")
    pl.add_argument("--top", type=whole_number, default=None, metavar="N", help="strategies to show (default: the scenario's search.top, 10)")
    pl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pl.add_argument("--save", metavar="PLAN.yaml", help="save a strategy as a plan file")
    pl.add_argument("--rank", type=whole_number, default=1, metavar="N", help="with --save: which ranked strategy (default 1)")
    pl.add_argument("--force", action="store_true", help="with --save: overwrite an existing file")
    pl.add_argument("--objective", choices=("time", "cost"), default="time",
                    help="rank by iteration time (default) or by cost per token (needs prices)")
    pl.add_argument("--budget", type=float, default=None, metavar="USD_PER_HOUR",
                    help="only strategies whose nodes cost at most this many dollars per hour")
    pl.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="seconds the search may take (default 1.5, less if reading the scenario took long: "
                         "plan answers within 2 s, later only if it has found nothing by then); past it, the "
                         "best found and a proven gap")
    pl.add_argument("--use-all-gpus", action="store_true",
                    help="never leave nodes idle (as search.use_all_gpus: true)")
    pl.add_argument("--sensitivity", action="store_true",
                    help="also rerun the search with each link, GPU speed and the batch size scaled")


def run(args) -> int:
    from dataclasses import replace

    from amp_tui.core.plans.planfile import open_scenario
    from amp_tui.core.search.objective import Objective
    from amp_tui.core.search.planner import find_plans

    if args.top is not None and args.top < 1:
        raise SpecError("--top", args.top, "must be at least 1")
    if args.rank < 1:
        raise SpecError("--rank", args.rank, "must be at least 1")
    time_limit_s = _time_limit(args.time_limit)
    if args.save is not None:
        _check_save_target(args.save, args.force)
    objective = Objective(args.objective, args.budget)
    scenario = open_scenario(args.scenario)[0]     # a plan file is checked whole, not just its scenario
    if args.use_all_gpus:
        scenario = replace(scenario, search=replace(scenario.search, use_all_gpus=True))
    top = max(args.top or scenario.search.top, args.rank if args.save else 1)
    first_strategy_s = None     # an explicit limit holds, found or not
    from amp_tui.core.search.work import work_for

    work = work_for(time_limit_s)   # the search's budget: the same answer on any machine (work.py)
    if args.time_limit is None:     # the default's safety net: 3 s from the command's start ...
        from amp_tui.cli import STARTED_S
        from amp_tui.core.search import work as budgets
        from amp_tui.core.search.deadline import DEFAULT_FIRST_STRATEGY_S, now

        elapsed_s = now() - STARTED_S       # (the search's clock: time.perf_counter, as STARTED_S)
        time_limit_s = max(budgets.DEFAULT_SAFETY_MIN_S, budgets.DEFAULT_SAFETY_S - elapsed_s)
        first_strategy_s = max(time_limit_s, DEFAULT_FIRST_STRATEGY_S - elapsed_s)    # ... unless it finds nothing
    plans = find_plans(scenario, objective, top=top, time_limit_s=time_limit_s,
                       first_strategy_limit_s=first_strategy_s, work=work)
    result, idle_search, uneven = plans.result, plans.idle_search, plans.uneven
    saved = None
    if args.save and result.strategies:
        from amp_tui.core.plans.planfile import save_plan

        if args.rank > len(result.strategies):
            raise SpecError("--rank", args.rank, f"only {len(result.strategies)} feasible strategies were found")
        chosen = result.strategies[args.rank - 1]
        from amp_tui.core.plans.runnable import custom_note

        if custom_note(chosen.strategy):     # said before the file is written, not after
            from amp_tui.cli.output import custom_footnote

            print(f"warning: strategy {args.rank}, {custom_note(chosen.strategy)}. "
                  + custom_footnote(result.strategies).split(". ", 1)[-1], file=sys.stderr)
        saved = save_plan(args.save, scenario, chosen, overwrite=args.force)
    shown = args.top or scenario.search.top     # the search may have ranked more, for --rank
    what_ifs = None
    if args.sensitivity:
        from amp_tui.core.plans.sensitivity import sensitivity

        # The same search as the ranking above (find_plans, same objective), so the two agree.
        what_ifs = sensitivity(scenario, result, objective)
    if args.json:
        from amp_tui.core.plans.confidence import confidence
        from amp_tui.core.plans.no_strategy import nothing_found

        from amp_tui.core.costmodel.cost import CostModel
        from amp_tui.core.costmodel.time_sources import layer_time_sources, source_warning

        ranked = result.to_dict(top=shown)
        cost = CostModel(scenario)
        for entry, p in zip(ranked["strategies"], result.strategies):
            entry["time_source_warning"] = source_warning(cost, p)
        sure = confidence(scenario)
        print(json_text({**ranked, "layer_times": layer_time_sources(cost),
                     "uncertainty": sure.band, "uncertainty_basis": sure.source, "objective": objective.kind,
                     "budget_usd_per_hour": objective.budget_usd_per_hour,
                     "idle_search": idle_search.to_dict(), "uneven_search": uneven.to_dict(),
                     "time_limit_s": time_limit_s, "overrun_s": plans.overrun_s,
                     **({} if result.strategies else {"no_strategy": nothing_found(result, objective)}),
                     **(_network_json(scenario) if scenario.cluster.network is not None else {}),
                     **({"sensitivity": what_ifs.to_dict()} if what_ifs is not None else {})}))
    else:
        print(render_search(result, shown, objective, idle_search))
        if uneven.found or uneven.timed_out:     # (said only when the post-pass changed or cut the ranking)
            print(f"note: {uneven.note}")
    if plans.overrun_s > 0:
        from amp_tui.core.search.work import DEFAULT_SAFETY_S

        print(f"note: no strategy was found within the default time limit ({time_limit_s:.2g} s of search, what "
              f"start-up left of {DEFAULT_SAFETY_S:g} s); the search went on {plans.overrun_s:.2g} s past it "
              f"{'until it found one' if result.strategies else 'and found none'}", file=sys.stderr if args.json else sys.stdout)
    if plans.out_of_time and (idle_search.gap is None or idle_search.gap > 0.01):
        limit_s = time_limit_s if args.time_limit is None else args.time_limit
        what = ("its work budget (what fits in the time limit on a quiet machine: the same answer on any machine)"
                if idle_search.cut_by == "work" else f"its time limit of {time_limit_s:.2g} s")
        print(f"note: the search stopped at {what}; --time-limit S searches longer "
              f"(e.g. --time-limit {max(10 * round(limit_s), 15)})", file=sys.stderr if args.json else sys.stdout)
    if what_ifs is not None and not args.json:
        from amp_tui.core.plans.sensitivity import render

        print("\nwhat if the figures are off (each what-if reruns the search):")
        print(render(what_ifs))
    if saved:
        print(f"saved strategy {args.rank} to {saved}", file=sys.stderr if args.json else sys.stdout)
    if not result.strategies and args.save:
        print("amp-tui: nothing saved: no strategy was found", file=sys.stderr)
    if not result.strategies and not plans.out_of_time and idle_search.exact:
        # Searched to the end, and nothing can train: not a user error (2), but not a plan either. The
        # reason is in the output above (and in the JSON's "no_strategy"). Cut short by the time limit
        # (or parts of the cluster left unsearched), nothing is known yet: the note says so.
        return 1
    return 0


def _network_json(scenario) -> dict:
    from amp_tui.core.spec.network import link_report

    return {"network": {"source": scenario.cluster.network.summary(), "groups": link_report(scenario.cluster)}}


def _time_limit(seconds: float | None) -> float:
    from amp_tui.core.base.limits import MAX_TIME_LIMIT_S
    from amp_tui.core.search.deadline import DEFAULT_TIME_LIMIT_S

    if seconds is None:
        return DEFAULT_TIME_LIMIT_S
    if not 0 < seconds <= MAX_TIME_LIMIT_S:      # (nan fails too)
        raise SpecError("--time-limit", seconds, f"must be more than 0 and at most {MAX_TIME_LIMIT_S:,} seconds")
    return seconds


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
