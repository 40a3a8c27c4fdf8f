"""The dashboard's actions on the ranked strategies: pin one and compare the cursor's against it
(p), show the infeasible ones (f), rank by time or by cost per token (o), set a budget (b)."""

from __future__ import annotations

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.search.objective import Objective
from amp_tui.tui.widgets.strategy_table import StrategyTable


class ResultActions:
    """Mixed into AmpApp (app.py): reads its result, selection and objective."""

    def entry_name(self, prediction: Prediction) -> str | None:
        """'uniform 1x8x2' for the baseline row (so the sentence says which is which), else None."""
        if self.result is not None and prediction is self.result.baseline:
            return f"uniform {prediction.strategy.label}"
        return None

    def comparison(self):
        """The pinned strategy against the cursor's, or None (nothing pinned, or the same one)."""
        from amp_tui.core.plans.compare import compare

        other = self.selected_prediction()
        if self.pinned is None or other is None or self.result is None or other.strategy == self.pinned.strategy:
            return None
        key = (self.pinned, other, self.result)   # asked twice per cursor move: compute once
        if self._comparison is None or any(a is not b for a, b in zip(self._comparison[0], key)):
            self._comparison = (key, compare(self.pinned, other, self.result.scenario, self.entry_name(self.pinned),
                                             self.entry_name(other)))
        return self._comparison[1]

    def comparison_sentence(self) -> str | None:
        comparison = self.comparison()
        return " ".join([*(f"{note}." for note in comparison.notes), comparison.sentence]) if comparison else None

    def action_pin(self) -> None:
        """p: pin the selected strategy (again: unpin); the Selected pane then compares."""
        prediction = self.selected_prediction()
        if self.pinned is not None and (prediction is None or prediction.strategy == self.pinned.strategy):
            self.pinned = None
            self.notify("Unpinned")
        elif prediction is None:
            self.notify("Select a feasible strategy to pin", severity="warning")
            return
        else:
            self.pinned = prediction
            self.notify(f"Pinned {prediction.strategy.label} mbs {prediction.strategy.micro_batch_size}: "
                        "move the cursor to compare", markup=False)
        for table in self.query(StrategyTable):
            table.refill()
        self._show_selected()

    def _repin(self) -> None:
        """A new search: the pinned strategy is predicted again on the new scenario (dropped with a
        note if it no longer runs there)."""
        if self.pinned is None or self.result is None:
            return
        from amp_tui.core.search.evaluate import evaluate

        try:
            self.pinned = evaluate(self.result.scenario, self.pinned.strategy)
        except SpecError as error:
            strategy, self.pinned = self.pinned.strategy, None
            self.notify(unpinned_note(self.result.scenario, strategy, error), severity="warning", markup=False)

    def action_toggle_infeasible(self) -> None:
        self.show_infeasible = not self.show_infeasible
        if self.selected_index >= len(self.entries()):
            self.selected_index = 0
        self._show_result()
        if self.result is not None and not self.result.infeasible:
            self.notify("Every strategy considered fits in memory")

    def action_toggle_objective(self) -> None:
        """o: rank by iteration time or by cost per token (which needs every node group's price)."""
        wanted = Objective("cost" if self.objective.kind == "time" else "time", self.objective.budget_usd_per_hour)
        try:
            wanted.check(self.scenario)
        except SpecError as err:
            self.status.error = str(err)
            self.notify(str(err), severity="error", markup=False)
            return
        self._rank_by(wanted)

    def _rank_by(self, objective: Objective) -> None:
        """Rerun the search ranked by `objective`, and say so."""
        self.objective = objective
        self.status.set_error("")              # a refused value before this one no longer stands
        self.status.ranking = "" if objective == Objective() else objective.describe()
        self.notify(f"ranking by {objective.describe()}", markup=False)
        self.start_search(0.0)

    def action_set_budget(self) -> None:
        """b: rank only strategies whose nodes cost at most this many dollars per hour (empty: none)."""
        from amp_tui.core.base.units import parse_number
        from amp_tui.tui.screens.edit_value import EditValueScreen

        budget = self.objective.budget_usd_per_hour
        kind = self.objective.kind

        def validate(text: str) -> Objective:
            text = text.strip()
            wanted = Objective(kind, None if text.lower() in ("", "none") else
                               float(parse_number(text.removeprefix("$"), "budget", positive=True)))
            wanted.check(self.scenario)         # a budget needs every node group's price
            return wanted

        def done(wanted: Objective | None) -> None:
            if wanted is not None and wanted != self.objective:
                self._rank_by(wanted)

        self.push_screen(EditValueScreen("Budget, dollars per hour", "" if budget is None else f"{budget:g}", validate,
                                         hint="Strategies whose nodes cost more per hour are left out; empty or "
                                              "none: no budget."), done)


def unpinned_note(scenario, strategy, error: SpecError) -> str:
    """Why a pinned strategy no longer runs after an edit, in words: 'Unpinned 1x6x2 mbs 1, 1 node
    idle: its degrees make 12 GPUs, and on this cluster, with that node idle, it would use 16 (...)'."""
    from amp_tui.core.plans.sensitivity import pick_label

    idle = sum(nodes for _, nodes in strategy.idle or ())
    if error.field.endswith("*dp") and not strategy.per_stage:
        made = strategy.tp * strategy.pp * strategy.dp * (strategy.cp or 1)
        try:
            from amp_tui.core.spec.validity import used_gpus

            used = used_gpus(scenario, strategy)
        except SpecError:
            used = None
        if used is not None:
            kept = f", with {'that node' if idle == 1 else 'those nodes'} idle," if idle else ""
            why = f"its degrees make {made} GPUs, and on this cluster{kept} it would use {used}"
            return f"Unpinned {pick_label(strategy)}: {why} (pin one of the new ranking)"
    return f"Unpinned {pick_label(strategy)}: it no longer runs on this cluster: {error.reason}"
