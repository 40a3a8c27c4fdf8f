"""`amp-tui bench`: time the whole cluster's search and `plan` as users run it on fixed scenarios,
against the targets of the search issues."""

from __future__ import annotations

import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.costmodel.layer_times import clear_shared_caches
from amp_tui.core.search.deadline import DEFAULT_TIME_LIMIT_S
from amp_tui.core.search.planner import find_plans
from amp_tui.core.search.search import search
from amp_tui.core.spec.scenario import load_scenario

CANCEL_TARGET_S = 0.050   # a cancelled search returns within this long of the check turning true
TIME_LIMIT_SLACK_S = 0.1  # a time limit holds to within this
# reference_work's median on the 2-core development VM in its fastest phase, where docs/benchmarks.md's
# figures were taken (2026-11-27; the same VM ran it in 9.2 to 15.9 ms within ten minutes).
REFERENCE_WORK_S = 0.0092


@dataclass(frozen=True)
class Benchmark:
    scenario: str
    target_s: float                        # the whole cluster's search alone
    target_memory_bytes: float | None = None
    # `plan` as users run it (idle nodes, the post-pass, the default time limit): at most this
    # long; where set, its idle search (the `search_time_s` plan reports) at most `idle_target_s`
    # and `idle_ratio` times the whole cluster's search of the same run
    plan_target_s: float = DEFAULT_TIME_LIMIT_S + TIME_LIMIT_SLACK_S
    idle_target_s: float | None = None
    idle_ratio: float | None = None

    @property
    def name(self) -> str:
        return self.scenario


# In the order of docs/benchmarks.md's table (a test checks it): the paper's three settings, then
# by size, the modern-space ones last.
BENCHMARKS = (
    Benchmark("paper-homogeneous", 0.030, idle_target_s=0.045, idle_ratio=1.5),
    Benchmark("paper-het-cluster", 0.030, idle_target_s=0.045, idle_ratio=1.5),
    Benchmark("paper-het-model", 0.030, idle_target_s=0.045, idle_ratio=1.5),
    Benchmark("bench-128-gpus", 0.250),
    Benchmark("bench-1024-gpus", 2.0),
    Benchmark("bench-3072-a100-gpt-1t", 10.0, 2**30),
    Benchmark("bench-1024-gpus-6-types", 2.0),
    Benchmark("bench-2048-gpus-8-groups", 5.0),
    Benchmark("bench-1024-h100-llama3-70b", 1.0),
    Benchmark("llama3.1-405b-16384-h100", 5.0),
    Benchmark("bench-1024-gpus-1000-layers", 2.0, 500 * 2**20),
)


def reference_work() -> float:
    """Seconds a fixed workload takes: small numpy reductions in a Python loop with dict stores,
    the mix the search spends its time on. It measures the machine of the moment, not the code:
    on the development VM its time and paper-het-cluster+idle's moved together, at 6.1 to 7.0
    times it, over 39 paired samples while the VM's speed drifted 1.7x."""
    started = time.perf_counter()
    table = np.arange(512, dtype=np.float64).reshape(32, 16) % 7.0
    total, seen = 0.0, {}
    for i in range(1500):
        total += float(np.minimum.reduce(table + table[i % 32], axis=1).max())
        seen[(i % 97, i % 13)] = total
    return time.perf_counter() - started


