"""Deciding in the dashboard: pin and compare, the baseline row, sort, filter, columns, what-if, save."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, SelectionList

from amp_tui.core.base.yamlio import load_yaml_file
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui.screens.column_picker import ColumnPickerScreen
from amp_tui.tui.screens.edit_value import EditValueScreen
from amp_tui.tui.screens.sensitivity import SensitivityScreen, WhatIfChart
from amp_tui.tui.widgets.compare_view import CompareView
from amp_tui.tui.widgets.strategy_table import StrategyTable, abbreviate_partition, abbreviate_placement, has_prices

from .conftest import settle


def headers(table: StrategyTable) -> list[str]:
    return [str(c.label).strip().rstrip("▲▼") for c in table.table.columns.values()]


def column_texts(table: StrategyTable, header: str) -> list[str]:
    at = headers(table).index(header)
    return [str(table.table.get_row_at(i)[at]).strip() for i in range(table.table.row_count)]


async def focus_strategies(app, pilot) -> StrategyTable:
    await pilot.press("4")
    await pilot.pause()
    return app.query_one(StrategyTable)


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
async def test_pin_then_move_shows_the_comparison_sentence(make_app, size):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        table = await focus_strategies(app, pilot)
        await pilot.press("p")
        assert app.pinned is not None and app.pinned.strategy == app.result.strategies[0].strategy
        await pilot.press("j")
        await pilot.pause()
        assert app.selected_index == 1
        sentence = str(table.query_one("#strategies-compare").content)
        assert " is faster by " in sentence
        view = app.query_one(CompareView)
        assert view.display
        comparison = app.comparison()
        assert comparison.sentence == sentence
        assert comparison.a.strategy == app.result.strategies[0].strategy
        assert comparison.b.strategy == app.result.strategies[1].strategy
        await pilot.press("k")                           # back on the pinned row: no comparison
        await pilot.pause()
        assert app.comparison() is None and not table.has_class("-comparing")
        await pilot.press("p")                           # unpin
        assert app.pinned is None


async def test_baseline_row_is_selectable_and_compares(make_app):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = await focus_strategies(app, pilot)
        await pilot.press("p")
        table.table.move_cursor(row=0)        # (the baseline's row is held at the top: issue 34)
        await pilot.pause()
        assert app.selected_entry() is app.result.baseline
        assert column_texts(table, "#")[0] == "unif" and table.table.fixed_rows == 1
        sentence = app.comparison_sentence()
        assert sentence is not None and "uniform" in app.comparison().b_name
        assert app.comparison().b is app.result.baseline


async def test_sort_cycles_and_reverses_and_keeps_the_selection(make_app):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = await focus_strategies(app, pilot)
        await pilot.press("j", "j")
        await pilot.pause()
        selected = app.selected_entry()
        await pilot.press("s", "s", "s", "s", "s")       # #, tp×pp×dp, mbs, B, iter
        await pilot.pause()
        assert table.sort_column == "tok/s"
        assert column_texts(table, "#")[0] == "unif"     # the baseline stays on top; the ranking sorts
        values = [float(v.replace(",", "")) for v in column_texts(table, "tok/s")[1:]]
        assert values == sorted(values)
        await pilot.press("S")
        await pilot.pause()
        values = [float(v.replace(",", "")) for v in column_texts(table, "tok/s")[1:]]
        assert values == sorted(values, reverse=True)
        assert app.selected_entry() is selected        # sorting moves rows, not the selection
        assert table.rows[table.table.cursor_row].entry is selected


async def test_filter_keeps_matching_rows(make_app):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = await focus_strategies(app, pilot)
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)
        app.screen.query_one(Input).value = "1x4x4"
        await pilot.press("enter")
        await pilot.pause()
        labels = column_texts(table, "tp×pp×dp")
        expected = [p for p in app.result.strategies if p.strategy.label == "1x4x4"]
        assert labels and set(labels) == {"1x4x4"} and len(labels) == len(expected)
        assert "filter '1x4x4'" in str(table.query_one("#strategies-note").content)
        assert app.selected_entry().strategy.label == "1x4x4"
        await pilot.press("slash")
        await pilot.pause()
        app.screen.query_one(Input).value = ""
        await pilot.press("enter")
        await pilot.pause()
        assert table.table.row_count == len(app.result.strategies) + 1


async def test_narrow_columns_and_the_picker(make_app):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        table = await focus_strategies(app, pilot)
        shown = headers(table)
        assert "partition" in shown and "tok/s" in shown and "MFU" not in shown
        assert table.table.max_scroll_x == 0        # the columns that fit, none cut off (issue 34)
        await pilot.press("c")
        await pilot.pause()
        assert isinstance(app.screen, ColumnPickerScreen)
        picker = app.screen.query_one(SelectionList)
        picker.select("placement")
        picker.deselect("partition")
        await pilot.press("enter")
        await pilot.pause()
        shown = headers(table)
        assert "placement" in shown and "partition" not in shown


async def test_wide_table_has_every_column_and_prices_only_where_known(make_app):
    app = make_app("paper-het-cluster")          # AWS instances: the catalog has their prices
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        pane = app.query_one(StrategyTable)
        assert set(pane.available_columns()) >= {"MFU", "$/hour", "$/1M tok"}
        shown = headers(pane)
        for header in ("partition", "placement", "tok/s", "iter", "memory"):      # those that fit first
            assert header in shown
        assert pane.table.max_scroll_x == 0
    app = make_app("dgx-a100-gpt3-13b")          # DGX nodes are bought: no price, so no columns (not zeros)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        pane = app.query_one(StrategyTable)
        assert "$/hour" not in pane.available_columns() and "$/1M tok" not in pane.available_columns()


def test_price_columns_appear_when_predictions_carry_prices():
    from dataclasses import replace

    from amp_tui.core.search.search import search

    result = search(load_scenario("dgx-a100-gpt3-13b"))          # no price for a DGX node
    assert not has_prices(result, "cost_per_hour_usd")
    priced = replace(result, strategies=(replace(result.strategies[0], cost_per_hour_usd=12.5),
                                         *result.strategies[1:]))
    assert has_prices(priced, "cost_per_hour_usd")
    assert has_prices(search(load_scenario("paper-homogeneous")), "cost_per_hour_usd")   # AWS prices


def test_abbreviations():
    assert abbreviate_partition((5, 3, 3, 7)) == "5/3/3/7"
    long = abbreviate_partition(tuple([1] * 31 + [9]))
    assert len(long) <= 16 and long.endswith("9 (32)") and "…" in long
    cluster = load_scenario("paper-het-cluster").cluster
    assert abbreviate_placement(cluster, None) == "rank"
    assert abbreviate_placement(cluster, (1, 0)) == "1g4dn>3p3"


async def open_what_ifs(app, pilot) -> SensitivityScreen:
    """Press w and wait (up to a minute) for the what-ifs' result."""
    await pilot.press("w")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, SensitivityScreen)
    for _ in range(1200):
        await pilot.pause(0.05)
        if screen.result is not None:
            break
    assert screen.result is not None
    return screen


