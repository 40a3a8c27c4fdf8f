"""`amp-tui bench`: time the search on fixed scenarios against the targets of the search issue."""

from __future__ import annotations

import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.costmodel.layer_times import clear_shared_caches
from amp_tui.core.search.search import search
from amp_tui.core.search.subclusters import search_parts
from amp_tui.core.spec.scenario import load_scenario

CANCEL_TARGET_S = 0.050   # a cancelled search returns within this long of the check turning true
# reference_work's median on the 2-core development VM in its fastest phase, where docs/benchmarks.md's
# figures were taken (2026-11-27; the same VM ran it in 9.2 to 15.9 ms within ten minutes).
REFERENCE_WORK_S = 0.0092


@dataclass(frozen=True)
class Benchmark:
    scenario: str
    target_s: float
    target_memory_bytes: float | None = None
    idle_nodes: bool = False    # search the parts of the cluster too (what `plan` does), not only all of it

    @property
    def name(self) -> str:
        return f"{self.scenario}+idle" if self.idle_nodes else self.scenario

    def run(self, scenario, should_cancel=None):
        """The search this benchmark times; with idle nodes, (result, how the parts were searched)."""
        if self.idle_nodes:
            return search_parts(scenario, should_cancel=should_cancel)
        return search(scenario, should_cancel=should_cancel), None


BENCHMARKS = (
    Benchmark("paper-homogeneous", 0.050),
    Benchmark("paper-het-cluster", 0.050),
    Benchmark("paper-het-model", 0.050),
    Benchmark("bench-128-gpus", 0.250),
    Benchmark("bench-1024-gpus", 2.0),
    Benchmark("bench-3072-a100-gpt-1t", 10.0, 2**30),
    # The heterogeneity issue's targets: idle nodes allowed, as `plan` searches by default.
    Benchmark("paper-het-cluster", 0.050, idle_nodes=True),
    Benchmark("bench-128-gpus", 0.250, idle_nodes=True),
    Benchmark("bench-1024-gpus", 1.0, idle_nodes=True),
    Benchmark("bench-1024-gpus-6-types", 2.0),
    Benchmark("bench-2048-gpus-8-groups", 5.0, idle_nodes=True),
    # The modern-space issue's targets: today's models and clusters, and many uneven layers.
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
    """Per scenario: median wall time of `runs` searches after one warm-up (scenario loading and
    imports excluded), candidates per second, the search's peak traced memory (one extra run
    under tracemalloc, kept out of the timings because tracing slows allocation), and the longest
    stretch without a cancellation poll, start and end included (one more run): the most a cancel
    can wait."""
    rows = []
    for bench in BENCHMARKS:
        if bench.name not in names:
            continue
        scenario = load_scenario(bench.scenario)
        result, parts = bench.run(scenario)  # warm-up
        times, machine = [], []
        for _ in range(runs):
            machine.append(reference_work())     # beside each timed run: the machine's speed then
            clear_shared_caches()      # each timed search starts cold: no layer times from the last run
            started = time.perf_counter()
            result, parts = bench.run(scenario)
            times.append(time.perf_counter() - started)
        clear_shared_caches()
        tracemalloc.start()
        bench.run(scenario)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        poll_gap = _worst_poll_gap(bench, scenario)
        median = statistics.median(times)
        top = result.strategies[0] if result.strategies else None
        row = {
            "scenario": bench.name,
            "gpus": scenario.cluster.num_gpus,
            "layers": scenario.model.num_layers,
            "median_s": median,
            "min_s": min(times),
            # the reference workload's median over the same minutes, against the development VM's
            # fastest (above 1: the machine ran slower, and every figure of the row with it)
            "machine_factor": statistics.median(machine) / REFERENCE_WORK_S,
            "target_s": bench.target_s,
            "meets_target": (median <= bench.target_s and poll_gap <= CANCEL_TARGET_S
                             and (bench.target_memory_bytes is None or peak <= bench.target_memory_bytes)),
            "candidates": result.stats.candidates,
            "evaluated": result.stats.evaluated,
            "pruned": result.stats.pruned,
            "candidates_per_s": result.stats.candidates / median,
            "peak_memory_bytes": peak,
            "target_memory_bytes": bench.target_memory_bytes,
            "worst_poll_gap_s": poll_gap,
            "cancel_target_s": CANCEL_TARGET_S,
            "top": (f"{top.strategy.label} mbs {top.strategy.micro_batch_size}, {top.iteration_time_s:.4g} s"
                    if top else "none fits")
                   + (f", {top.strategy.num_gpus} of {scenario.cluster.num_gpus} GPUs used"
                      if top and top.strategy.idle else ""),
            # idle nodes: parts of the cluster searched, and the gap when the search stopped early
            "parts_searched": parts.searched if parts else None,
            "exact": parts.exact if parts else result.stats.exact,
            "gap": parts.gap if parts else result.stats.orders_gap(top.iteration_time_s if top else None),
        }
        rows.append(row)
        if progress:
            progress(f"{bench.scenario}: median {median * 1000:.1f} ms")
    rows_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for row in rows:
        row["process_max_rss_bytes"] = rows_rss
    return rows


def _worst_poll_gap(bench: Benchmark, scenario) -> float:
    clear_shared_caches()      # cold, as the timed runs: computing layer times is part of the wait
    stamps = [time.perf_counter()]

    def poll() -> bool:
        stamps.append(time.perf_counter())
        return False

    bench.run(scenario, should_cancel=poll)
    stamps.append(time.perf_counter())
    return max(later - earlier for earlier, later in zip(stamps, stamps[1:]))


def render_bench(rows: list[dict]) -> str:
    from amp_tui.core.base.units import format_bytes

    header = (f"{'scenario':<29} {'GPUs':>5} {'layers':>6} {'median':>10} {'target':>8} {'ok':>3} "
              f"{'candidates':>10} {'evaluated':>9} {'cand/s':>9} {'peak mem':>10} {'cancel':>7} {'exact':>11} "
              f"{'machine':>7}"
              f"  top strategy")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['scenario']:<29} {r['gpus']:>5} {r['layers']:>6} {r['median_s'] * 1000:>8.1f}ms "
            f"{r['target_s'] * 1000:>6.0f}ms {'yes' if r['meets_target'] else 'NO':>3} {r['candidates']:>10} "
            f"{r['evaluated']:>9} {r['candidates_per_s']:>9.0f} {format_bytes(r['peak_memory_bytes']):>10} "
            f"{r['worst_poll_gap_s'] * 1000:>5.1f}ms {_exactness(r):>11} {r['machine_factor']:>6.2f}x  {r['top']}")
    if rows:
        lines.append(f"cancel: the longest stretch without a cancellation poll (target {CANCEL_TARGET_S * 1000:.0f} ms)")
        lines.append("+idle: idle nodes allowed (what `plan` searches); exact: every node order, and every part of "
                     "the cluster that could win, searched; else the most the best found can be above the optimum")
        lines.append(f"machine: a fixed workload's time beside the timed runs against the development VM's "
                     f"fastest ({REFERENCE_WORK_S * 1000:.1f} ms): above 1.00x this machine ran that much slower, "
                     f"and the row with it")
        lines.append(f"process peak RSS (all of the above, incl. Python and numpy): "
                     f"{format_bytes(rows[0]['process_max_rss_bytes'])}")
    return "\n".join(lines)


def _exactness(row: dict) -> str:
    if row["exact"]:
        return "yes"
    return f"no, gap {row['gap']:.0%}" if row["gap"] is not None else "no"
