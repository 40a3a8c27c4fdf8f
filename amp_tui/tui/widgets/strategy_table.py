"""Strategies pane: the ranked table (a view of the latest search result), the uniform baseline as a
row of its own, infeasible ones on request. Sort by any column, filter by text, pick the columns.

The table is a view: rows are built from the app's entries (`AmpApp.entries()`, feasible strategies,
then the baseline, then the infeasible ones) and every row keeps the index of its entry, so sorting
and filtering never change what the app calls selected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from amp_tui.core.costmodel.placement import merge_runs
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.plans.compare import mfu, tokens_per_s
from amp_tui.core.plans.confidence import MEMORY_RISK_NOTE, memory_at_risk
from amp_tui.core.plans.runnable import STOCK_ENGINES, custom_only
from amp_tui.core.search.search import Infeasible, SearchResult
from amp_tui.core.spec.scenario import Cluster
from amp_tui.tui.format import cell, format_memory_pair, format_seconds
from amp_tui.tui.messages import StrategySelected
from amp_tui.tui.widgets.table import Table

# By default the columns that fit the pane's width are shown, taken in this order (the column
# picker, c, chooses others); none is cut off at the right edge.
FIT_ORDER = ("#", "tp×pp×dp", "mbs", "iter", "tok/s", "gap", "partition", "placement", "memory", "B", "vs unif",
             "MFU", "$/hour", "$/1M tok")
PARTITION_WIDTH = 16
PLACEMENT_WIDTH = 14


@dataclass
class Row:
    """One table row: the entry it shows and its place in the app's entry list."""

    index: int
    entry: Prediction | Infeasible
    kind: str            # "ranked", "baseline" or "infeasible"
    rank: int = 0


@dataclass(frozen=True)
class Column:
    header: str
    text: Callable[[Row, "Context"], str]
    sort: Callable[[Row, "Context"], float | str] | None = None   # None: sorts by the text
    right: bool = True
    optional: bool = False     # shown only when some entry has the figure (prices)


@dataclass
class Context:
    result: SearchResult
    best_s: float
    baseline_s: float | None

    @property
    def cluster(self) -> Cluster:
        return self.result.scenario.cluster


def abbreviate_partition(partition: tuple[int, ...] | None, width: int = PARTITION_WIDTH) -> str:
    """'5/3/3/7'; a long one keeps its ends and says how many stages: '5/3/3…3/7 (32)'."""
    if not partition:
        return "–"
    full = "/".join(map(str, partition))
    if len(full) <= width:
        return full
    suffix = f" ({len(partition)})"
    head, tail = [], "/" + str(partition[-1])
    for n in partition[:-1]:
        if len("/".join(map(str, [*head, n]))) + len("…") + len(tail) + len(suffix) > width:
            break
        head.append(n)
    return "/".join(map(str, head)) + "…" + tail.lstrip("/") + suffix


def abbreviate_placement(cluster: Cluster, placement: tuple[int, ...] | None, width: int = PLACEMENT_WIDTH) -> str:
    """Node groups in rank order as 'nodes x short name': '1g4dn>3p3'; 'rank' for the listed order."""
    order = tuple(placement) if placement else tuple(range(len(cluster.nodes)))
    if order == tuple(range(len(cluster.nodes))):
        return "rank"
    runs = merge_runs((cluster.nodes[g].label.split(".")[0], cluster.nodes[g].count) for g in order)
    text = ">".join(f"{count}{name}" for name, count in runs)
    return text if len(text) <= width else text[:width - 1] + "…"


def _prediction(row: Row) -> Prediction | None:
    return row.entry if isinstance(row.entry, Prediction) else None


def _figure(row: Row, get: Callable[[Prediction], float | None], show: Callable[[float], str]) -> str:
    p = _prediction(row)
    value = get(p) if p is not None else None
    return "–" if value is None else show(value)


def _price(name: str) -> Callable[[Prediction], float | None]:
    return lambda p: getattr(p, name, None)