async def test_what_if_screen_runs_and_charts(make_app):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        screen = await open_what_ifs(app, pilot)
        verdict = str(screen.query_one("#whatif-verdict").content)
        assert "most robust:" in verdict
        table = screen.query_one(DataTable)
        assert table.row_count == len(screen.result.cases)
        table.move_cursor(row=table.row_count - 1)
        await pilot.pause()
        chart = screen.query_one(WhatIfChart)
        assert chart.knob == "global batch size" and "global batch size" in chart.render().plain
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SensitivityScreen)


async def test_escape_cancels_a_running_what_if(make_app):
    app = make_app("bench-128-gpus")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        screen = SensitivityScreen(app.scenario)
        await app.push_screen(screen)          # mounted: its what-ifs run in a worker
        assert any(w.group == "sensitivity" and w.is_running for w in app.workers)
        screen.action_close()                  # what Escape does, before the what-ifs can finish
        await pilot.pause()
        assert not isinstance(app.screen, SensitivityScreen)
        for _ in range(20):        # stops at its next poll; the what-ifs alone take over 2 s here
            if not any(w.group == "sensitivity" and w.is_running for w in app.workers):
                break
            await pilot.pause(0.05)
        assert not any(w.group == "sensitivity" and w.is_running for w in app.workers)
        assert screen.result is None


async def test_save_scenario_writes_yaml_that_reopens(make_app, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        from amp_tui.tui import edits

        app.apply_scenario(edits.set_node_field(app.scenario, 0, "count", 6), "6 nodes")
        assert app.unsaved
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)
        app.screen.query_one(Input).value = "mine.yaml"
        await pilot.press("enter")
        await pilot.pause()
        assert not app.unsaved
        reopened = load_scenario(str(Path("mine.yaml")))
        assert reopened == app.scenario
        assert load_yaml_file("mine.yaml")["cluster"]["nodes"][0]["count"] == 6
        assert [p.name for p in tmp_path.iterdir()] == ["mine.yaml"]     # no temporary file left
        await pilot.press("ctrl+q")                     # saved: quits without asking
        await pilot.pause()
        assert not app.is_running


async def test_dashboard_ranks_as_plan_does_and_the_what_ifs_agree(make_app, monkeypatch):
    """Issue 28, majors 1 and 5: the dashboard's search is plan's (find_plans: idle nodes, then batch
    shares), and `w` starts from the ranking on screen. Before, the dashboard ranked without the
    batch-share pass (1x2x16 first where plan says 1x1x32 with shares) and the what-ifs searched the
    whole cluster only (1x8x2 as the top pick, though the table ranked 1x6x2 with a node idle first)."""
    from amp_tui.core.plans import sensitivity
    from amp_tui.core.search.planner import find_plans

    # Fewer factors keep it short; the core test (test_core_sensitivity) runs all 38 what-ifs.
    monkeypatch.setattr(sensitivity, "SPEED_FACTORS", (0.5, 1.5))
    monkeypatch.setattr(sensitivity, "BATCH_FACTORS", (2.0,))
    for preset in ("mixed-h100-a100-llama3-8b", "paper-het-cluster"):
        expected = find_plans(load_scenario(preset)).result.strategies[0].strategy
        app = make_app(preset)
        async with app.run_test(size=(160, 48)) as pilot:
            await settle(app, pilot)
            assert app.result.strategies[0].strategy == expected, preset
            if preset != "paper-het-cluster":
                continue
            screen = await open_what_ifs(app, pilot)
            assert screen.result.watched[0].strategy == expected
            assert all(t is None or t >= case.best_s * (1 - 1e-9)
                       for case in screen.result.cases for t in case.watched_s)
