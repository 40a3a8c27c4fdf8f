"""One serve-mode run: the solved placement, its flow and routes, and the baselines beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import time

from amp_tui.core.base.errors import SpecError
from amp_tui.serving.baselines import all_baselines
from amp_tui.serving.network import Flow, Network, build_network, max_flow
from amp_tui.serving.placement import Placement
from amp_tui.serving.routes import Route, decompose
from amp_tui.serving.served import Served, evaluate, search
from amp_tui.serving.flow.solver import Solution, solve, upper_bound
from amp_tui.serving.spec import ServingScenario

OBJECTIVES = ("decode", "flow")
FLOW_STEPS = 14     # the max-flow solver's bisection steps when its placement is the answer (--objective flow)
START_STEPS = 5     # ... when it is one start among the decode search's candidates


@dataclass(frozen=True)
class ServeResult:
    scenario: ServingScenario
    net: Network
    solution: Solution
    flow: Flow
    routes: tuple[Route, ...]
    baselines: dict     # name -> (Placement, tokens/s of max flow)
    served: Served | None = None     # the serving model's figures for the placement
    objective: str = "decode"

    @property
    def placement(self) -> Placement:
        return self.solution.placement

    def machine_label(self, m: int) -> str:
        group = self.scenario.groups[int(self.net.machine_group[m])]
        where = f"@{group.region}" if len(self.scenario.regions) > 1 else ""
        return f"{group.label}{where}#{int(self.net.machine_node[m])}"

    def utilisation(self) -> list[float]:
        """Per machine: the flow through it over its capacity (0 when idle)."""
        out = []
        for m in range(self.net.num_machines):
            cap = self.net.capacity(m, self.placement.count[m])
            out.append(float(self.flow.machine[m] / cap) if cap > 0 else 0.0)
        return out

    def busiest_links(self, top: int = 5) -> list[tuple[str, str, float, float]]:
        """(from, to, tokens/s, utilisation) of the links carrying most flow relative to capacity."""
        rows = []
        for (u, v), f in self.flow.edges.items():
            if u == "coordinator":
                cap, a, b = self.net.coordinator[v], "coordinator", self.machine_label(v)
            elif v == "coordinator":
                cap, a, b = self.net.coordinator[u], self.machine_label(u), "coordinator"
            else:
                cap, a, b = self.net.link[u, v], self.machine_label(u), self.machine_label(v)
            rows.append((a, b, float(f), float(f / cap) if cap > 0 else 0.0))
        return sorted(rows, key=lambda r: (-r[3], -r[2]))[:top]

    def gap_sentence(self) -> str | None:
        """Why the predicted decode tokens/s sits far below the max flow, in one sentence (None without a
        prediction): the max flow (and the machine and link use shown beside it) is what the machines and
        links could carry with no limit on requests in flight, prompt and decode tokens together; what is
        served is set by the requests in flight and the time each waits for its next token."""
        if self.served is None or self.served.prediction.decode_tokens_per_s <= 0:
            return None
        p, x = self.served.prediction, self.served.prediction.decode_tokens_per_s
        o = self.scenario.serving.output_tokens
        why = {"kv cache": "the KV cache admits no more",
               "request rate": "the request rate sends no more"}.get(p.limited_by, f"{p.limited_by} is saturated")
        links = max((use for *_, use in self.busiest_links(1)), default=0.0)
        tail = f"; links carry at most {links:.1%} of their bandwidth" if links < 0.01 else ""
        steady = "at steady state, " if self.served.window is not None else ""
        return (f"{steady}decode {x:,.0f} tokens/s = {p.requests_in_flight:,.0f} requests in flight ({why}) x {o} tokens "
                f"each / ({p.ttft_s:.2f} s to the first + {o} x {p.tpot_s:.3f} s per token); the max flow, "
                f"{self.solution.throughput:,.0f} tokens/s, and the use shown beside it count what the machines "
                f"and links could carry with no limit on requests in flight{tail}")

    def to_json(self) -> dict:
        predicted = {}
        if self.served is not None:
            predicted = self.served.prediction.to_json()
            predicted["decode_tokens_per_s"] = self.served.decode_tokens_per_s
            predicted["prompt_tokens_per_s"] = self.served.prompt_tokens_per_s
            predicted["steady_decode_tokens_per_s"] = self.served.prediction.decode_tokens_per_s
            bench = self.scenario.serving.benchmark
            predicted["measured_over"] = ("steady state" if bench is None or self.served.window is None else
                                          f"benchmark window [{bench[0]:g} s, {bench[0] + bench[1]:g} s]")
        return {
            "objective": self.objective,
            "predicted": predicted,
            "throughput_tokens_per_s": self.solution.throughput,
            "upper_bound_tokens_per_s": self.solution.upper_bound,
            "solve_time_s": self.solution.solve_time_s,
            "placement": self.placement.rows(self.net),
            "baselines": {name: value for name, (_, value) in self.baselines.items()},
            "routes": [route.to_dict(self.net) for route in self.routes],
        }


def _gpu_types(scenario: ServingScenario) -> list:
    return [(g.gpu.name, g.gpus_per_node) for g in scenario.groups for _ in range(g.count)]


def _unmet(max_tpot_s: float | None, max_ttft_s: float | None, outcome) -> SpecError:
    """One line naming the bound given and the lowest the search predicted, for a bound no placement meets."""
    if max_tpot_s is None and max_ttft_s is None:
        return SpecError("serve", "placement", "no placement found serves anything on this cluster")
    parts = []
    if max_tpot_s is not None:
        parts.append(("--max-tpot", max_tpot_s, "TPOT", outcome.lowest_tpot_s))
    if max_ttft_s is not None:
        parts.append(("--max-ttft", max_ttft_s, "TTFT", outcome.lowest_ttft_s))
    flag, value, name, lowest = next((p for p in parts if p[3] > p[1]), parts[0])
    return SpecError(flag, value, f"no placement found with a predicted {name} under {value:g} s (the lowest among "
                                  f"{outcome.evaluations} evaluated: {lowest:.3g} s); relax it"
                     + (" or the other bound" if len(parts) > 1 else ""))


def run_serve(scenario: ServingScenario, *, time_limit_s: float = 10.0, placement: Placement | None = None,
              objective: str = "decode", max_tpot_s: float | None = None, max_ttft_s: float | None = None,
              progress: Callable[[float, float, float], None] | None = None,
              should_cancel: Callable[[], bool] | None = None) -> ServeResult:
    """Search the placement (or evaluate the given one), with baselines, routes and predicted figures.

    objective "decode": most predicted decode tokens/s within the TPOT and TTFT bounds (served.py);
    "flow": most max flow (solver.py, Helix's objective). Either way the max-flow bound is reported.
    """
    if objective not in OBJECTIVES:
        raise SpecError("--objective", objective, f"expected one of {', '.join(OBJECTIVES)}")
    started = time.perf_counter()
    net = build_network(scenario)
    baselines = all_baselines(net, _gpu_types(scenario))
    if placement is not None:
        value = max_flow(net, *placement.arrays()).value
        solution = Solution(placement, value, max(upper_bound(net), value), 0.0, 1, "given")
        served = evaluate(scenario, net, placement)
    else:
        # both searches are bounded by work (solver.py's bisection steps and node limits, served.py's pool); the
        # time limit is a safety net
        flow_solution = solve(net, time_limit_s=time_limit_s, starts=[p for p, _ in baselines.values()],
                              steps=FLOW_STEPS if objective == "flow" else START_STEPS, progress=progress,
                              should_cancel=should_cancel)
        if objective == "flow":
            solution, served = flow_solution, evaluate(scenario, net, flow_solution.placement)
        else:
            remaining = max(0.05, time_limit_s - (time.perf_counter() - started))
            outcome = search(
                scenario, net, time_limit_s=remaining, starts=[flow_solution.placement, *(p for p, _ in baselines.values())],
                max_tpot_s=max_tpot_s, max_ttft_s=max_ttft_s, should_cancel=should_cancel,
                progress=(lambda f: progress(0.5 + 0.5 * f, flow_solution.throughput, flow_solution.upper_bound))
                if progress else None)
            served, evaluations, stopped_by = outcome.served, outcome.evaluations, outcome.stopped_by
            if served is None:
                raise _unmet(max_tpot_s, max_ttft_s, outcome)
            value = served.flow.value
            solution = Solution(served.placement, value, max(flow_solution.upper_bound, value),
                                time.perf_counter() - started, flow_solution.evaluations + evaluations, stopped_by)
    flow = max_flow(net, *solution.placement.arrays())
    return ServeResult(scenario, net, solution, flow, tuple(decompose(flow, solution.placement)), baselines,
                       served, "given" if placement is not None else objective)
