"""The amp-tui dashboard.

The app holds the current Scenario (frozen) and the latest SearchResult. Panes are views: they show
what the app gives them and post ScenarioEdited with a proposed new scenario; the app validates it,
pushes the old one on the undo stack, swaps, and reruns the search in a background thread
(debounced, cancellable, newest edit wins through a generation counter). Results flow back down.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, TabbedContent, TabPane
from textual.worker import Worker, WorkerState, get_current_worker

from amp_tui.core.base.errors import Cancelled, SpecError
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.plans.planfile import open_scenario
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import Infeasible, SearchResult
from amp_tui.core.search.planner import find_plans
from amp_tui.core.search.work import DEFAULT_WORK
from amp_tui.core.spec.scenario import Scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy
from amp_tui.tui import edits
from amp_tui.tui.actions.files import FileActions
from amp_tui.tui.actions.keys import TypeAhead
from amp_tui.tui.actions.results import ResultActions
from amp_tui.tui.actions.views import ViewActions
from amp_tui.tui.messages import EditRefused, PeerGone, ScenarioEdited, SearchDone, SearchProgress, StrategySelected
from amp_tui.tui.widgets.cluster_pane import ClusterPane
from amp_tui.tui.widgets.key_footer import KeyFooter
from amp_tui.tui.widgets.model_pane import ModelPane
from amp_tui.tui.widgets.pane import ScenarioPane
from amp_tui.tui.widgets.selected_pane import SelectedPane
from amp_tui.tui.widgets.status_bar import StatusBar
from amp_tui.tui.widgets.strategy_table import StrategyTable
from amp_tui.tui.widgets.training_pane import TrainingPane

DEFAULT_TARGET = "paper-homogeneous"
UNDO_LIMIT = 200
# Below this size the panes become tabs (one pane at a time); above it inputs and results sit side by side.
WIDE_MIN_WIDTH = 110
WIDE_MIN_HEIGHT = 30
# The search thread pauses YIELD_FOR_S every YIELD_EVERY_S so the UI thread gets the GIL (~20% slower search).
YIELD_EVERY_S = 0.02
YIELD_FOR_S = 0.004

PANES = {  # pane number -> (tab id, widget id, title)
    1: ("tab-cluster", "cluster", "Cluster"),
    2: ("tab-model", "model", "Model"),
    3: ("tab-training", "training", "Training"),
    4: ("tab-strategies", "strategies-pane", "Strategies"),
    5: ("tab-selected", "selected", "Selected"),
}


class Dashboard(Container):
    """The panes, laid out side by side (wide) or as tabs (compact). Recomposed when that changes;
    every pane pulls the app's current state when it mounts, so nothing is lost."""

    compact: reactive[bool] = reactive(False, recompose=True)

    def compose(self) -> ComposeResult:
        if self.compact:
            with TabbedContent(id="tabs"):
                yield from self._editor_tabs()
                with TabPane("4 Strategies", id="tab-strategies"):
                    yield StrategyTable(id="strategies-pane")
                with TabPane("5 Selected", id="tab-selected"):
                    yield SelectedPane(id="selected")
        else:
            with Horizontal(id="wide"):
                with TabbedContent(id="tabs"):
                    yield from self._editor_tabs()
                with Vertical(id="results"):
                    strategies = StrategyTable(id="strategies-pane")
                    strategies.border_title = "4 Strategies"
                    yield strategies
                    selected = SelectedPane(id="selected")
                    selected.border_title = "5 Selected strategy"
                    yield selected

    def _editor_tabs(self) -> ComposeResult:
        with TabPane("1 Cluster", id="tab-cluster"):
            yield ClusterPane(id="cluster")
        with TabPane("2 Model", id="tab-model"):
            yield ModelPane(id="model")
        with TabPane("3 Training", id="tab-training"):
            yield TrainingPane(id="training")


