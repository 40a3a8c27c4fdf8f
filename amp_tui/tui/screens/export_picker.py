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
from amp_tui.tui.screens.confirm import ConfirmScreen
from amp_tui.tui.screens.edit_value import EditValueScreen

FORMAT_HELP = {
    "megatron": "Megatron-LM arguments",
    "deepspeed": "DeepSpeed config, partition, hostfile",
    "torchrun": "one torchrun line per node",
    "rankmap": "which GPU holds which rank and layers",
    "torchtitan": "torchtitan 0.3 job config (Python)",
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
        # Every format's export up front: its warnings (another split, does not fit) are said where
        # the user picks the format, not in the notes at the end of the text.
        self.exports: dict[str, Export | SpecError] = {}
        for fmt in EXPORT_FORMATS:
            try:
                self.exports[fmt] = export_plan(self.plan, fmt)
            except SpecError as error:
                self.exports[fmt] = error

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Export {self.label} · ↑↓ format · PgUp/PgDn scroll · w write · c copy · Esc close"
            yield Static("", id="export-warning")
            with Horizontal():
                yield OptionList(*[Option(self._format_label(fmt), id=fmt) for fmt in EXPORT_FORMATS], id="formats")
                # No soft wrap: a wrapped shell comment would read as a command on the next line.
                yield TextArea("", read_only=True, id="export-text", show_line_numbers=False, soft_wrap=False)
            yield Static("", id="export-hint")
        yield Footer()

    def _format_label(self, fmt: str) -> Text:
        label = Text(f"{fmt}\n", style="bold").append(FORMAT_HELP.get(fmt, ""), style="dim")
        export = self.exports.get(fmt)
        if isinstance(export, SpecError):
            label.append("\n✗ cannot express it", style="bold red")
        elif export is not None and export.warnings:
            label.append("\n⚠ " + ("does not fit" if any(w.startswith("does not fit") for w in export.warnings)
                                    else "see the warning"), style="bold yellow")
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
        area = self.query_one(TextArea)
        warning = self.query_one("#export-warning", Static)
        export = self.exports[fmt]
        if isinstance(export, SpecError):
            self.export = None
            warning.display = False
            area.text = f"# {fmt} cannot express this strategy:\n# {export}\n"
            return
        self.export = export
        # Said where the user decides: before the preview, not in the notes at its end.
        warning.update(Text("\n".join(f"⚠ {w[0].upper()}{w[1:]}" for w in export.warnings)))
        warning.display = bool(export.warnings)
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
