"""Model pane: the model's shape (a family's hyperparameters are editable) and its layers, a
repeated layer shown once ("block x 24") and expandable into its copies."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from amp_tui.core.base.units import format_bytes
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.time_sources import sources_statement
from amp_tui.core.spec.layers import LAYER_KINDS, Layer
from amp_tui.core.spec.profiles import profile_note
from amp_tui.tui import edits
from amp_tui.tui.format import cell, format_count, format_flops, format_seconds
from amp_tui.tui.screens.picker import PickItem
from amp_tui.tui.widgets.pane import ScenarioPane
from amp_tui.tui.widgets.table import Table

# Shape columns: (header, model dict key or None for computed, hint for the edit dialog)
FAMILY_SHAPE = [
    ("name", "name", "The model's name (free text)."),
    ("family", None, ""),
    ("hidden", "hidden_size", "Hidden size: a whole number >= 1, divisible by the number of heads."),
    ("layers", "num_layers", "Number of transformer blocks: a whole number >= 1."),
    ("heads", "num_heads", "Attention heads: a whole number >= 1 that divides the hidden size."),
    ("kv heads", "num_kv_heads", "Key/value heads (grouped-query attention): divides the number of heads."),
    ("seq", "sequence_length", "Sequence length in tokens: a whole number >= 1."),
    ("vocab", "vocab_size", "Vocabulary size: a whole number >= 1."),
    ("ffn", "ffn_hidden_size", "FFN (MLP) width: a whole number >= 1."),
    ("flash", "flash_attention", ""),
    ("params", None, ""),
]
_TO_FAMILY = (" This layer list was measured at its own size: a new value rebuilds it from its family's shapes "
              "(gpt), keeping measured times only on layers whose shape is unchanged (ctrl+z undoes).")
EXPLICIT_SHAPE = [
    ("name", "name", "The model's name (free text)."),
    ("seq", "sequence_length", "Sequence length in tokens: a whole number >= 1." + _TO_FAMILY),
    ("hidden", "hidden_size", "Hidden size: a whole number >= 1, divisible by the number of heads." + _TO_FAMILY),
    ("blocks", "num_layers", "Number of transformer blocks: the repeated block is resized; measured times are "
                             "kept (new copies get their mean)."),
    ("heads", "num_heads", "Attention heads: a whole number >= 1 that divides the hidden size." + _TO_FAMILY),
    ("vocab", "vocab_size", "Vocabulary size: a whole number >= 1." + _TO_FAMILY),
    ("layers", None, ""), ("params", None, ""),
]
# Layer columns: (header, layer dict key or None, hint)
LAYER_COLUMNS = [
    ("layer", "name", "The layer's name (free text)."),
    ("x", "repeat", "How many identical copies of this layer follow each other: a whole number >= 1."),
    ("params", "params", "Parameters of one copy: a number >= 0 (e.g. 12596224 or 1.26e7)."),
    ("FLOPs", "flops", "Forward FLOPs per sample: a number >= 0 (e.g. 3.0e10)."),
    ("act mem", "activation_bytes",
     "Bytes kept for backward per sample: a number of bytes >= 0 or a size like '114 MiB'."),
    ("out", "output_bytes",
     "Bytes sent to the next stage per sample: a number of bytes >= 0 or a size like '2 MiB'."),
    ("measured", None, ""),
    ("kind", "kind", ""),
]


def _measured(layer: Layer, copy: int | None) -> str:
    if not layer.profile and not layer.measured:
        return "–"
    if copy is None:
        return ", ".join([*(f"{gpu} (profile)" for gpu in layer.measured), *layer.profile])
    parts = []
    for gpu, by_tp in layer.profile.items():
        value = layer.profiled_time(gpu, min(by_tp), copy)
        if value is not None:
            parts.append(f"{gpu} {format_seconds(value)}")
    return ", ".join(parts) or "–"


class ModelPane(ScenarioPane):
    DEFAULT_CSS = """
    ModelPane { height: 1fr; }
    ModelPane #model-shape { height: 3; }
    ModelPane #model-layers { height: 1fr; }
    ModelPane #model-note { height: auto; color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [
        Binding("e", "edit", "Edit"),
        Binding("space", "expand", "Expand"),
        Binding("c", "duplicate", "Duplicate"),
        Binding("i", "insert", "Insert"),
        Binding("d,delete", "delete", "Delete"),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._expanded: set[int] = set()
        self._rows: list[tuple[int, int | None]] = []  # table row -> (group index, copy or None)
        self._shape_columns = FAMILY_SHAPE

    def compose(self) -> ComposeResult:
        yield Table(id="model-shape", cursor_type="cell", cell_padding=0)
        yield Table(id="model-layers", cursor_type="cell", zebra_stripes=True, cell_padding=0)
        yield Static(id="model-note")

    def on_mount(self) -> None:
        layers = self.query_one("#model-layers", DataTable)
        for header, _, _ in LAYER_COLUMNS:
            layers.add_column(cell(header), key=header)
        super().on_mount()

    @property
    def layers_table(self) -> DataTable:
        return self.query_one("#model-layers", DataTable)

    @property
    def shape_table(self) -> DataTable:
        return self.query_one("#model-shape", DataTable)

    def refresh_view(self) -> None:
        model = self.scenario.model
        shape = self.shape_table
        columns = FAMILY_SHAPE if model.family else EXPLICIT_SHAPE
        if model.family != "llama":
            columns = [c for c in columns if c[1] != "num_kv_heads"]
        column = shape.cursor_column
        shape.clear(columns=True)
        self._shape_columns = columns
        for header, _, _ in columns:
            shape.add_column(cell(header + " "), key=header)
        values = {"name": model.name, "family": model.family or "", "params": format_count(model.total_params),
                  "layers": str(model.num_layers)}
        if model.family:
            values.update({header: str(model.shape.get(key, "")) for header, key, _ in columns if key and key != "name"})
            values["flash"] = "yes" if model.shape.get("flash_attention") else "no"
        else:
            values.update(seq=str(model.sequence_length), hidden=str(model.shape.get("hidden_size", "–")),
                          blocks=str(model.shape.get("num_layers", "–")), heads=str(model.shape.get("num_heads", "–")),
                          vocab=str(model.shape.get("vocab_size", "–")))
        shape.add_row(*(cell(values.get(header, "")) for header, _, _ in columns))
        shape.move_cursor(row=0, column=min(column, len(columns) - 1), scroll=False)

        self._expanded = {g for g in self._expanded if g < len(model.groups) and model.groups[g].repeat > 1}
        rows: list[tuple[int, int | None]] = []

        def fill() -> None:
            for index, layer in enumerate(model.groups):
                repeated = layer.repeat > 1
                marker = ("▾ " if index in self._expanded else "▸ ") if repeated else "  "
                label = f"{marker}{layer.name}" + (f" x {layer.repeat}" if repeated else "")
                self._add_layer_row(layer, cell(label), None)
                rows.append((index, None))
                if index in self._expanded:
                    for copy in range(layer.repeat):
                        self._add_layer_row(layer, cell(f"    #{copy + 1}", style="dim"), copy)
                        rows.append((index, copy))
        self._rows = rows
        self.keep_cursor(self.layers_table, fill)
        note = (f"{model.description}\n" if model.description else "") + (f"{model.rebuilt}\n" if model.rebuilt else "")
        note += ("Per sample. Editing a layer turns this family model into an explicit layer list."
                 if model.family else "Per sample. Measured = GPU types with measured layer times.")
        note += "\n" + sources_statement(CostModel(self.scenario)) + " " + profile_note(model.measured_profile)
        self.query_one("#model-note", Static).update(Text(note))

    def _add_layer_row(self, layer: Layer, label: Text, copy: int | None) -> None:
        dim = "dim" if copy is not None else ""
        self.layers_table.add_row(
            label,
            cell(str(layer.repeat) if copy is None else "", justify="right"),
            cell(format_count(layer.params), justify="right", style=dim),
            cell(format_flops(layer.flops), justify="right", style=dim),
            cell(format_bytes(layer.activation_bytes), justify="right", style=dim),
            cell(format_bytes(layer.output_bytes), justify="right", style=dim),
            cell(_measured(layer, copy), style=dim),
            cell(layer.kind + " ", style=dim),
        )

    # -- actions -----------------------------------------------------------------------------
    def _layer_group(self) -> int | None:
        row = self._layer_row()
        return row[0] if row is not None else None

    def _layer_row(self) -> tuple[int, int | None] | None:
        """(group, copy or None) under the cursor: a copy row of an expanded group edits that copy alone."""
        if not self._rows or not self.layers_table.has_focus:
            return None
        return self._rows[min(self.layers_table.cursor_row, len(self._rows) - 1)]

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        self.action_edit()

    def action_edit(self) -> None:
        if self.scenario is None:
            return
        if self.shape_table.has_focus:
            self._edit_shape()
        else:
            self._edit_layer()

    def _edit_shape(self) -> None:
        model = self.scenario.model
        header, key, hint = self._shape_columns[min(self.shape_table.cursor_column, len(self._shape_columns) - 1)]
        if key is None:
            reason = ("is computed from the others" if model.family else
                      "comes from the explicit layers: edit the layers below, or pick a model preset (ctrl+o)")
            self.app.notify(f"{header!r} {reason}", markup=False)
            return
        if key == "flash_attention":
            value = not bool(model.shape.get("flash_attention"))
            self.attempt(lambda: edits.set_model_field(self.scenario, key, value),
                         f"model: flash attention {'on' if value else 'off'}")
            return
        current = (model.name if key == "name" else str(model.sequence_length) if key == "sequence_length"
                   else str(model.shape.get(key, "")))
        self.edit_value(f"Model {header}", current,
                        lambda text: edits.set_model_field(self.scenario, key, text if key == "name" else text.strip()),
                        f"model: {header} changed", hint=hint)

    def _edit_layer(self) -> None:
        row = self._layer_row()
        if row is None:
            return
        group, copy = row
        layer = self.scenario.model.groups[group]
        header, key, hint = LAYER_COLUMNS[self.layers_table.cursor_column]
        where = f"layer {group} ({layer.name})"
        if copy is not None:
            where = f"copy #{copy + 1} of {layer.name} x {layer.repeat} (layer {group})"
            hint = (f"Edits this copy alone: '{layer.name} x {layer.repeat}' becomes "
                    f"{' + '.join(str(n) for n in (copy, 1, layer.repeat - copy - 1) if n)}. " + hint)
        if key is None:
            self.app.notify("Measured times come from the model file; they cannot be edited here", markup=False)
        elif key == "kind":
            self.pick(f"Kind of {where}", [PickItem(kind, kind) for kind in LAYER_KINDS],
                      lambda kind: edits.set_layer_field(self.scenario, group, "kind", kind, copy),
                      f"{where}: kind", current=layer.kind, filterable=False)
        else:
            current = {"name": layer.name, "repeat": str(layer.repeat)}.get(key)
            if current is None:
                number = float(getattr(layer, key))
                current = str(int(number)) if number.is_integer() else repr(number)
            self.edit_value(f"{header} of {where}", current,
                            lambda text: edits.set_layer_field(self.scenario, group, key,
                                                               text if key == "name" else text.strip(), copy),
                            f"{where}: {header} changed", hint=hint)

    def action_expand(self) -> None:
        group = self._layer_group()
        if group is None or self.scenario.model.groups[group].repeat == 1:
            return
        self._expanded ^= {group}
        self.refresh_view()
        self.layers_table.move_cursor(row=self._rows.index((group, None)))

    def action_duplicate(self) -> None:
        row = self._layer_row()
        if row is not None:
            group, copy = row
            name = self.scenario.model.groups[group].name
            what = f"layer {group} ({name})" if copy is None else f"copy #{copy + 1} of layer {group} ({name})"
            self.attempt(lambda: edits.duplicate_layer(self.scenario, group, copy), f"{what} duplicated")

    def action_insert(self) -> None:
        group = self._layer_group()
        if group is not None:
            self.attempt(lambda: edits.insert_layer(self.scenario, group), f"layer inserted after layer {group}")

    def action_delete(self) -> None:
        group = self._layer_group()
        if group is not None:
            name = self.scenario.model.groups[group].name
            self.attempt(lambda: edits.delete_layer(self.scenario, group), f"layer {group} ({name}) deleted")
