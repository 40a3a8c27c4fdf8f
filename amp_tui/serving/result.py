"""One serve-mode run: the solved placement, its flow and routes, and the baselines beside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amp_tui.serving.baselines import all_baselines
from amp_tui.serving.network import Flow, Network, build_network, max_flow
from amp_tui.serving.placement import Placement
from amp_tui.serving.routes import Route, decompose
from amp_tui.serving.solver import Solution, solve
from amp_tui.serving.spec import ServingScenario


@dataclass(frozen=True)
class ServeResult:
    scenario: ServingScenario
    net: Network
    solution: Solution
    flow: Flow
    routes: tuple[Route, ...]
    baselines: dict     # name -> (Placement, tokens/s)

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

    def to_json(self) -> dict:
        return {
            "throughput_tokens_per_s": self.solution.throughput,
            "upper_bound_tokens_per_s": self.solution.upper_bound,
            "solve_time_s": self.solution.solve_time_s,
            "placement": self.placement.rows(self.net),
            "baselines": {name: value for name, (_, value) in self.baselines.items()},
            "routes": [route.to_dict(self.net) for route in self.routes],
        }


def _gpu_types(scenario: ServingScenario) -> list:
    return [(g.gpu.name, g.gpus_per_node) for g in scenario.groups for _ in range(g.count)]


def run_serve(scenario: ServingScenario, *, time_limit_s: float = 10.0, placement: Placement | None = None,
              progress: Callable[[float, float, float], None] | None = None,
              should_cancel: Callable[[], bool] | None = None) -> ServeResult:
    """Solve the placement (or evaluate the given one) and compute baselines and routes."""
    net = build_network(scenario)
    baselines = all_baselines(net, _gpu_types(scenario))
    if placement is None:
        solution = solve(net, time_limit_s=time_limit_s, starts=[p for p, _ in baselines.values()],
                         progress=progress, should_cancel=should_cancel)
    else:
        from amp_tui.serving.solver import upper_bound

        value = max_flow(net, *placement.arrays()).value
        solution = Solution(placement, value, max(upper_bound(net), value), 0.0, 1, "given")
    flow = max_flow(net, *solution.placement.arrays())
    return ServeResult(scenario, net, solution, flow, tuple(decompose(flow, solution.placement)), baselines)