def _number(row: Row, get: Callable[[Prediction], float | None], missing: float) -> float:
    p = _prediction(row)
    value = get(p) if p is not None else None
    return missing if value is None else value


COLUMNS: tuple[Column, ...] = (
    Column("#", lambda r, c: {"baseline": "unif", "infeasible": "✗"}.get(
        r.kind, str(r.rank) + ("†" if custom_only(r.entry.strategy) else "")),
           lambda r, c: r.rank if r.kind == "ranked" else 10**9),
    Column("tp×pp×dp", lambda r, c: r.entry.strategy.label, right=False),
    Column("mbs", lambda r, c: str(r.entry.strategy.micro_batch_size), lambda r, c: r.entry.strategy.micro_batch_size),
    Column("B", lambda r, c: _figure(r, lambda p: p.num_micro_batches, lambda v: str(int(v))),
           lambda r, c: _number(r, lambda p: p.num_micro_batches, 10**9)),
    Column("iter", lambda r, c: _figure(r, lambda p: p.iteration_time_s, format_seconds),
           lambda r, c: _number(r, lambda p: p.iteration_time_s, float("inf"))),
    Column("tok/s", lambda r, c: _figure(r, lambda p: tokens_per_s(c.result.scenario, p), lambda v: f"{v:,.0f}"),
           lambda r, c: _number(r, lambda p: tokens_per_s(c.result.scenario, p), -1.0)),
    Column("MFU", lambda r, c: _figure(r, lambda p: mfu(c.result.scenario, p), lambda v: f"{v * 100:.1f}%"),
           lambda r, c: _number(r, lambda p: mfu(c.result.scenario, p), -1.0)),
    Column("memory", lambda r, c: _memory(r), lambda r, c: _number(
        r, lambda p: p.tightest_stage.memory.total_bytes / p.tightest_stage.capacity_bytes, float("inf"))),
    Column("gap", lambda r, c: _figure(r, lambda p: p.iteration_time_s / c.best_s - 1.0,
                                       lambda v: "best" if v <= 0 else f"+{v * 100:.1f}%"),
           lambda r, c: _number(r, lambda p: p.iteration_time_s, float("inf"))),
    Column("vs unif", lambda r, c: _figure(r, lambda p: c.baseline_s / p.iteration_time_s if c.baseline_s else None,
                                           lambda v: f"{v:.2f}x"),
           lambda r, c: _number(r, lambda p: c.baseline_s / p.iteration_time_s if c.baseline_s else None, -1.0)),
    Column("$/hour", lambda r, c: _figure(r, _price("cost_per_hour_usd"), lambda v: f"{v:,.2f}"),
           lambda r, c: _number(r, _price("cost_per_hour_usd"), float("inf")), optional=True),
    Column("$/1M tok", lambda r, c: _figure(r, _price("cost_per_million_tokens_usd"), lambda v: f"{v:,.3f}"),
           lambda r, c: _number(r, _price("cost_per_million_tokens_usd"), float("inf")), optional=True),
    Column("partition", lambda r, c: abbreviate_partition(r.entry.strategy.partition), right=False),
    Column("placement", lambda r, c: abbreviate_placement(c.cluster, r.entry.strategy.placement), right=False),
)
COLUMN_NAMES = tuple(column.header for column in COLUMNS)


def _memory(row: Row) -> str:
    p = _prediction(row)
    if p is None:
        return "–"
    stage = p.tightest_stage
    return format_memory_pair(stage.memory.total_bytes, stage.capacity_bytes, short=True) + \
        ("!" if memory_at_risk(p) else "")


def has_prices(result: SearchResult | None, attribute: str) -> bool:
    """A price column shows once predictions carry the figure (absent, not zero, until then)."""
    if result is None:
        return False
    entries = [*result.strategies, *([result.baseline] if result.baseline else [])]
    return any(getattr(p, attribute, None) is not None for p in entries)


