"""The dashboard's views over the current plan: what-if (w), export (x), calibrate (C), serve (v)
and help (?), each a screen of its own, imported when opened (start-up stays fast)."""

from __future__ import annotations

from amp_tui.core.spec.scenario import Scenario
from amp_tui.tui.screens.help import HelpScreen


class ViewActions:
    """Mixed into AmpApp (app.py): opens screens on its scenario and selection."""

    def action_what_if(self) -> None:
        """w: the sensitivity view: does the top pick survive slower links or GPUs, another batch?"""
        from amp_tui.tui.screens.sensitivity import SensitivityScreen

        # The what-ifs start from the ranking on screen (when it is the current scenario's), by the
        # same objective, so their "top pick" is the table's first row.
        base = self.result if self.result is not None and not self.results_stale else None
        self.push_screen(SensitivityScreen(self.scenario, base, self.objective))

    def action_export(self) -> None:
        try:
            from amp_tui.tui.screens.export_picker import ExportScreen
        except ImportError:  # pragma: no cover - the exports module ships with amp-tui
            self.notify("Exports are not available in this build", severity="warning")
            return
        prediction = self._prediction_to_save()
        if prediction is None:
            return
        self.push_screen(ExportScreen(self.result.scenario, prediction))

    def action_calibrate(self) -> None:
        """Fit the cost model to a measurements file and, when applied, plan with the fitted values."""
        from amp_tui.tui.screens.calibrate import CalibrateScreen

        def applied(scenario: Scenario | None) -> None:
            if scenario is not None:
                self.apply_scenario(scenario, "calibration")
                self.notify(f"Calibrated: {scenario.calibration.source}", title="Calibration applied", markup=False)
        self.push_screen(CalibrateScreen(self.scenario), applied)

    def action_serve_view(self) -> None:
        """The Serve view, serving the model on the cluster being edited (edits there stay in the view)."""
        from amp_tui.core.base.errors import SpecError
        from amp_tui.serving.spec import serving_scenario_from
        from amp_tui.tui.screens.serve import ServeScreen

        try:
            scenario = serving_scenario_from(self.scenario)
        except SpecError as err:
            self.notify(f"Serve: {err}", severity="error", markup=False)
            return
        self.push_screen(ServeScreen(scenario))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
