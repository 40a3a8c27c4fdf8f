"""`x`: export the selected strategy. Pick a format, read (or copy) the text, write the files to a folder."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import atomic_write
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.plans.exports import EXPORT_FORMATS, export_plan
from amp_tui.core.plans.exports.common import Export
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.spec.scenario import Scenario
from amp_tui.tui.format import format_seconds
from amp_tui.tui.screens.confirm import ConfirmScreen
from amp_tui.tui.screens.edit_value import EditValueScreen

FORMAT_HELP = {
    "megatron": "Megatron-LM arguments",
    "deepspeed": "DeepSpeed config, partition, hostfile",
    "torchrun": "one torchrun line per node",
    "rankmap": "which GPU holds which rank and layers",
    "torchtitan": "torchtitan TOML job config",
}


def export_text(export: Export) -> str:
    """Every file of an export one after the other, with its name as a header, then the notes."""
    parts = []
    for name, content in export.files.items():
        parts.append(f"# ---- {name} ----\n{content.rstrip()}\n")
    if export.notes:
        parts.append("# ---- notes ----\n" + "\n".join(f"# {note}" for note in export.notes) + "\n")
    return "\n".join(parts)


def check_folder(text: str) -> Path:
    text = text.strip()
    if not text:
        raise SpecError("folder", text, "enter a folder to write the files into")
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise SpecError("folder", text, "exists and is not a folder")
    return path


def write_export(export: Export, folder: Path, *, overwrite: bool) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [atomic_write(folder / name, content, overwrite=overwrite) for name, content in export.files.items()]


def megatron_split_warning(plan: Plan, prediction: Prediction) -> str | None:
    """When Megatron-LM's split flags cannot say the plan's split: which split the export runs
    instead and how much slower it is predicted to be; None when it runs the plan's own."""
    try:
        from amp_tui.core.costmodel.cost import CostModel
        from amp_tui.core.plans.exports.megatron import (
            blocks_per_stage,
            has_megatron_shape,
            layer_partition,
            megatron_split,
            nearest_split,
        )
    except ImportError:  # pragma: no cover - the megatron export ships with amp-tui
        return None
    scenario, s = plan.scenario, plan.strategy
    if s.partition is None or s.per_stage or s.batch_shares or not has_megatron_shape(scenario.model):
        return None
    blocks = blocks_per_stage(scenario.model, s.partition)
    split = megatron_split(blocks)
    if split is not None:
        runs = layer_partition(scenario.model, split.blocks)
        if runs == s.partition:
            return None
        cost = CostModel(scenario)
        actual = cost.candidate(s.tp, s.pp, s.dp, s.micro_batch_size, s.placement).predict(runs)
        written = split.blocks
    else:
        nearest = nearest_split(plan)
        if nearest is None:
            return (f"Megatron-LM cannot express this plan's split (blocks {'/'.join(map(str, blocks))}): "
                    "no split flags are written; see the notes for the exact layout flag.")
        split, actual = nearest
        written = split.blocks
    slower = actual.iteration_time_s / prediction.iteration_time_s - 1.0
    return (f"Megatron-LM runs another split: blocks {'/'.join(map(str, written))} instead of the plan's "
            f"{'/'.join(map(str, blocks))}, predicted {format_seconds(actual.iteration_time_s)} per iteration, "
            f"{abs(slower) * 100:.0f}% {'slower' if slower >= 0 else 'faster'} than the plan's "
            f"{format_seconds(prediction.iteration_time_s)}. The notes "
            "at the end give a flag that runs the plan's split exactly on newer Megatron-Core.")


