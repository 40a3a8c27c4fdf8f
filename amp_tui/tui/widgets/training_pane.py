"""Training pane: every training setting and search option, one per row."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from amp_tui.core.base.units import format_bytes
from amp_tui.core.spec.frameworks import COMPILE_MODES, FRAMEWORKS
from amp_tui.core.spec.scenario import (
    ATTENTION_KERNELS,
    AUTO,
    FP8_SCALINGS,
    FULL_SHARD,
    OPTIMIZERS,
    PRECISIONS,
    RECOMPUTE,
    SCHEDULES,
    ZERO_STAGES,
    Scenario,
)
from amp_tui.tui import edits
from amp_tui.tui.format import cell
from amp_tui.tui.screens.picker import PickItem
from amp_tui.tui.widgets.pane import ScenarioPane
from amp_tui.tui.widgets.table import Table


@dataclass(frozen=True)
class Setting:
    label: str
    section: str          # "training" or "search"
    key: str              # key in that section's dict
    kind: str             # "int" (typed: a number, or a word the field allows), "bytes", "choice", "bool"
    allowed: str          # shown in the table and the edit dialog
    choices: tuple = ()


SETTINGS = [
    Setting("global batch size", "training", "global_batch_size", "int", "whole number >= 1"),
    Setting("precision", "training", "precision", "choice", "/".join(PRECISIONS), tuple(PRECISIONS)),
    Setting("optimizer", "training", "optimizer", "choice", "/".join(OPTIMIZERS), OPTIMIZERS),
    Setting("schedule", "training", "schedule", "choice", "/".join(SCHEDULES), SCHEDULES),
    Setting("recomputation", "training", "recompute", "choice", "/".join((*RECOMPUTE, AUTO)), (*RECOMPUTE, AUTO)),
    Setting("ZeRO stage", "training", "zero_stage", "choice", "/".join(map(str, (*ZERO_STAGES, AUTO))),
            (*ZERO_STAGES, AUTO)),
    Setting("HSDP shard group", "training", "data_parallel_shard", "int", f"{FULL_SHARD}, auto or a whole number"),
    Setting("sequence parallel", "training", "sequence_parallel", "choice", "yes/no/auto", (True, False, AUTO)),
    Setting("context parallel", "training", "context_parallel", "int", "whole number >= 1, or auto"),
    Setting("interleaving", "training", "virtual_stages", "int", "chunks per stage >= 1, or auto"),
    Setting("expert parallel", "training", "expert_parallel", "int", "whole number >= 1, or auto"),
    Setting("framework", "training", "framework", "choice", "/".join(FRAMEWORKS), FRAMEWORKS),
    Setting("torch.compile", "training", "compile", "choice", "no/yes/cudagraphs", COMPILE_MODES),
    Setting("fused loss", "training", "fused_loss", "bool", "yes/no"),
    Setting("tp comm overlap", "training", "tp_comm_overlap", "bool", "yes/no"),
    Setting("attention kernel", "training", "attention_kernel", "choice", "/".join(ATTENTION_KERNELS),
            ATTENTION_KERNELS),
    Setting("fp8 scaling", "training", "fp8_scaling", "choice", "/".join(FP8_SCALINGS), FP8_SCALINGS),
    Setting("fp32 gradient buffers", "training", "grad_reduce_in_fp32", "choice", "auto/yes/no", (AUTO, True, False)),
    Setting("runtime reserve", "training", "runtime_reserve", "bytes",
            "auto (CUDA context and NCCL counted), or a size per GPU, e.g. 1 GiB"),
    Setting("tp across nodes", "search", "allow_cross_node_tp", "bool", "yes/no"),
    Setting("reorder node groups", "search", "reorder_nodes", "bool", "yes/no"),
    Setting("use all GPUs", "search", "use_all_gpus", "bool", "yes/no"),
    Setting("strategies shown", "search", "top", "int", "whole number >= 1"),
    Setting("max micro-batch", "search", "max_micro_batch_size", "int", "whole number >= 1"),
]

_CHOICE_HELP = {
    "fp16": "16-bit floats with fp32 master weights", "bf16": "bfloat16 with fp32 master weights",
    "fp32": "32-bit floats", "tf32": "fp32 with TF32 tensor-core matrix multiplies (Ampere and later)",
    "adam": "Adam: two moments per parameter", "sgd": "SGD with momentum",
    "1f1b": "one forward, one backward: few micro-batches in flight", "gpipe": "all forwards, then all backwards",
    "none": "keep activations for backward", "full": "recompute each layer's activations in backward",
    0: "no sharding of optimizer state", 1: "optimizer state sharded over data-parallel ranks",
    2: "optimizer state and gradients sharded", 3: "parameters too (FSDP)", AUTO: "the search chooses per strategy",
    "selective": "recompute the attention scores only",
    "megatron": "Megatron-LM: overlaps the gradient all-reduce with backward",
    "deepspeed": "DeepSpeed's pipeline engine: reduces after backward", "fsdp": "PyTorch FSDP (torchtitan)",
    "pytorch": "plain PyTorch: DDP or FSDP over Hugging Face, accelerate or Lightning code, eager",
    "cudagraphs": "torch.compile with CUDA graphs (mode='reduce-overhead'): almost no launch cost",
    "fused": "Transformer Engine, cuDNN or FlashAttention-3", "flash2": "the flash-attn 2 package or Triton",
    "tensorwise": "one scale per tensor (Transformer Engine, torchao)", "rowwise": "one scale per row (torchao)",
}


# Where a choice means something else for one setting.
_SETTING_HELP = {("grad_reduce_in_fp32", AUTO): "the engine's own (Megatron-LM, DeepSpeed: fp32 for bf16)",
                 ("grad_reduce_in_fp32", False): "16-bit gradient buffers (NVIDIA's performance recipes)"}


def setting_value(scenario: Scenario, setting: Setting) -> object:
    if setting.key == "runtime_reserve":
        return scenario.training.runtime_reserve_bytes
    if setting.key == "grad_reduce_in_fp32" and scenario.training.grad_reduce_in_fp32 is None:
        return AUTO
    source = scenario.training if setting.section == "training" else scenario.search
    return getattr(source, setting.key)


def show_value(setting: Setting, value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if setting.kind == "bytes":
        return AUTO if value is None else format_bytes(float(value))
    return str(value)


class TrainingPane(ScenarioPane):
    DEFAULT_CSS = """
    TrainingPane { height: 1fr; }
    TrainingPane DataTable { height: 1fr; }
    TrainingPane #training-note { height: auto; color: $text-muted; padding: 0 1; }
    """
    BINDINGS = [Binding("e,space", "edit", "Edit")]

    def compose(self) -> ComposeResult:
        yield Table(id="training-table", cursor_type="row", zebra_stripes=True, cell_padding=0)
        yield Static(Text("Enter edits: choices open a list, yes/no settings toggle."), id="training-note")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for header in ("setting", "value", "allowed"):
            table.add_column(cell(header), key=header)
        super().on_mount()

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def refresh_view(self) -> None:
        def fill() -> None:
            for setting in SETTINGS:
                value = show_value(setting, setting_value(self.scenario, setting))
                self.table.add_row(cell(setting.label), cell(value, style="bold"),
                                   cell(setting.allowed + " ", style="dim"), key=setting.key)
        self.keep_cursor(self.table, fill)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_edit()

    def _set(self, setting: Setting, value: object) -> Scenario:
        setter = edits.set_training_field if setting.section == "training" else edits.set_search_field
        return setter(self.scenario, setting.key, value)

    def action_edit(self) -> None:
        if self.scenario is None:
            return
        setting = SETTINGS[min(self.table.cursor_row, len(SETTINGS) - 1)]
        value = setting_value(self.scenario, setting)
        if setting.kind == "bool":
            self.attempt(lambda: self._set(setting, not value),
                         f"{setting.label}: {show_value(setting, not value)}")
        elif setting.kind == "choice":
            items = [PickItem(choice, show_value(setting, choice),
                              _SETTING_HELP.get((setting.key, choice), "" if isinstance(choice, bool)   # (True == 1)
                                                else _CHOICE_HELP.get(choice, "")))
                     for choice in setting.choices]
            self.pick(setting.label.capitalize(), items, lambda choice: self._set(setting, choice),
                      f"{setting.label} changed", current=value, filterable=False)
        else:
            self.edit_value(setting.label.capitalize(), show_value(setting, value),
                            lambda text: self._set(setting, text.strip()),
                            f"{setting.label} changed", hint=f"Allowed: {setting.allowed}.")
