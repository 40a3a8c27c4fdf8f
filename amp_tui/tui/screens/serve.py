"""The Serve view: place the scenario's model for serving (most predicted decode tokens/s), live.

Keys: g / G pick a node group, + / - add or remove one of its machines (the placement is solved
again at once), c cancels a running solve, escape goes back.
"""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, ProgressBar, Static
from textual.worker import Worker, WorkerState, get_current_worker

from amp_tui.core.base.errors import Cancelled, SpecError
from amp_tui.tui.widgets.serve_bars import ServeBars
from amp_tui.tui.widgets.serve_summary import ServeSummary

DEFAULT_SERVING_SCENARIO = "helix-single24-llama2-70b"


class ServeProgress(Message):
    def __init__(self, generation: int, fraction: float, best: float, bound: float) -> None:
        super().__init__()
        self.generation, self.fraction, self.best, self.bound = generation, fraction, best, bound


class ServeDone(Message):
    def __init__(self, generation: int, result) -> None:
        super().__init__()
        self.generation, self.result = generation, result


class ServeScreen(Screen):
    BINDINGS = [
        Binding("g", "pick_group(1)", "Next group"),
        Binding("G", "pick_group(-1)", "Prev group", show=False),
        Binding("plus", "change_count(1)", "+ machine"),
        Binding("minus", "change_count(-1)", "- machine"),
        Binding("c", "cancel", "Cancel solve"),
        Binding("escape", "app.pop_screen", "Back"),
    ]
    DEFAULT_CSS = """
    ServeScreen #serve-title { height: 1; padding: 0 1; background: $panel; }
    ServeScreen ProgressBar { padding: 0 1; }
    """

    def __init__(self, scenario, placement=None, *, time_limit_s: float = 10.0) -> None:
        super().__init__()
        self.scenario = scenario
        self.placement = placement
        self.time_limit_s = time_limit_s
        self.result = None
        self.group = 0
        from amp_tui.serving.spec import defaults_note

        self.note = defaults_note(scenario) or ""
        self.generation = 0
        self.solving = False

    def compose(self) -> ComposeResult:
        yield Static(id="serve-title", markup=False)
        yield ProgressBar(total=1.0, show_eta=False, id="serve-progress")
        with VerticalScroll():
            yield ServeSummary(id="serve-summary")
            yield ServeBars(id="serve-bars")
        yield Footer()

    def on_mount(self) -> None:
        self.solve()

    def _title(self) -> Text:
        """The scenario and its node groups; the group that + / - change is shown in reverse video."""
        sc = self.scenario
        title = Text(f"Serve {sc.name}: ")
        for i, g in enumerate(sc.groups):
            if i:
                title.append(", ")
            label = f"{g.count} x {g.label}" + (f" ({g.region})" if len(sc.regions) > 1 else "")
            title.append(label, style="reverse" if i == self.group else "")
        return title

    def solve(self) -> None:
        self.generation += 1
        self.solving = True
        self.query_one("#serve-title", Static).update(self._title())
        self.query_one(ProgressBar).update(progress=0.0)
        self.query_one(ServeSummary).show(None, "solving ... (c cancels)")
        self._solve(self.scenario, self.placement, self.generation)

    @work(thread=True, exclusive=True, group="serve", exit_on_error=False)
    def _solve(self, scenario, placement, generation: int) -> None:
        from amp_tui.serving.result import run_serve

        worker = get_current_worker()

        def progress(fraction: float, best: float, bound: float) -> None:
            self.post_message(ServeProgress(generation, fraction, best, bound))

        try:
            result = run_serve(scenario, time_limit_s=self.time_limit_s, placement=placement, progress=progress,
                               should_cancel=lambda: worker.is_cancelled)
        except Cancelled:
            return
        self.post_message(ServeDone(generation, result))

    def on_serve_progress(self, message: ServeProgress) -> None:
        if message.generation == self.generation:
            self.query_one(ProgressBar).update(progress=message.fraction)

    def on_serve_done(self, message: ServeDone) -> None:
        if message.generation != self.generation:
            return
        self.solving = False
        self.result = message.result
        self.query_one(ProgressBar).update(progress=1.0)
        self.query_one(ServeSummary).show(self.result, self.note)
        self.query_one(ServeBars).show(self.result)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.solving = False
            self.notify(f"serve: {event.worker.error}", severity="error", markup=False)

    def action_cancel(self) -> None:
        if self.solving:
            self.workers.cancel_group(self, "serve")
            self.generation += 1
            self.solving = False
            self.query_one(ServeSummary).show(self.result, "solve cancelled; showing the previous placement")

    def action_pick_group(self, step: int) -> None:
        self.group = (self.group + step) % len(self.scenario.groups)
        self.query_one("#serve-title", Static).update(self._title())

    def action_change_count(self, step: int) -> None:
        from amp_tui.serving.spec import with_group_count

        count = self.scenario.groups[self.group].count + step
        try:
            self.scenario = with_group_count(self.scenario, self.group, count)
        except SpecError as err:
            self.notify(str(err), severity="warning", markup=False)
            return
        self.placement = None      # the cluster changed: solve afresh
        from amp_tui.serving.spec import defaults_note

        self.note = "\n".join(filter(None, [f"group {self.group}: {count} machines", defaults_note(self.scenario)]))
        self.solve()


class ServeApp(App):
    """`amp-tui ui <serving scenario or saved placement>`: the Serve view on its own."""

    TITLE = "amp-tui serve"
    BINDINGS = [Binding("ctrl+q", "quit", "Quit", priority=True)]

    def __init__(self, scenario, placement=None, *, time_limit_s: float = 10.0) -> None:
        super().__init__()
        self.animation_level = "none"
        self._screen = ServeScreen(scenario, placement, time_limit_s=time_limit_s)

    def on_mount(self) -> None:
        self.push_screen(self._screen)

    def pop_screen(self):   # escape on the only view: stay
        if len(self.screen_stack) > 2:
            return super().pop_screen()
        return None


def serving_target(target: str | None):
    """(scenario, placement) when `target` names a serving-only scenario or a saved placement, else None."""
    from pathlib import Path

    from amp_tui.core.base.yamlio import load_yaml_file
    from amp_tui.core.spec.presets import load_preset, preset_names
    from amp_tui.serving.planfile import is_placement_file, open_serving

    if not target:
        return None
    if Path(target).is_file():
        data = load_yaml_file(target)
    elif target in preset_names("scenarios"):
        data = load_preset("scenarios", target)
    else:
        return None
    if is_placement_file(data) or (isinstance(data, dict) and "serving" in data and "training" not in data):
        return open_serving(target)
    return None