def run_bench(names: list[str], runs: int = 5, progress: Callable[[str], None] | None = None) -> list[dict]:
    """Per scenario, interleaved run by run: the whole cluster's search alone and `plan` as users
    run it (find_plans with its default time limit: idle nodes, the post-pass), each the median of
    `runs` after one warm-up (scenario loading and imports excluded), from cold caches; candidates
    per second; the search's peak traced memory (one extra run under tracemalloc, kept out of the
    timings because tracing slows allocation); and the longest stretch without a cancellation poll,
    start and end included, in the search and in `plan` (one more run each): the most a cancel can
    wait."""
    rows = []
    for bench in BENCHMARKS:
        if bench.name not in names:
            continue
        scenario = load_scenario(bench.scenario)
        result = search(scenario)       # warm-up
        find_plans(scenario)
        times, plan_times, idle_times, machine = [], [], [], []
        for _ in range(runs):
            machine.append(reference_work())     # beside each timed run: the machine's speed then
            clear_shared_caches()      # each timed run starts cold: no layer times from the last run
            started = time.perf_counter()
            result = search(scenario)
            times.append(time.perf_counter() - started)
            clear_shared_caches()
            started = time.perf_counter()
            plans = find_plans(scenario)
            plan_times.append(time.perf_counter() - started)
            idle_times.append(plans.result.stats.search_time_s)     # its search over the parts
        clear_shared_caches()
        tracemalloc.start()
        search(scenario)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        poll_gap = max(_worst_poll_gap(lambda poll: search(scenario, should_cancel=poll)),
                       _worst_poll_gap(lambda poll: find_plans(scenario, should_cancel=poll)))
        median, plan_median, idle = (statistics.median(times), statistics.median(plan_times),
                                     statistics.median(idle_times))
        top, best = result.strategies[0] if result.strategies else None, plans.result.strategies
        best = best[0] if best else None
        plan_ok = (plan_median <= bench.plan_target_s
                   and (bench.idle_target_s is None or idle <= bench.idle_target_s)
                   and (bench.idle_ratio is None or idle <= bench.idle_ratio * median))
        row = {
            "scenario": bench.name,
            "gpus": scenario.cluster.num_gpus,
            "layers": scenario.model.num_layers,
            "median_s": median,                # the whole cluster's search alone
            "min_s": min(times),
            "plan_median_s": plan_median,      # `plan` as users run it
            "plan_min_s": min(plan_times),
            "idle_median_s": idle,             # of it, the search over the parts (plan's search_time_s)
            # the reference workload's median over the same minutes, against the development VM's
            # fastest (above 1: the machine ran slower, and every figure of the row with it)
            "machine_factor": statistics.median(machine) / REFERENCE_WORK_S,
            "target_s": bench.target_s,
            "plan_target_s": bench.plan_target_s,
            "idle_target_s": bench.idle_target_s,
            "idle_ratio_target": bench.idle_ratio,
            "meets_target": (median <= bench.target_s and plan_ok and poll_gap <= CANCEL_TARGET_S
                             and (bench.target_memory_bytes is None or peak <= bench.target_memory_bytes)),
            "candidates": result.stats.candidates,
            "evaluated": result.stats.evaluated,
            "pruned": result.stats.pruned,
            "candidates_per_s": result.stats.candidates / median,
            "peak_memory_bytes": peak,
            "target_memory_bytes": bench.target_memory_bytes,
            "worst_poll_gap_s": poll_gap,
            "cancel_target_s": CANCEL_TARGET_S,
            "top": _describe(top, scenario),
            "exact": result.stats.exact,
            "gap": result.stats.orders_gap(top.iteration_time_s if top else None),
            # what `plan` gives: its best (idle nodes allowed), exact, or the proven gap
            "plan_top": _describe(best, scenario),
            "plan_exact": plans.idle_search.exact,
            "plan_gap": plans.idle_search.gap,
            "parts_searched": plans.idle_search.searched,
        }
        rows.append(row)
        if progress:
            progress(f"{bench.scenario}: search {median * 1000:.1f} ms, plan {plan_median * 1000:.1f} ms "
                     f"(idle search {idle * 1000:.1f} ms)")
    rows_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for row in rows:
        row["process_max_rss_bytes"] = rows_rss
    return rows


def _describe(top, scenario) -> str:
    if top is None:
        return "none fits"
    return (f"{top.strategy.label} mbs {top.strategy.micro_batch_size}, {top.iteration_time_s:.4g} s"
            + (f", {top.strategy.num_gpus} of {scenario.cluster.num_gpus} GPUs used" if top.strategy.idle else ""))