class AmpApp(TypeAhead, FileActions, ResultActions, ViewActions, App):
    """`AmpApp(scenario)`; `show_timings=False` keeps times out of the status line (snapshots)."""

    CSS_PATH = "app.tcss"
    TITLE = "amp-tui"
    BINDINGS = [
        Binding("ctrl+z", "undo", "Undo"),
        Binding("ctrl+y", "redo", "Redo"),
        Binding("ctrl+o", "open_preset", "Presets"),
        Binding("ctrl+s", "save_plan", "Save plan"),
        Binding("ctrl+e", "save_scenario", "Save scenario"),
        Binding("w", "what_if", "What-if"),
        Binding("x", "export", "Export"),
        Binding("f", "toggle_infeasible", "Infeasible"),
        Binding("C", "calibrate", "Calibrate"),
        Binding("question_mark", "help", "Help"),
        Binding("v", "serve_view", "Serve"),
        Binding("o", "toggle_objective", "Objective"),
        Binding("b", "set_budget", "Budget", show=False),
        Binding("1", "go(1)", "Cluster", show=False),
        Binding("2", "go(2)", "Model", show=False),
        Binding("3", "go(3)", "Training", show=False),
        Binding("4", "go(4)", "Strategies", show=False),
        Binding("5", "go(5)", "Selected", show=False),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(self, scenario: Scenario, *, preferred: Strategy | None = None, show_timings: bool = True,
                 debounce_s: float = 0.15) -> None:
        super().__init__()
        self.animation_level = "none"
        self.scenario = scenario
        self.result: SearchResult | None = None
        self.results_stale = False
        self.selected_index = 0
        self.show_infeasible = False
        self.show_timings = show_timings
        self.debounce_s = debounce_s
        self.applied_generations: list[int] = []  # generations whose results were shown, oldest first
        self._generation = 0
        self._undo: list[tuple[Scenario, str]] = []
        self._redo: list[tuple[Scenario, str]] = []
        self.saved_scenario = scenario   # the scenario as last opened or saved: ctrl+q keeps edits past it
        self.objective = Objective()     # o switches between time and cost per token
        self.pinned: Prediction | None = None
        self._comparison: tuple | None = None
        self._preferred = preferred

    # -- layout ---------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        dashboard = Dashboard(id="dashboard")
        dashboard.set_reactive(Dashboard.compact, self._is_compact(self.size.width, self.size.height))
        yield dashboard
        yield StatusBar(id="status")
        yield KeyFooter(id="footer")

    @staticmethod
    def _is_compact(width: int, height: int) -> bool:
        return width < WIDE_MIN_WIDTH or height < WIDE_MIN_HEIGHT

    def on_mount(self) -> None:
        self.status.show_timings = self.show_timings
        self.sub_title = self.scenario.name
        self._focus_pane(1)
        self.start_search(delay=0.0)
        if self.is_web:     # served by `amp-tui web`: leave when the server hangs up (tui/lifeline.py)
            from amp_tui.tui.lifeline import watch_stdin

            watch_stdin(self)

    async def on_peer_gone(self, message: PeerGone) -> None:
        await self.action_quit()

    def on_resize(self, event: events.Resize) -> None:
        compact = self._is_compact(event.size.width, event.size.height)
        dashboard = self.query_one(Dashboard)
        if dashboard.compact != compact:
            dashboard.compact = compact
            self.call_after_refresh(self._focus_pane, 1)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def compact(self) -> bool:
        return self.query_one(Dashboard).compact

    # -- state flowing down -----------------------------------------------------------------------
    def entries(self) -> list[Prediction | Infeasible]:
        """What the strategies table can show, in this order: the ranked strategies, the uniform
        baseline, the infeasible ones (when shown). `selected_index` indexes this list."""
        if self.result is None:
            return []
        entries: list = list(self.result.strategies)
        if self.result.baseline is not None:
            entries.append(self.result.baseline)
        if self.show_infeasible:
            entries += list(self.result.infeasible)
        return entries

    def selected_entry(self) -> Prediction | Infeasible | None:
        entries = self.entries()
        return entries[self.selected_index] if 0 <= self.selected_index < len(entries) else None

    def selected_prediction(self) -> Prediction | None:
        entry = self.selected_entry()
        return entry if isinstance(entry, Prediction) else None

    def _show_scenario(self) -> None:
        self.sub_title = self.scenario.name
        for pane in self.query(ScenarioPane):
            pane.show(self.scenario)

    def _show_result(self) -> None:
        for table in self.query(StrategyTable):
            table.show_result(self.result, self.selected_index, self.show_infeasible, self.results_stale)
        self._show_selected()

    def _show_selected(self) -> None:
        baseline = self.result.baseline if self.result else None
        for pane in self.query(SelectedPane):
            pane.set_stale(self.results_stale)
            pane.show(self.selected_entry(), baseline)
        sentence = self.comparison_sentence()
        for table in self.query(StrategyTable):
            table.show_comparison(sentence)

    # -- edits flowing up ------------------------------------------------------------------------
    def on_scenario_edited(self, message: ScenarioEdited) -> None:
        message.stop()
        proposed = message.scenario
        if callable(proposed):
            # An edit relative to the current scenario (e.g. one node more): applied to the newest
            # scenario, so a burst of key presses adds up instead of each reading a stale one.
            try:
                proposed = proposed(self.scenario)
            except SpecError as error:
                self.refuse(str(error))
                return
        if isinstance(proposed, dict):
            try:
                proposed = parse_scenario(proposed)
            except SpecError as error:
                self.refuse(str(error))
                return
        self.apply_scenario(edits.follow_names(self.scenario, proposed), message.what)

    def on_edit_refused(self, message: EditRefused) -> None:
        self.status.set_error(message.reason)

    def refuse(self, message: str) -> None:
        """An invalid edit: say why; the current scenario stays in force."""
        self.status.set_error(message)
        self.notify(message, title="Edit refused", severity="error", markup=False)

    def apply_scenario(self, scenario: Scenario, what: str, *, undoable: bool = True) -> None:
        self.status.set_error("")
        if scenario == self.scenario:
            return
        if undoable:
            self._undo.append((self.scenario, what))
            del self._undo[:-UNDO_LIMIT]
            self._redo.clear()
        self.scenario = scenario
        self._show_scenario()
        self.start_search(delay=self.debounce_s)

    def action_undo(self) -> None:
        self._step(self._undo, self._redo, "undo", "Undone")

    def action_redo(self) -> None:
        self._step(self._redo, self._undo, "redo", "Redone")

    def _step(self, source: list, target: list, verb: str, done: str) -> None:
        """Move one edit from the undo stack to the redo stack, or back, and apply it."""
        if not source:
            self.notify(f"Nothing to {verb}")
            return
        scenario, what = source.pop()
        target.append((self.scenario, what))
        self.apply_scenario(scenario, what, undoable=False)
        self.notify(f"{done}: {what}", markup=False)

    @property
    def unsaved(self) -> bool:
        return self.scenario != self.saved_scenario

    # -- search ----------------------------------------------------------------------------------
    def start_search(self, delay: float) -> None:
        self._generation += 1
        self.results_stale = self.result is not None
        self.status.searching(0.0)
        for table in self.query(StrategyTable):
            table.set_stale(self.results_stale)
        for pane in self.query(SelectedPane):
            pane.set_stale(self.results_stale)
        self._search(self.scenario, self._generation, delay)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def _search(self, scenario: Scenario, generation: int, delay: float) -> None:
        worker = get_current_worker()

        last_yield = [time.perf_counter()]

        def cancelled() -> bool:
            # Polled every few ms by the search. The search and the UI share the GIL; pausing the
            # search briefly every YIELD_EVERY_S lets a keypress and a repaint through promptly.
            now = time.perf_counter()
            if now - last_yield[0] >= YIELD_EVERY_S:
                time.sleep(YIELD_FOR_S)
                last_yield[0] = time.perf_counter()
            return worker.is_cancelled or generation != self._generation

        # Debounce: a newer edit within `delay` cancels this worker before it starts searching.
        if delay > 0 and worker.cancelled_event.wait(delay):
            return
        if cancelled():
            return
        last_report = [0.0]

        def progress(fraction: float) -> None:
            last_fraction[0] = fraction
            now = time.monotonic()
            if now - last_report[0] >= 0.1:
                last_report[0] = now
                self.post_message(SearchProgress(generation, fraction))

        def improved(so_far: SearchResult) -> None:     # the best so far, while the search runs
            if so_far.strategies:
                self.post_message(SearchProgress(generation, last_fraction[0], so_far.strategies[0]))

        last_fraction = [0.0]
        started = time.perf_counter()
        try:
            # What `plan` runs (idle nodes, then batch shares and per-stage degrees), ranked by the
            # chosen objective, with plan's default work budget: one ranking in the CLI and the
            # dashboard. No time limit (plan's is a safety net): the progress bar and the best so
            # far show, and an edit cancels.
            plans = find_plans(scenario, self.objective, should_cancel=cancelled, progress=progress,
                               time_limit_s=None, work=DEFAULT_WORK, improved=improved)
        except Cancelled:
            return
        self.post_message(SearchDone(generation, plans.result, time.perf_counter() - started,
                                     plans.idle_search.exact, plans.idle_search.gap))

    def on_search_progress(self, message: SearchProgress) -> None:
        if message.generation == self._generation and self.status.state == "searching":
            self.status.searching(message.fraction, message.best)

    def on_search_done(self, message: SearchDone) -> None:
        if message.generation != self._generation:
            return  # a newer edit came meanwhile: its search will report
        if self.applied_generations and self.applied_generations[-1] == message.generation and not self.results_stale:
            return  # a second search of the same scenario (a restart raced the first): already shown
        previous = self.selected_entry()
        was_baseline = self.result is not None and previous is not None and previous is self.result.baseline
        self.result = message.result
        self.results_stale = False
        self.applied_generations.append(message.generation)
        self.selected_index = self._index_after_search(previous)
        if was_baseline and self.result.baseline is not None:
            self.selected_index = len(self.result.strategies)   # the baseline row stays selected
        self._repin()
        self._show_result()
        self.status.done(message.result, message.elapsed_s, message.exact, message.gap)

    def _index_after_search(self, previous: Prediction | Infeasible | None) -> int:
        """Keep the same strategy selected across a rerun when it is still listed (or a plan's)."""
        # Row 0 means "the best": follow the new best. Another row was picked on purpose: keep it.
        kept = previous.strategy if previous is not None and self.selected_index > 0 else None
        wanted = self._preferred or kept
        preferred, self._preferred = self._preferred, None
        if wanted is None:
            return 0
        key = (wanted.tp, wanted.pp, wanted.dp, wanted.micro_batch_size)
        for index, prediction in enumerate(self.result.strategies):
            s = prediction.strategy
            if (s.tp, s.pp, s.dp, s.micro_batch_size) == key:
                return index
        if preferred is not None:
            self.notify(f"The plan's strategy {preferred.label} (micro-batch {preferred.micro_batch_size}) is not "
                        f"among the top {len(self.result.strategies)}", severity="warning", markup=False)
        return 0

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "search" and event.state == WorkerState.ERROR:
            error = event.worker.error
            message = f"Search failed: {type(error).__name__}: {error}"
            self.status.failed(message)
            self.notify(message, severity="error", markup=False, timeout=10)

    def on_strategy_selected(self, message: StrategySelected) -> None:
        if message.index != self.selected_index:
            self.selected_index = message.index
            self._show_selected()

    # -- navigation ------------------------------------------------------------------------------
    def action_go(self, number: int) -> None:
        self._focus_pane(number)

    def _focus_pane(self, number: int) -> None:
        tab, widget_id, _ = PANES[number]
        tabs = self.query_one("#tabs", TabbedContent)
        if number <= 3 or self.compact:
            tabs.active = tab
        widget = self.query_one(f"#{widget_id}")
        target = widget if widget.focusable else next(iter(widget.query(DataTable)), None)
        if target is not None:
            self.call_after_refresh(target.focus)

    async def action_quit(self) -> None:
        """ctrl+q quits at once, whatever is running; edits not saved are kept in a recovery file
        (tui/recovery.py) whose path is printed, rather than asked about: quitting never hangs on
        a question and never loses work."""
        # Stop the search first: it shares the GIL with the shutdown, which it would slow down.
        self._generation += 1
        self.workers.cancel_group(self, "search")
        message = None
        if self.unsaved:
            from amp_tui.tui.recovery import keep_unsaved

            try:
                path = keep_unsaved(self.scenario)
                message = f"amp-tui: unsaved edits kept in {path} (amp-tui ui {path} reopens them)"
            except (SpecError, OSError) as err:
                message = f"amp-tui: the unsaved edits could not be kept: {err}"
        self.exit(message=message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # While a dialog or the what-if view is open, keys belong to it (quit and the palette still work).
        if self.screen is not self.screen_stack[0] and action not in ("quit", "command_palette", "pop_screen"):
            return False
        return True

    # -- command palette -------------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Undo last edit (ctrl+z)", "Revert the scenario to before the last edit", self.action_undo)
        yield SystemCommand("Open preset (ctrl+o)", "Load a scenario, or swap in a cluster or a model preset",
                            self.action_open_preset)
        yield SystemCommand("Save plan (ctrl+s)", "Save the selected strategy and the scenario as a plan file",
                            self.action_save_plan)
        yield SystemCommand("Export (x)", "Export the selected strategy: megatron, deepspeed, torchrun, rankmap, torchtitan",
                            self.action_export)
        yield SystemCommand("Show / hide infeasible strategies (f)", "List the strategies that do not fit, with why",
                            self.action_toggle_infeasible)
        yield SystemCommand("Redo (ctrl+y)", "Apply again the edit undone last", self.action_redo)
        yield SystemCommand("Save scenario (ctrl+e)", "Save the edited scenario as a YAML file", self.action_save_scenario)
        yield SystemCommand("What-if (w)", "Rerun the search with links, GPU speeds and the batch scaled; the most "
                            "robust pick", self.action_what_if)
        yield SystemCommand("Calibrate (C)", "Fit the cost model to runs measured on your cluster",
                            self.action_calibrate)
        yield SystemCommand("Serve view (v)", "Place a model for serving by max flow", self.action_serve_view)
        yield SystemCommand("Objective: time or cost (o)", "Rank by iteration time or by cost per token",
                            self.action_toggle_objective)
        yield SystemCommand("Budget (b)", "Leave out strategies whose nodes cost more dollars per hour",
                            self.action_set_budget)
        yield SystemCommand("Pin / compare (p)", "Pin the selected strategy; moving the cursor compares with it",
                            self.action_pin)
        for name, act, help_text in (("Sort (s, in Strategies)", lambda t: t.action_sort(1), "Sort by the next column"),
                                     ("Filter (/, in Strategies)", lambda t: t.action_filter(), "Show rows containing words"),
                                     ("Columns (c, in Strategies)", lambda t: t.action_columns(), "Choose the columns")):
            yield SystemCommand(name, help_text, lambda act=act: self._in_pane(4, StrategyTable, act))
        yield SystemCommand("Help (?)", "Every key and what it does", self.action_help)
        for number, (_, _, title) in PANES.items():
            yield SystemCommand(f"Go to {title} ({number})", f"Show and focus the {title} pane",
                                lambda n=number: self._focus_pane(n))
        yield SystemCommand("Add node group (a, in Cluster)", "Add a node group from the instance catalog or custom",
                            lambda: self._pane_action(1, ClusterPane, "action_add"))
        yield SystemCommand("Remove node group (d, in Cluster)", "Remove the node group under the cursor",
                            lambda: self._pane_action(1, ClusterPane, "action_remove"))
        yield SystemCommand("Edit value (enter / e)", "Edit the value under the cursor in the focused pane",
                            self._edit_focused)

    def _pane_action(self, number: int, pane_type: type, action: str) -> None:
        self._in_pane(number, pane_type, lambda pane: getattr(pane, action)())

    def _in_pane(self, number: int, pane_type: type, act) -> None:
        """Show pane `number` and run `act` on it once it is on screen."""
        self._focus_pane(number)
        pane = self.query_one(pane_type)
        self.call_after_refresh(lambda: act(pane))

    def _edit_focused(self) -> None:
        focused = self.focused
        pane = next((node for node in (focused.ancestors_with_self if focused else []) if isinstance(node, ScenarioPane)),
                    None)
        if pane is None:
            self.notify("Focus the Cluster, Model or Training pane first (1, 2, 3)")
            return
        pane.action_edit()


def load_target(target: str | None) -> tuple[Scenario, Strategy | None]:
    """The scenario to open (a preset name, a scenario file, or a plan file) and a plan's strategy."""
    scenario, plan = open_scenario(target or DEFAULT_TARGET)
    return scenario, plan.strategy if plan is not None else None


def run_app(target: str | None) -> None:
    """Open the dashboard. A bad target raises SpecError before the terminal is taken over."""
    from amp_tui.tui.screens.serve import ServeApp, serving_target

    serving = serving_target(target)
    if serving is not None:
        ServeApp(*serving).run()
        return
    scenario, preferred = load_target(target)
    app = AmpApp(scenario, preferred=preferred)
    app.run()
    _leave_now(app.return_code or 0)


def _leave_now(code: int) -> None:
    """Quit means quit: a search thread finishing its current step (it is cancelled, but a step can
    take seconds on a large model) would keep the process alive after the screen is restored, and
    tearing down the interpreter takes a few hundred ms more. The terminal is restored, the search's
    result is not wanted and nothing is being written (saves run on the UI thread), so leave at once."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
