"""The dashboard's file actions: open a preset (ctrl+o), save the selected strategy as a plan
(ctrl+s) or the edited scenario as YAML (ctrl+e), asking before overwriting; a write that fails is
shown, never raised."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import atomic_write, dump_yaml
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.scenario import Scenario, parse_scenario
from amp_tui.tui import edits
from amp_tui.tui.screens.confirm import ConfirmScreen
from amp_tui.tui.screens.preset_picker import PresetPickerScreen
from amp_tui.tui.screens.save_dialog import SaveDialog, default_plan_name, safe_file_stem


class FileActions:
    """Mixed into AmpApp (app.py): reads its scenario, result and selection."""

    def action_open_preset(self) -> None:
        self.push_screen(PresetPickerScreen(), self._preset_picked)

    def _preset_picked(self, picked: tuple[str, str] | None) -> None:
        if picked is None:
            return
        kind, name = picked
        try:
            if kind == "scenarios":
                scenario = parse_scenario(load_preset("scenarios", name))
            elif kind == "clusters":
                scenario = edits.use_cluster_preset(self.scenario, name)
            else:
                scenario = edits.use_model_preset(self.scenario, name)
            if kind != "scenarios":   # the scenario's own name described the old cluster or model
                scenario = replace(scenario, name=f"{scenario.cluster.name}-{scenario.model.name}", description="")
        except SpecError as error:
            self.refuse(str(error))
            return
        except Exception as error:  # pragma: no cover - a bug, shown rather than raised
            self.refuse(f"{type(error).__name__}: {error}")
            return
        what = {"scenarios": "scenario", "clusters": "cluster", "models": "model"}[kind]
        self.apply_scenario(scenario, f"{what} preset {name}")
        self.notify(f"Loaded {what} preset {name}", markup=False)

    def _prediction_to_save(self) -> Prediction | None:
        prediction = self.selected_prediction()
        if self.result is None or prediction is None:
            self.notify("Select a feasible strategy first", severity="warning")
            return None
        if self.results_stale:
            self.notify("The search for the latest edit is still running; try again when it is done",
                        severity="warning")
            return None
        return prediction

    def action_save_plan(self) -> None:
        prediction = self._prediction_to_save()
        if prediction is None:
            return
        scenario = self.result.scenario
        default = default_plan_name(scenario.name, prediction.strategy.label)
        what = f"{prediction.strategy.label}, micro-batch {prediction.strategy.micro_batch_size}"
        from amp_tui.core.plans.runnable import custom_note

        self.push_screen(SaveDialog(default, what, warning=custom_note(prediction.strategy)), self._confirm_overwrite(
            lambda path, overwrite: self.write_plan(path, scenario, prediction, overwrite=overwrite)))

    def action_save_scenario(self) -> None:
        """ctrl+e: save the edited scenario itself as YAML (open it again with `amp-tui ui FILE`)."""
        scenario = self.scenario
        default = safe_file_stem(scenario.name, "scenario") + ".yaml"
        self.push_screen(SaveDialog(default, scenario.name, kind="scenario"), self._confirm_overwrite(
            lambda path, overwrite: self.write_scenario(path, scenario, overwrite=overwrite)))

    def _confirm_overwrite(self, write):
        """The save dialog's callback: write a new file, or ask before overwriting one."""
        def chosen(path: Path | None) -> None:
            if path is None:
                return
            if not path.exists():
                write(path, False)
                return

            def answered(yes: bool | None) -> None:
                if yes:
                    write(path, True)
                else:
                    self.notify("Not saved: the file was kept", markup=False)
            self.push_screen(ConfirmScreen(f"{path} already exists. Overwrite it?", "File exists"), answered)
        return chosen

    def write_plan(self, path: Path, scenario: Scenario, prediction: Prediction, *, overwrite: bool) -> Path | None:
        from amp_tui.core.plans.planfile import save_plan  # on first save: keeps start-up fast

        written = self._write_file(path, lambda: save_plan(path, scenario, prediction, overwrite=overwrite))
        if written is not None:
            self.notify(f"Saved plan to {written.resolve()}", title="Plan saved", markup=False)
            if scenario == self.scenario:
                self.saved_scenario = scenario   # a plan holds the whole scenario: nothing is lost
        return written

    def write_scenario(self, path: Path, scenario: Scenario, *, overwrite: bool) -> Path | None:
        written = self._write_file(path, lambda: atomic_write(path, dump_yaml(scenario.to_dict()), overwrite=overwrite))
        if written is not None:
            self.saved_scenario = scenario
            self.notify(f"Saved the scenario to {written.resolve()}", title="Scenario saved", markup=False)
        return written

    def _write_file(self, path: Path, write) -> Path | None:
        """Run `write`; a refusal or a file-system error is shown, not raised."""
        try:
            return Path(write())
        except SpecError as error:
            self.notify(str(error), title="Not saved", severity="error", markup=False)
        except OSError as error:
            self.notify(f"{path}: {error.strerror or error}", title="Not saved", severity="error", markup=False)
        except Exception as error:  # pragma: no cover - a bug, shown rather than raised
            self.notify(f"{type(error).__name__}: {error}", title="Not saved", severity="error", markup=False)
        return None
