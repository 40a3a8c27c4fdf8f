"""Cluster pane: one row per node group, editable cell by cell, with the cluster's totals."""

from __future__ import annotations

from collections import Counter

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from amp_tui.core.base.units import format_bandwidth, format_bytes, parse_bandwidth
from amp_tui.core.spec.hardware import gpu_catalog, instance_catalog
from amp_tui.core.spec.scenario import NodeGroup, parse_node_group
from amp_tui.tui import edits
from amp_tui.tui.format import cell
from amp_tui.tui.screens.picker import PickItem
from amp_tui.tui.widgets.pane import ScenarioPane
from amp_tui.tui.widgets.table import Table

# (header, node-group field edited from that column, what the edit dialog says is allowed)
COLUMNS: list[tuple[str, str, str]] = [
    ("node", "instance", ""),
    ("GPU", "gpu", ""),
    ("/node", "gpus_per_node", "A whole number of GPUs per node, at least 1."),
    ("count", "count", "A whole number of nodes, at least 1."),
    ("intra", "intra_node_bandwidth",
     "Bandwidth between GPUs of one node, e.g. '50 Gbps', '300 GB/s' (a bare number means Gbps); greater than 0."),
    ("network", "inter_node_bandwidth",
     "Bandwidth between nodes, e.g. '100 Gbps', '25 GB/s' (a bare number means Gbps); greater than 0."),
    ("mem", "memory", "Memory per GPU, e.g. '24 GiB' or '80 GB'; what PyTorch can allocate (the capacity planned "
                      "against) stays the same share below it as on the card it replaces."),
]


def network_note(cluster) -> str:
    """Which links the cluster's network profile measured: the cost model uses those figures."""
    from amp_tui.core.spec.network import link_report

    lines = [f"\nm measured ({cluster.network.summary()}); the cost model uses the measured figures:"]
    for entry in link_report(cluster):
        said = "; ".join(entry["measured"]) or "nothing measured"
        if entry["catalog"]:
            said += f" (catalog figures: {', '.join(entry['catalog'])})"
        lines.append(f"  group {entry['group']}: {said}")
    return "\n".join(lines)


def _catalog_group(instance: str) -> NodeGroup | None:
    try:
        return parse_node_group({"instance": instance}, "instance")
    except Exception:  # a broken catalog entry only loses the override marker
        return None


def _bandwidth(text: object) -> str:
    """A catalog bandwidth in the unit the cluster table uses (the catalog mixes GB/s and Gbps)."""
    try:
        return format_bandwidth(parse_bandwidth(text, "bandwidth"))
    except Exception:  # a broken catalog entry is shown as written
        return str(text)


def instance_items() -> list[PickItem]:
    items = [PickItem(("custom", None), "custom node",
                      "a node group with no instance name: starts as a copy of the selected group; edit its fields")]
    for name, entry in instance_catalog().items():
        detail = (f"{entry.get('provider', '')}: {entry['gpus_per_node']} x {entry['gpu']}, "
                  f"intra {_bandwidth(entry['intra_node_bandwidth'])}, network {_bandwidth(entry['inter_node_bandwidth'])}")
        if entry.get("description"):
            detail += f" ({entry['description']})"
        items.append(PickItem(("instance", name), name, detail))
    return items


def gpu_items() -> list[PickItem]:
    return [PickItem(name, name, f"{format_bytes(gpu.memory_bytes)}, {gpu.peak_flops_16 / 1e12:g} TFLOP/s fp16, "
                                 f"{gpu.memory_bandwidth / 1e9:g} GB/s" + (f" - {gpu.description}" if gpu.description else ""))
            for name, gpu in gpu_catalog().items()]