class ExportScreen(ModalScreen):
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    ExportScreen > Vertical {
        width: 95%; height: 90%; border: round $accent; background: $surface;
    }
    ExportScreen #formats { width: 28; height: 1fr; }
    ExportScreen TextArea { width: 1fr; height: 1fr; }
    ExportScreen #export-hint { height: auto; color: $text-muted; padding: 0 1; }
    ExportScreen #export-warning { height: auto; color: $warning; text-style: bold; padding: 0 1; }
    """
    # Up/down choose the format; the page and end keys always scroll the preview (they used to move
    # through the formats); tab moves the focus between the list and the preview.
    BINDINGS = [
        Binding("escape", "close", "Close"),
        Binding("w", "write", "Write files"),
        Binding("c", "copy", "Copy text"),
        Binding("pagedown", "scroll('page_down')", "Scroll", priority=True, show=False),
        Binding("pageup", "scroll('page_up')", "Scroll", priority=True, show=False),
        Binding("end", "scroll('end')", "End", priority=True, show=False),
        Binding("home", "scroll('home')", "Home", priority=True, show=False),
    ]

    def __init__(self, scenario: Scenario, prediction: Prediction) -> None:
        super().__init__()
        self.plan = Plan(scenario=scenario, strategy=prediction.strategy, saved_prediction=prediction.to_dict())
        self.label = f"{prediction.strategy.label}-mbs{prediction.strategy.micro_batch_size}"
        self.scenario_name = scenario.name
        self.fmt = EXPORT_FORMATS[0]
        self.export: Export | None = None
        self.megatron_warning = megatron_split_warning(self.plan, prediction)

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Export {self.label} · ↑↓ format · PgUp/PgDn scroll · w write · c copy · Esc close"
            yield Static(Text(self.megatron_warning or ""), id="export-warning")
            with Horizontal():
                yield OptionList(*[Option(self._format_label(fmt), id=fmt) for fmt in EXPORT_FORMATS], id="formats")
                yield TextArea("", read_only=True, id="export-text", show_line_numbers=False)
            yield Static("", id="export-hint")
        yield Footer()

    def _format_label(self, fmt: str) -> Text:
        label = Text(f"{fmt}\n", style="bold").append(FORMAT_HELP.get(fmt, ""), style="dim")
        if fmt == "megatron" and self.megatron_warning:
            label.append("\n⚠ runs another split", style="bold yellow")
        return label

    def action_scroll(self, where: str) -> None:
        area = self.query_one(TextArea)
        {"page_down": area.scroll_page_down, "page_up": area.scroll_page_up,
         "end": area.scroll_end, "home": area.scroll_home}[where](animate=False)

    def on_mount(self) -> None:
        self.query_one("#export-warning", Static).display = False
        self.query_one(OptionList).highlighted = 0
        self.query_one(OptionList).focus()
        self.show_format(self.fmt)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        if event.option.id:
            self.show_format(event.option.id)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.query_one(TextArea).focus()

    def show_format(self, fmt: str) -> None:
        self.fmt = fmt
        # Said where the user decides: before the preview, not in the notes at its end.
        self.query_one("#export-warning", Static).display = fmt == "megatron" and bool(self.megatron_warning)
        area = self.query_one(TextArea)
        try:
            self.export = export_plan(self.plan, fmt)
        except SpecError as error:
            self.export = None
            area.text = f"# {fmt} cannot express this strategy:\n# {error}\n"
            return
        area.text = export_text(self.export)
        self.query_one("#export-hint", Static).update(
            Text(f"Files: {', '.join(self.export.files)}. w writes them into a folder you choose; "
                 "c copies the text to the clipboard (terminals with OSC 52)."))

    def default_folder(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_.+" else "-" for c in self.scenario_name).strip("-.") or "plan"
        return f"{safe}-{self.label}-{self.fmt}"

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.query_one(TextArea).text)
        self.notify("Copied the export text to the clipboard")

    def action_write(self) -> None:
        export = self.export
        if export is None:
            self.notify("Nothing to write for this format", severity="warning")
            return

        def chosen(folder: Path | None) -> None:
            if folder is None:
                return
            existing = [name for name in export.files if (folder / name).exists()]
            if existing:
                def answered(yes: bool | None) -> None:
                    if yes:
                        self._write(export, folder, overwrite=True)
                self.app.push_screen(ConfirmScreen(f"{', '.join(existing)} already exist in {folder}. Overwrite?",
                                                   "Files exist"), answered)
            else:
                self._write(export, folder, overwrite=False)
        self.app.push_screen(EditValueScreen(f"Write the {self.fmt} export", self.default_folder(), check_folder,
                                             hint="Folder to write the files into (created if missing)."), chosen)

    def _write(self, export: Export, folder: Path, *, overwrite: bool) -> None:
        try:
            written = write_export(export, folder, overwrite=overwrite)
        except SpecError as error:
            self.notify(str(error), title="Not written", severity="error", markup=False)
            return
        except OSError as error:
            self.notify(f"{folder}: {error.strerror or error}", title="Not written", severity="error", markup=False)
            return
        self.notify(f"Wrote {', '.join(str(p) for p in written)}", title="Export written", markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
