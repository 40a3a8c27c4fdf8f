"""A placement: which contiguous layer range each machine holds (or none)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import SpecError
from amp_tui.serving.network import Network


@dataclass(frozen=True)
class Placement:
    """Machine i (cluster order: group by group) holds layers first[i] .. first[i] + count[i] - 1."""

    first: tuple[int, ...]
    count: tuple[int, ...]

    @classmethod
    def of(cls, first, count) -> "Placement":
        count = tuple(int(c) for c in count)
        return cls(tuple(int(f) if c else 0 for f, c in zip(first, count)), count)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.array(self.first, dtype=np.int64), np.array(self.count, dtype=np.int64)

    def rows(self, net: Network) -> list[dict]:
        """The `placement` list of `amp-tui serve --json`."""
        return [{"group": int(net.machine_group[i]), "node": int(net.machine_node[i]),
                 "first_layer": self.first[i], "num_layers": self.count[i]} for i in range(len(self.count))]


def placement_from_rows(net: Network, rows: object, field_name: str = "placement") -> Placement:
    """Read the rows back (a saved placement), checking each against the cluster."""
    if not isinstance(rows, list):
        raise SpecError(field_name, rows, "expected a list of {group, node, first_layer, num_layers}")
    index = {(int(g), int(n)): i for i, (g, n) in enumerate(zip(net.machine_group, net.machine_node))}
    first = [0] * net.num_machines
    count = [0] * net.num_machines
    seen = set()
    for r, row in enumerate(rows):
        where = f"{field_name}[{r}]"
        if not isinstance(row, dict) or set(row) != {"group", "node", "first_layer", "num_layers"}:
            raise SpecError(where, row, "expected exactly group, node, first_layer, num_layers")
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"{where}.{key}", value, "expected a whole number, 0 or more")
        machine = index.get((row["group"], row["node"]))
        if machine is None:
            raise SpecError(where, f"group {row['group']} node {row['node']}", "no such machine in the cluster")
        if machine in seen:
            raise SpecError(where, f"group {row['group']} node {row['node']}", "machine listed twice")
        seen.add(machine)
        k, start = row["num_layers"], row["first_layer"]
        if k > net.max_layers(machine):
            raise SpecError(f"{where}.num_layers", k, f"this machine holds at most {net.max_layers(machine)} layers")
        if k and start + k > net.num_layers:
            raise SpecError(f"{where}.first_layer", start, f"layers {start}..{start + k - 1} run past the model's "
                                                           f"{net.num_layers} layers")
        first[machine], count[machine] = start, k
    if len(seen) != net.num_machines:
        raise SpecError(field_name, f"{len(seen)} machines", f"expected one row per machine ({net.num_machines})")
    return Placement.of(first, count)