class ClusterPane(ScenarioPane):
    DEFAULT_CSS = """
    ClusterPane { height: 1fr; }
    ClusterPane DataTable { height: auto; max-height: 1fr; }
    ClusterPane #cluster-totals { height: auto; color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [
        Binding("e", "edit", "Edit"),
        Binding("a", "add", "Add node"),
        Binding("d,delete", "remove", "Remove"),
        Binding("plus,equals_sign", "count(1)", "+1 node"),
        Binding("minus", "count(-1)", "-1 node"),
    ]

    def compose(self) -> ComposeResult:
        yield Table(id="cluster-table", cursor_type="cell", zebra_stripes=True, cell_padding=0)
        yield Static(id="cluster-totals")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for header, _, _ in COLUMNS:
            table.add_column(cell(header + " "), key=header)
        super().on_mount()

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def refresh_view(self) -> None:
        cluster = self.scenario.cluster
        overridden: list[bool] = []

        def fill() -> None:
            for index, group in enumerate(cluster.nodes):
                reference = _catalog_group(group.instance) if group.instance else None

                def marked(text: str, same: bool = True, justify: str = "left", measured: bool = False) -> Text:
                    if not same:
                        overridden.append(True)
                    return cell(text + ("" if same else "*") + (" m" if measured else ""),
                                style="" if same else "bold", justify=justify)
                links = group.measured
                self.table.add_row(
                    cell(group.instance or "custom", style="" if group.instance else "italic"),
                    marked(group.gpu.name, reference is None or reference.gpu == group.gpu),
                    marked(str(group.gpus_per_node),
                           reference is None or reference.gpus_per_node == group.gpus_per_node, "right"),
                    cell(str(group.count), justify="right"),
                    marked(format_bandwidth(group.intra_node_bandwidth),
                           reference is None or reference.intra_node_bandwidth == group.intra_node_bandwidth,
                           measured=links is not None and links.intra_bandwidth is not None),
                    marked(format_bandwidth(group.inter_node_bandwidth),
                           reference is None or reference.inter_node_bandwidth == group.inter_node_bandwidth,
                           measured=links is not None and (links.inter_bandwidth or links.inter_flow_bandwidth) is not None),
                    cell(f"{group.gpu.memory_bytes / 2**30:g}G "),
                    key=str(index),
                )
        self.keep_cursor(self.table, fill)
        by_type = Counter()
        for group in cluster.nodes:
            by_type[group.gpu.name] += group.num_gpus
        memory = sum(group.num_gpus * group.gpu.memory_bytes for group in cluster.nodes)
        types = ", ".join(f"{n} x {name}" for name, n in by_type.items())
        totals = Text(f"{cluster.name}: {cluster.num_gpus} GPUs on {cluster.num_nodes} node{'s' if cluster.num_nodes > 1 else ''} "
                      f"({types}), "
                      f"{format_bytes(memory)} GPU memory")
        totals.append("\n/node GPUs per node · intra GPU-to-GPU bandwidth in a node · network between nodes"
                      " · mem per GPU")
        if overridden:
            totals.append(" · * differs from the instance catalog")
        if cluster.network is not None:
            totals.append(network_note(cluster))
        for note in (group.price_note(i) for i, group in enumerate(cluster.nodes)):
            if note:
                totals.append(f"\n{note}", style="yellow")
        self.query_one("#cluster-totals", Static).update(totals)

    # -- actions -----------------------------------------------------------------------------
    def _group_index(self) -> int:
        return min(self.table.cursor_row, len(self.scenario.cluster.nodes) - 1)

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        self.action_edit()

    def action_edit(self) -> None:
        if self.scenario is None:
            return
        index = self._group_index()
        group = self.scenario.cluster.nodes[index]
        header, key, hint = COLUMNS[self.table.cursor_column]
        where = f"node group {index} ({group.label})"
        if key == "instance":
            self.pick(f"Node type of {where}", instance_items()[1:],
                      lambda value: edits.set_node_group(self.scenario, index, {"instance": value[1], "count": group.count}),
                      f"{where}: node type", current=("instance", group.instance))
        elif key == "gpu":
            self.pick(f"GPU type of {where}", gpu_items(),
                      lambda name: edits.set_node_field(self.scenario, index, "gpu", name),
                      f"{where}: GPU type", current=group.gpu.name)
        elif key == "memory":
            self.edit_value(f"GPU memory of {where}", f"{group.gpu.memory_bytes / 2**30:g} GiB",
                            lambda text: edits.set_gpu_memory(self.scenario, index, text),
                            f"{where}: GPU memory changed", hint=hint)
        else:
            current = {"gpus_per_node": str(group.gpus_per_node), "count": str(group.count),
                       "intra_node_bandwidth": format_bandwidth(group.intra_node_bandwidth),
                       "inter_node_bandwidth": format_bandwidth(group.inter_node_bandwidth)}[key]
            self.edit_value(f"{header} of {where}", current,
                            lambda text: edits.set_node_field(self.scenario, index, key, text.strip()),
                            f"{where}: {header} changed", hint=hint)

    def action_add(self) -> None:
        if self.scenario is None:
            return
        like = self._group_index()

        def build(value: tuple) -> object:
            kind, name = value
            if kind == "custom":
                return edits.add_custom_node(self.scenario, like)
            return edits.add_instance(self.scenario, name)
        self.pick("Add a node group", instance_items(), build, "node group added")

    def action_remove(self) -> None:
        if self.scenario is None:
            return
        index = self._group_index()
        label = self.scenario.cluster.nodes[index].label
        self.attempt(lambda: edits.remove_node_group(self.scenario, index), f"node group {index} ({label}) removed")

    def action_count(self, step: int) -> None:
        if self.scenario is None:
            return
        index = self._group_index()

        # Relative to the scenario the app holds when it applies the edit, not the one shown now:
        # a burst of presses arrives before the first edit comes back to this pane.
        def build(scenario):
            group = scenario.cluster.nodes[index]
            return edits.set_node_field(scenario, index, "count", group.count + step)
        label = self.scenario.cluster.nodes[index].label
        self.propose(build, f"node group {index} ({label}): {'+' if step > 0 else ''}{step} node")