def _worst_poll_gap(run: Callable[[Callable[[], bool]], object]) -> float:
    clear_shared_caches()      # cold, as the timed runs: computing layer times is part of the wait
    stamps = [time.perf_counter()]

    def poll() -> bool:
        stamps.append(time.perf_counter())
        return False

    run(poll)
    stamps.append(time.perf_counter())
    return max(later - earlier for earlier, later in zip(stamps, stamps[1:]))


def render_bench(rows: list[dict]) -> str:
    from amp_tui.core.base.units import format_bytes

    header = (f"{'scenario':<28} {'GPUs':>5} {'layers':>6} {'search':>9} {'target':>7} {'plan':>9} {'target':>7} "
              f"{'idle':>9} {'target':>14} {'ok':>3} {'plan exact':>11} {'candidates':>10} {'evaluated':>9} "
              f"{'peak mem':>10} {'cancel':>7} {'machine':>7}  plan's best")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['scenario']:<28} {r['gpus']:>5} {r['layers']:>6} {_ms(r['median_s']):>9} {_ms(r['target_s']):>7} "
            f"{_ms(r['plan_median_s']):>9} {_ms(r['plan_target_s']):>7} {_ms(r['idle_median_s']):>9} "
            f"{_idle_target(r):>14} {'yes' if r['meets_target'] else 'NO':>3} "
            f"{_exactness(r['plan_exact'], r['plan_gap']):>11} {r['candidates']:>10} {r['evaluated']:>9} "
            f"{format_bytes(r['peak_memory_bytes']):>10} {r['worst_poll_gap_s'] * 1000:>5.1f}ms "
            f"{r['machine_factor']:>6.2f}x  {r['plan_top']}")
    if rows:
        lines.append("search: the whole cluster's search alone; plan: what `amp-tui plan` runs (idle nodes allowed, "
                     f"the post-pass, its default time limit of {DEFAULT_TIME_LIMIT_S:g} s), medians of the same runs; "
                     "idle: of plan, the search over the parts of the cluster (the search_time_s it reports)")
        lines.append("plan exact: every part of the cluster and every node order that could win searched; else "
                     "the most the best found can be above the optimum")
        lines.append(f"cancel: the longest stretch without a cancellation poll (target {CANCEL_TARGET_S * 1000:.0f} ms)")
        lines.append(f"machine: a fixed workload's time beside the timed runs against the development VM's "
                     f"fastest ({REFERENCE_WORK_S * 1000:.1f} ms): above 1.00x this machine ran that much slower, "
                     f"and the row with it")
        lines.append(f"process peak RSS (all of the above, incl. Python and numpy): "
                     f"{format_bytes(rows[0]['process_max_rss_bytes'])}")
    return "\n".join(lines)


def render_markdown(rows: list[dict]) -> str:
    """docs/benchmarks.md's table, from the rows (the docs are regenerated from it)."""
    lines = ["| scenario | search | target | plan | target | idle | target | plan exact | machine | plan's best |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        missed = "" if r["meets_target"] else " **missed**"
        lines.append(f"| {r['scenario']} | {_ms(r['median_s'])} | {_ms(r['target_s'])} | {_ms(r['plan_median_s'])} | "
                     f"{_ms(r['plan_target_s'])} | {_ms(r['idle_median_s'])} | {_idle_target(r)} | "
                     f"{_exactness(r['plan_exact'], r['plan_gap'])}{missed} | "
                     f"{r['machine_factor']:.2f}x | {r['plan_top']} |")
    return "\n".join(lines)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}ms" if seconds < 1 else f"{seconds:.2f}s"


def _idle_target(row: dict) -> str:
    if row["idle_target_s"] is None:
        return "-"
    return _ms(row["idle_target_s"]) + (f", {row['idle_ratio_target']:g}x search" if row["idle_ratio_target"] else "")


def _exactness(exact: bool, gap: float | None) -> str:
    if exact:
        return "yes"
    return f"gap {gap:.1%}" if gap is not None else "no"