def no_strategy_note(result: SearchResult, objective=None) -> str:
    """Why the table is empty, and what to change (the core's sentence, as `plan` prints it)."""
    from amp_tui.core.plans.no_strategy import nothing_found

    if result.stats.candidates > 0 and result.infeasible:
        return "No strategy fits in memory: press f to see why each fails."
    return nothing_found(result, objective)


def row_matches(texts: list[str], query: str) -> bool:
    """Every word of the filter appears in some cell (case-insensitive)."""
    haystack = " ".join(texts).lower()
    return all(word in haystack for word in query.lower().split())


class StrategyTable(Vertical):
    DEFAULT_CSS = """
    StrategyTable { height: 1fr; }
    StrategyTable DataTable { height: 1fr; }
    StrategyTable.-stale DataTable { text-opacity: 45%; text-style: italic; }
    StrategyTable #strategies-note { height: auto; max-height: 5; color: $text-muted; padding: 0 1; }
    StrategyTable #strategies-compare { height: auto; padding: 0 1; text-style: bold; display: none; }
    StrategyTable.-comparing #strategies-compare { display: block; }
    """
    BINDINGS = [
        Binding("p", "app.pin", "Pin/compare"),
        Binding("s", "sort(1)", "Sort"),
        Binding("S", "sort(-1)", "Reverse", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("c", "columns", "Columns"),
        Binding("j", "move(1)", "Down", show=False),
        Binding("k", "move(-1)", "Up", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.result: SearchResult | None = None
        self.show_infeasible = False
        self.rows: list[Row] = []          # in table order
        self.sort_column = "#"
        self.sort_reverse = False
        self.filter_text = ""
        self.chosen_columns: tuple[str, ...] | None = None    # None: by width
        self._shown_columns: tuple[str, ...] = ()
        self._selected = 0

    def compose(self) -> ComposeResult:
        yield Table(id="strategies", cursor_type="row", zebra_stripes=True, cell_padding=0)
        yield Static(id="strategies-compare")
        yield Static(id="strategies-note")

    def on_mount(self) -> None:
        app = self.app
        if getattr(app, "result", None) is not None:
            self.show_result(app.result, app.selected_index, app.show_infeasible, app.results_stale)
            self.show_comparison(getattr(app, "comparison_sentence", lambda: None)())

    def on_resize(self) -> None:
        if self.chosen_columns is None and self.result is not None and self.columns() != self._shown_columns:
            self.refill()

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    # -- columns -----------------------------------------------------------------------------
    def available_columns(self) -> tuple[str, ...]:
        return tuple(c.header for c in COLUMNS if not c.optional or has_prices(self.result, _PRICE_ATTR[c.header]))

    def columns(self) -> tuple[str, ...]:
        available = self.available_columns()
        if self.chosen_columns is not None:
            wanted = self.chosen_columns
        else:
            wanted = self._fitting(available)
        return tuple(name for name in available if name in wanted)

    def _fitting(self, available: tuple[str, ...]) -> set[str]:
        """The columns, in FIT_ORDER, whose widths (header or widest cell) fit the table's width."""
        room = self.table.size.width - self.table.styles.scrollbar_size_vertical
        if self.result is None or room <= 0:
            return set(available)
        context = self._figures_context(self.result)
        rows = self._entries(self.result, False)
        by_header = {c.header: c for c in COLUMNS}
        chosen, used = set(), 0
        for name in FIT_ORDER:
            if name not in available:
                continue
            width = 1 + max([len(name) + 1, *(len(by_header[name].text(row, context)) for row in rows)])
            if used + width <= room:
                chosen.add(name)
                used += width
        return chosen

    @staticmethod
    def _figures_context(result: SearchResult) -> Context:
        best = result.strategies[0].iteration_time_s if result.strategies else 1.0
        return Context(result, best, result.baseline.iteration_time_s if result.baseline else None)

    # -- filling -----------------------------------------------------------------------------
    def _entries(self, result: SearchResult, show_infeasible: bool) -> list[Row]:
        rows = [Row(i, p, "ranked", i + 1) for i, p in enumerate(result.strategies)]
        if result.baseline is not None:
            rows.append(Row(len(rows), result.baseline, "baseline"))
        if show_infeasible:
            rows += [Row(len(rows) + i, entry, "infeasible") for i, entry in enumerate(result.infeasible)]
        return rows

    def show_result(self, result: SearchResult | None, selected: int, show_infeasible: bool, stale: bool) -> None:
        self.result = result
        self.show_infeasible = show_infeasible
        self._selected = selected
        self.set_class(stale, "-stale")
        self.refill()

    def set_stale(self, stale: bool) -> None:
        """Results for an older scenario: dimmed, and the note says so until the new ones arrive."""
        self.set_class(stale, "-stale")
        if self.result is not None:
            self.query_one("#strategies-note", Static).update(self._note(self.result))

    def refill(self) -> None:
        result = self.result
        table = self.table
        with self.prevent(DataTable.RowHighlighted):
            scroll_y = table.scroll_y
            table.clear(columns=True)
            if result is None:
                self.rows = []
                self.query_one("#strategies-note", Static).update(Text("Searching…"))
                return
            names = self.columns()
            self._shown_columns = names
            columns = [c for c in COLUMNS if c.header in names]
            with_reason = self.show_infeasible and bool(result.infeasible)
            for column in columns:
                mark = ("▼" if self.sort_reverse else "▲") if column.header == self.sort_column else ""
                table.add_column(cell(column.header + mark), key=column.header)
            if with_reason:
                table.add_column(cell("why not"), key="why not")
            context = self._figures_context(result)
            everything = self._entries(result, self.show_infeasible)
            by_column = {c.header: c for c in COLUMNS}
            sort_by = by_column.get(self.sort_column, COLUMNS[0])
            key = sort_by.sort or (lambda r, c: sort_by.text(r, c))
            ranked = [r for r in everything if r.kind == "ranked"]
            ranked.sort(key=lambda r: key(r, context), reverse=self.sort_reverse)
            # The baseline first, held there (a fixed row): the reference stays in view however the
            # ranking scrolls.
            ordered = [r for r in everything if r.kind == "baseline"] + ranked + \
                [r for r in everything if r.kind == "infeasible"]
            self.rows = []
            pinned = getattr(self.app, "pinned", None)
            for row in ordered:
                texts = [column.text(row, context) for column in columns]
                if pinned is not None and columns[0].header == "#" and row.entry.strategy == pinned.strategy:
                    texts[0] = "◆" + texts[0]   # the pinned strategy the Selected pane compares against
                reason = row.entry.reason if row.kind == "infeasible" else ""
                if self.filter_text and not row_matches([*texts, reason], self.filter_text):
                    continue
                style = {"baseline": "italic", "infeasible": "dim"}.get(row.kind, "")
                cells = [cell(text, style=style, justify="right" if column.right else "left")
                         for text, column in zip(texts, columns)]
                if row.kind == "infeasible":
                    cells[0].stylize("red")
                elif not row.entry.tightest_stage.fits and "memory" in names:
                    cells[names.index("memory")].stylize("bold red")
                if with_reason:
                    cells.append(cell(reason + " ", style="red"))
                table.add_row(*cells)
                self.rows.append(row)
            table.fixed_rows = 1 if self.rows and self.rows[0].kind == "baseline" else 0
            if table.row_count:
                at = next((i for i, row in enumerate(self.rows) if row.index == self._selected), 0)
                table.move_cursor(row=at, animate=False)
                table.scroll_to(y=scroll_y, animate=False)
        self.query_one("#strategies-note", Static).update(self._note(result))
        if self.rows and all(row.index != self._selected for row in self.rows):
            self.post_message(StrategySelected(self.rows[self.table.cursor_row].index))

    def _note(self, result: SearchResult) -> Text:
        parts = []
        stale = Text("stale: these are the results before the latest edit; searching… ", style="bold yellow") \
            if self.has_class("-stale") else Text("")
        if not result.strategies:
            parts.append(no_strategy_note(result, getattr(self.app, "objective", None)))
        else:
            parts.append(confidence_note(result))
        if any(custom_only(p.strategy) for p in result.strategies):
            parts.append(f"†: uneven batch shares or per-stage tp/dp, which {STOCK_ENGINES} do not run "
                         "(export: torchrun, rankmap).")
        if result.baseline is not None:
            parts.append("unif: the best even split in rank order.")
        else:
            from amp_tui.core.plans.no_strategy import missing_baseline

            missing = missing_baseline(result, getattr(self.app, "objective", None))
            if missing:
                parts.append(missing[0].upper() + missing[1:] + ".")
        parts.append("memory: fullest stage.")
        if any(memory_at_risk(p) for p in result.strategies):
            parts.append(MEMORY_RISK_NOTE + ".")
        if getattr(self.app, "pinned", None) is not None:
            parts.append("◆ pinned: move to compare, p unpins.")
        if result.infeasible:
            parts.append(f"{len(result.infeasible)} infeasible: f to {'hide' if self.show_infeasible else 'show'}.")
        if self.filter_text:
            parts.append(f"filter {self.filter_text!r}: {len(self.rows)} rows (/ to change).")
        hidden = len(self.available_columns()) - len(self._shown_columns)
        if hidden:
            parts.append(f"{hidden} columns hidden: c to choose.")
        return stale + Text(" ".join(parts))

    def show_comparison(self, sentence: str | None) -> None:
        self.set_class(bool(sentence), "-comparing")
        self.query_one("#strategies-compare", Static).update(Text(sentence or ""))

    # -- keys --------------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        # Refilling the table moves the cursor through row 0 first; only the row it rests on counts.
        if event.cursor_row == self.table.cursor_row and 0 <= event.cursor_row < len(self.rows):
            self._selected = self.rows[event.cursor_row].index
            self.post_message(StrategySelected(self._selected))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()

    def action_move(self, step: int) -> None:
        if step > 0:
            self.table.action_cursor_down()
        else:
            self.table.action_cursor_up()

    def action_sort(self, step: int) -> None:
        """s: sort by the next column (ascending); S: reverse the order."""
        names = self._shown_columns or COLUMN_NAMES
        if step < 0:
            self.sort_reverse = not self.sort_reverse
        else:
            at = names.index(self.sort_column) if self.sort_column in names else -1
            self.sort_column = names[(at + 1) % len(names)]
            self.sort_reverse = False
        self.refill()   # the header's ▲/▼ says which column and which way

    def action_filter(self) -> None:
        from amp_tui.tui.screens.edit_value import EditValueScreen

        def done(text: str | None) -> None:
            if text is not None:
                self.filter_text = text.strip()
                self.refill()
        self.app.push_screen(EditValueScreen(
            "Filter strategies", self.filter_text, lambda text: text,
            hint="Rows whose cells contain every word, e.g. '1x8x2', 'mbs 2' (as 2), 'rank', 'unif'. "
                 "Empty shows every row."), done)

    def action_columns(self) -> None:
        from amp_tui.tui.screens.column_picker import ColumnPickerScreen

        def done(chosen: tuple[str, ...] | None) -> None:
            if chosen is not None:
                self.chosen_columns = chosen
                self.refill()
        self.app.push_screen(ColumnPickerScreen(self.available_columns(), self._shown_columns), done)


_PRICE_ATTR = {"$/hour": "cost_per_hour_usd", "$/1M tok": "cost_per_million_tokens_usd"}


def confidence_note(result: SearchResult) -> str:
    """'times ±15% (uncalibrated: ...); the top 3 are within each other's band.'"""
    from amp_tui.core.plans.confidence import confidence, within_band

    sure = confidence(result.scenario)
    close = within_band([p.iteration_time_s for p in result.strategies], sure.band)
    marker = "calibrated" if result.scenario.calibration.values else "times"
    if sure.band is None:
        return f"{marker} {sure.describe()}."
    tail = f" the top {close} are within each other's band." if close > 1 else " the top pick stands clear of the rest."
    return f"{marker} {sure.describe()};{tail}"
