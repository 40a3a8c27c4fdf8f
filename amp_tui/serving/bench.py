"""The serving section of `amp-tui bench`: on the three Helix LLaMA-2 70B clusters, time the max-flow solver
(throughput, bound and gap; target: within 10 s, gap at most 5%) and what a user's `serve` runs (the decode
objective's search at the command's default limit, scenario loading excluded; target: within 10 s)."""

from __future__ import annotations

import statistics
import time

from amp_tui.serving.network import build_network
from amp_tui.serving.flow.solver import solve
from amp_tui.serving.result import run_serve
from amp_tui.serving.spec import load_serving_scenario

SERVING_BENCHMARKS = ("helix-single24-llama2-70b", "helix-geo3x24-llama2-70b", "helix-hetero42-llama2-70b")
TARGET_S = 10.0
TARGET_GAP = 0.05
SERVE_LIMIT_S = 60.0        # `serve --time-limit`'s default: the safety net, not the target


def run_serving_bench(names: list[str], runs: int = 3, progress=None) -> list[dict]:
    """Per scenario: median wall time of `runs` solves (scenario loading excluded) and the figures."""
    rows = []
    for name in SERVING_BENCHMARKS:
        if name not in names:
            continue
        scenario = load_serving_scenario(name)
        times, solution = [], None
        for _ in range(runs):
            started = time.perf_counter()
            solution = solve(build_network(scenario), time_limit_s=TARGET_S)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        serve_times, served = [], None
        for _ in range(runs):
            started = time.perf_counter()
            served = run_serve(scenario, time_limit_s=SERVE_LIMIT_S)
            serve_times.append(time.perf_counter() - started)
        rows.append({"scenario": name, "machines": scenario.num_machines, "median_s": median, "max_s": max(times),
                     "throughput_tokens_per_s": float(solution.throughput),
                     "upper_bound_tokens_per_s": float(solution.upper_bound), "gap": float(solution.gap),
                     "serve_median_s": statistics.median(serve_times), "serve_max_s": max(serve_times),
                     "serve_decode_tokens_per_s": float(served.served.decode_tokens_per_s) if served.served else 0.0,
                     "meets_target": bool(max(times) <= TARGET_S and solution.gap <= TARGET_GAP
                                          and max(serve_times) <= TARGET_S)})
        if progress:
            progress(f"{name}: solver median {median:.2f} s, serve median {statistics.median(serve_times):.2f} s")
    return rows


def render_serving_bench(rows: list[dict]) -> str:
    header = (f"{'serving scenario':<28} {'machines':>8} {'median':>8} {'max':>8} {'throughput':>11} "
              f"{'bound':>10} {'gap':>6} {'serve':>8} {'max':>8} {'decode':>8} {'ok':>3}")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['scenario']:<28} {r['machines']:>8} {r['median_s']:>7.2f}s {r['max_s']:>7.2f}s "
                     f"{r['throughput_tokens_per_s']:>11,.1f} {r['upper_bound_tokens_per_s']:>10,.1f} "
                     f"{r['gap']:>6.2%} {r['serve_median_s']:>7.2f}s {r['serve_max_s']:>7.2f}s "
                     f"{r['serve_decode_tokens_per_s']:>8,.1f} {'yes' if r['meets_target'] else 'NO':>3}")
    if rows:
        lines.append(f"serving targets: the max flow solved within {TARGET_S:.0f} s with a gap of at most "
                     f"{TARGET_GAP:.0%} (tokens/s, prompt and decode together); `serve` (its decode search, "
                     f"predicted decode tokens/s of its pick) within {TARGET_S:.0f} s")
    return "\n".join(lines)
