"""`?`: what every key does, and how the dashboard works."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

SECTIONS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Anywhere", [
        ("1 2 3", "show the Cluster, Model, Training pane"),
        ("4 5", "go to the Strategies table, the selected strategy"),
        ("tab / shift+tab", "move between panes"),
        ("ctrl+o", "open a preset: a scenario, or a cluster / model to swap in"),
        ("ctrl+z / ctrl+y", "undo the last edit / redo it"),
        ("ctrl+s", "save the selected strategy as a plan file"),
        ("ctrl+e", "save the edited scenario as a YAML file"),
        ("w", "what-if: rerun the search with links, GPU speeds and the batch scaled; the most robust pick"),
        ("x", "export the selected strategy (megatron, deepspeed, torchrun, rankmap, torchtitan)"),
        ("f", "show or hide infeasible strategies with their reason"),
        ("o", "rank by iteration time or by cost per token (needs every node group's price)"),
        ("b", "budget: leave out strategies whose nodes cost more dollars per hour (empty: none)"),
        ("C", "calibrate: fit the cost model to runs measured on your cluster (a measurements file), "
              "then plan with the fitted values"),
        ("v", "Serve view: place a model for serving by max flow (g picks a group, + / - edits it, c cancels)"),
        ("ctrl+p", "command palette: every action by name"),
        ("?", "this help"),
        ("ctrl+q", "quit at once, whatever is running; unsaved edits are kept in a recovery file whose path "
                   "is printed (amp-tui ui FILE reopens them)"),
    ]),
    ("Cluster", [
        ("enter / e", "edit the value under the cursor (count, GPU type, GPUs per node, bandwidths)"),
        ("a", "add a node group from the instance catalog, or a custom node"),
        ("d / delete", "remove the node group"),
        ("+ / -", "one node more / fewer in the group"),
    ]),
    ("Model", [
        ("enter / e", "edit a hyperparameter (family model) or a layer's value"),
        ("space", "expand or collapse a repeated layer (block x 24)"),
        ("c", "duplicate the layer (on an expanded copy: that copy alone)"),
        ("i", "insert an empty layer after it"),
        ("d / delete", "delete the layer"),
        ("", "editing the layers of a family model turns it into an explicit layer list; editing one "
             "copy of an expanded repeated layer splits the group around it (24 becomes 4 + 1 + 19)"),
    ]),
    ("Training", [
        ("enter / e / space", "edit the setting (choices open a list, switches toggle)"),
    ]),
    ("Strategies", [
        ("↑ ↓ / j k", "select a strategy: its stages, memory and time breakdown show below"),
        ("p", "pin the selected strategy (◆); moving the cursor then compares it term by term with the "
              "cursor's, with a sentence naming the biggest differences; p again unpins"),
        ("s / S", "sort by the next column / reverse the order"),
        ("/", "filter: rows whose cells contain every word"),
        ("c", "choose the columns (below 90 columns a narrower set shows)"),
        ("columns", "tp×pp×dp parallel degrees · mbs micro-batch size · B micro-batches per iteration · "
                    "iter predicted iteration time · tok/s tokens per second · MFU model FLOPs utilisation · "
                    "memory peak against capacity of the fullest stage · gap to the best · vs unif speedup "
                    "over the uniform baseline · partition layers per stage · placement node groups in rank "
                    "order · $/hour and $/1M tok once prices are known; the unif row is the best even split "
                    "in rank order"),
    ]),
]

ABOUT = ("Every valid edit reruns the search in the background; results from before the edit stay "
         "visible, marked stale, until the new ones arrive. Invalid values are refused with a message "
         "saying what is allowed, and the last good scenario stays in force.")


class HelpScreen(ModalScreen):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 100; max-width: 95%; height: 90%; border: round $accent; padding: 0 1; background: $surface;
    }
    """
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = "Help · Escape to close"
            yield Static(Text(ABOUT))
            for title, rows in SECTIONS:
                table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1))
                table.add_column(style="bold", no_wrap=True)
                table.add_column()
                for key, text in rows:
                    table.add_row(Text(key), Text(text))
                yield Static(table)

    def action_close(self) -> None:
        self.dismiss(None)
