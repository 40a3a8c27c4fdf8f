"""Calibrate: fit the cost model to a measurements file, show the fit, apply it to the dashboard.

The fit runs in a worker thread (a few seconds with leave-one-out); the screen shows each parameter
before and after and every run's residual, and returns the calibrated scenario when applied.
"""

from __future__ import annotations

import math
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Static
from textual.worker import Worker, WorkerState

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import format_seconds
from amp_tui.core.calibration.calibrate import Calibrated, calibrate, calibrated_uncertainty
from amp_tui.core.calibration.measurements import load_measurements
from amp_tui.core.spec.profiles import profile_note
from amp_tui.core.spec.scenario import Scenario


def _percent(log_ratio: float | None) -> str:
    return "" if log_ratio is None else f"{math.expm1(log_ratio) * 100:+.1f}%"


class CalibrateScreen(ModalScreen[Scenario | None]):
    """Returns the calibrated scenario (Apply) or None (Escape)."""

    DEFAULT_CSS = """
    CalibrateScreen { align: center middle; }
    CalibrateScreen > Vertical {
        width: 100; max-width: 95%; height: auto; max-height: 95%; border: round $accent; padding: 0 1;
        background: $surface;
    }
    CalibrateScreen .hint { color: $text-muted; }
    CalibrateScreen #status { height: auto; }
    CalibrateScreen #status.-error { color: $error; }
    CalibrateScreen DataTable { height: auto; max-height: 12; margin-top: 1; }
    CalibrateScreen #buttons { height: auto; margin-top: 1; }
    CalibrateScreen Button { margin-right: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Close")]

    def __init__(self, scenario: Scenario, path: str = "") -> None:
        super().__init__()
        self.scenario = scenario
        self.result: Calibrated | None = None
        self._path = path

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Calibrate {self.scenario.name} from measured runs"
            yield Static(Text("Measurements file: a YAML list of runs (tp, pp, dp, micro_batch_size, "
                              "iteration_time_s). `amp-tui calibrate SCENARIO --suggest 5 -o runs.yaml` "
                              "chooses runs worth measuring."), classes="hint")
            yield Static(Text(profile_note(self.scenario.model.measured_profile)
                              + (" Calibrating fits the fixed costs around the measured layers."
                                 if self.scenario.model.measured_profile else "")), id="profile", classes="hint")
            yield Input(value=self._path, placeholder="runs.yaml", id="path")
            yield Static("", id="status")
            yield DataTable(id="parameters", cursor_type="none", zebra_stripes=True)
            yield DataTable(id="runs", cursor_type="none", zebra_stripes=True)
            with Horizontal(id="buttons"):
                yield Button("Apply to the dashboard", id="apply", variant="primary", disabled=True)
                yield Button("Close", id="close")
            yield Static(Text("Enter fit · Escape close"), classes="hint")

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = False
        for table in self.query(DataTable):
            table.display = False

    @property
    def status_text(self) -> str:
        return str(self.query_one("#status", Static).content)

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(Text(text))
        status.set_class(error, "-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            self._status("Enter the path of a measurements file", error=True)
            return
        self.result = None
        self.query_one("#apply", Button).disabled = True
        self._status(f"Fitting to {text} ...")
        self._fit(Path(text).expanduser())

    @work(thread=True, exclusive=True, group="calibrate", exit_on_error=False)
    def _fit(self, path: Path) -> Calibrated:
        return calibrate(self.scenario, load_measurements(path, self.scenario), source=path.name)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "calibrate":
            return
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self._status(str(error) if isinstance(error, SpecError) else f"{type(error).__name__}: {error}",
                         error=True)
        elif event.state == WorkerState.SUCCESS:
            self._show(event.worker.result)

    def _show(self, result: Calibrated) -> None:
        self.result = result
        fit = result.fit
        parameters = self.query_one("#parameters", DataTable)
        parameters.clear(columns=True)
        parameters.add_columns("parameter", "before", "after", "unit", "source")
        for p in fit.parameters:
            if p.fitted:
                parameters.add_row(Text(p.name), Text(f"{p.before:.4g}", justify="right"),
                                   Text(f"{p.after:.4g}", justify="right"), Text(p.unit), Text(p.source))
        runs = self.query_one("#runs", DataTable)
        runs.clear(columns=True)
        runs.add_columns("run", "strategy", "mbs", "measured", "before", "after", "residual", "leave-one-out")
        for run in fit.runs:
            m = run.measurement
            measured = "out of memory" if m.out_of_memory else format_seconds(m.iteration_time_s)
            runs.add_row(*(Text(cell) for cell in (
                str(m.index), m.strategy.label, str(m.strategy.micro_batch_size), measured,
                format_seconds(run.predicted_before_s), format_seconds(run.predicted_s),
                _percent(run.residual), _percent(run.loo_error))))
        for table in (parameters, runs):
            table.display = True
        band = calibrated_uncertainty(result.scenario)
        idle = sum(not p.fitted for p in fit.parameters)
        notes = "".join(f"\n{note}" for note in result.notes)
        self._status(f"{sum(p.fitted for p in fit.parameters)} parameters fitted to {len(fit.runs)} runs"
                     f" ({idle} not informed by them, kept); predictions now within about ±{band * 100:.1f}%"
                     f"{notes}")
        apply = self.query_one("#apply", Button)
        apply.disabled = False
        apply.focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "apply" and self.result is not None:
            self.dismiss(self.result.scenario)
        elif event.button.id == "close":
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)
