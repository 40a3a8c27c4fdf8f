"""Request routes: the max flow split into coordinator-to-coordinator paths with their shares, the
table a serving system loads to send requests by weighted round robin."""

from __future__ import annotations

from dataclasses import dataclass

from amp_tui.serving.network import Flow, Network
from amp_tui.serving.placement import Placement

COORDINATOR = "coordinator"


@dataclass(frozen=True)
class Route:
    machines: tuple[int, ...]                 # machine indices in order
    layers: tuple[tuple[int, int], ...]       # (first, last) layer each machine runs on this route
    tokens_per_s: float
    share: float                              # of the total flow

    def to_dict(self, net: Network) -> dict:
        return {"machines": [{"group": int(net.machine_group[m]), "node": int(net.machine_node[m]),
                              "first_layer": a, "last_layer": b} for m, (a, b) in zip(self.machines, self.layers)],
                "tokens_per_s": self.tokens_per_s, "share": self.share}


def decompose(flow: Flow, placement: Placement, tolerance: float = 1e-6) -> list[Route]:
    """Paths from the coordinator back to it, heaviest first, until the flow is used up."""
    left = dict(flow.edges)
    total = flow.value
    routes = []
    eps = tolerance * max(total, 1.0)
    while True:
        path = _path(left, eps)
        if path is None:
            break
        edges = list(zip([COORDINATOR, *path], [*path, COORDINATOR]))
        amount = min(left[e] for e in edges)
        for e in edges:
            left[e] -= amount
        layers, done = [], 0
        for m in path:
            end = placement.first[m] + placement.count[m]
            layers.append((done, end - 1))
            done = end
        routes.append(Route(tuple(path), tuple(layers), amount, amount / total if total else 0.0))
    return sorted(routes, key=lambda r: -r.tokens_per_s)


def _path(left: dict, eps: float) -> list[int] | None:
    """A path of edges with flow left, coordinator to coordinator (the flow is acyclic: layers grow)."""
    out: dict = {}
    for (u, v), f in left.items():
        if f > eps:
            out.setdefault(u, []).append(v)
    path, seen = [], set()

    def walk(u) -> bool:
        for v in out.get(u, []):
            if v == COORDINATOR:
                return True
            if v not in seen:
                seen.add(v)
                path.append(v)
                if walk(v):
                    return True
                path.pop()
        return False

    return path if walk(COORDINATOR) else None
