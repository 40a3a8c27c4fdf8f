"""Issue 14's numbered defects, one test each (each failed before its fix)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from textual import events
from textual.widgets import DataTable, Input, TextArea

from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.tui import edits
from amp_tui.tui.screens.edit_value import EditValueScreen
from amp_tui.tui.widgets.cluster_pane import COLUMNS, ClusterPane
from amp_tui.tui.widgets.model_pane import ModelPane
from amp_tui.tui.widgets.selected_pane import SelectedPane
from amp_tui.tui.widgets.status_bar import StatusBar
from amp_tui.tui.widgets.strategy_table import StrategyTable

from .conftest import settle


def column(header: str) -> int:
    return [c[0] for c in COLUMNS].index(header)


def table_rows(table: DataTable) -> list[tuple[str, ...]]:
    return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


# 1 ------------------------------------------------------------------------------------------------
async def test_1_rows_can_be_told_apart(make_app):
    app = make_app("bench-1024-gpus")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        rows = [row[1:] for row in table_rows(app.query_one(StrategyTable).table)]   # all but the rank
        assert len(rows) > 5
        assert len(set(rows)) == len(rows), "two rows identical in every column but the rank"


# 2 ------------------------------------------------------------------------------------------------
async def test_2_export_dialog_says_up_front_the_megatron_split_differs(make_app):
    pytest.importorskip("amp_tui.core.plans.exports")
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.strategy import Strategy
    from amp_tui.tui.screens.export_picker import ExportScreen

    # AMP's GPT-2 profile has layers Megatron's GPT does not name (noop, final norm), so a split with
    # unequal middle stages runs as the nearest one the first/last-stage flags can say.
    scenario = load_scenario("paper-het-cluster")
    prediction = evaluate(scenario, Strategy(1, 4, 4, 1, (9, 3, 8, 10), (0, 1)))
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        screen = ExportScreen(scenario, prediction)
        app.push_screen(screen)
        await pilot.pause()
        warning = str(screen.query_one("#export-warning").content)
        assert screen.query_one("#export-warning").display
        assert "Megatron-LM runs another split" in warning and ("% slower" in warning or "%)" in warning)


# 3 ------------------------------------------------------------------------------------------------
def test_3_editing_one_copy_splits_the_group():
    scenario = load_scenario("paper-homogeneous")
    group = next(i for i, g in enumerate(scenario.model.groups) if g.repeat == 24)
    changed = edits.set_layer_field(scenario, group, "flops", 1.0, copy=4)
    repeats = [g.repeat for g in changed.model.groups[group:group + 3]]
    assert repeats == [4, 1, 19]
    assert changed.model.groups[group + 1].flops == 1.0
    assert changed.model.groups[group].flops == scenario.model.groups[group].flops
    assert changed.model.num_layers == scenario.model.num_layers
    duplicated = edits.duplicate_layer(scenario, group, copy=2)
    assert duplicated.model.num_layers == scenario.model.num_layers + 1


# 4 ------------------------------------------------------------------------------------------------
async def test_4_no_candidates_says_why_and_what_to_change(make_app):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        app.apply_scenario(edits.set_node_field(app.scenario, 0, "count", 37), "37 nodes")  # 148 GPUs
        app.apply_scenario(edits.set_node_field(app.scenario, 0, "gpus_per_node", 1), "1 GPU per node")
        # every GPU required: leaving nodes idle would otherwise find plans on 32 of the 37
        app.apply_scenario(replace(app.scenario, search=replace(app.scenario.search, use_all_gpus=True)), "all GPUs")
        await settle(app, pilot)
        assert app.result.stats.candidates == 0
        note = str(app.query_one("#strategies-note").content)
        assert "fits in memory" not in note
        assert "global batch" in note and "37" in note
        assert "nothing fits in memory" not in str(app.query_one(StatusBar).render())


# 5 ------------------------------------------------------------------------------------------------
async def test_5_a_burst_of_eight_plus_presses_adds_eight_nodes(make_app):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        before = app.scenario.cluster.nodes[0].count
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=column("count"))
        # One burst, as keys batched over SSH arrive: every key is queued before the first is handled.
        for _ in range(8):
            app.post_message(events.Key("plus", "+"))
        await settle(app, pilot)
        assert app.scenario.cluster.nodes[0].count == before + 8


# 6 ------------------------------------------------------------------------------------------------
async def test_6_time_chart_legend_is_whole_at_160x48(make_app):
    from amp_tui.tui.widgets.time_chart import PARTS, TimeChart

    app = make_app("paper-het-cluster")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        chart = app.query_one(TimeChart)
        drawn = chart.render().plain
        for name, _, _ in PARTS:
            assert name in drawn
        assert all(len(line) <= chart.content_size.width for line in drawn.splitlines())


# 7 ------------------------------------------------------------------------------------------------
def test_7_stage_bar_headers_do_not_run_together():
    from amp_tui.core.search.search import search
    from amp_tui.tui.widgets.stage_bars import stage_lines

    prediction = search(load_scenario("paper-het-cluster")).strategies[0]
    for width in (40, 60, 62, 80, 120):
        head = stage_lines(prediction, width).plain.splitlines()[0]
        assert "bottleneckmemory" not in head and "bottleneck memory" in " ".join(head.split())


# 8 ------------------------------------------------------------------------------------------------
async def test_8_names_follow_edits(make_app):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=column("count"))
        await pilot.press("plus")
        await settle(app, pilot)
        cluster = app.scenario.cluster
        totals = str(app.query_one("#cluster-totals").content)
        assert cluster.name.startswith("4x-p3.8xlarge")
        assert totals.startswith(cluster.name) and "16 x V100" in totals
        assert app.scenario.name != "paper-het-cluster" and app.scenario.description == ""
        assert cluster.name in app.scenario.name


# 9 ------------------------------------------------------------------------------------------------
async def test_9_stale_results_look_stale_in_table_and_selected_pane(make_app):
    app = make_app(debounce_s=5.0)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        app.apply_scenario(edits.set_training_field(app.scenario, "schedule", "gpipe"), "gpipe")
        await pilot.pause()
        assert app.query_one(SelectedPane).has_class("-stale")
        assert "stale" in str(app.query_one("#strategies-note").content)
        assert "stale" in str(app.query_one("#selected-stale").content)
        app.workers.cancel_all()


# 10 -----------------------------------------------------------------------------------------------
async def test_10_export_dialog_scrolls_the_preview_without_changing_format(make_app):
    pytest.importorskip("amp_tui.core.plans.exports")
    from amp_tui.tui.screens.export_picker import ExportScreen

    app = make_app("paper-het-cluster")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("x")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ExportScreen)
        before = screen.fmt
        await pilot.press("pagedown", "end", "tab")
        await pilot.pause()
        assert screen.fmt == before
        assert screen.query_one(TextArea).scroll_y > 0


# 11 -----------------------------------------------------------------------------------------------
def test_11_the_default_model_takes_hyperparameter_edits():
    scenario = load_scenario("paper-homogeneous")
    assert not scenario.model.family
    changed = edits.set_model_field(scenario, "num_layers", 12)
    assert changed.model.shape["num_layers"] == 12
    assert sum(1 for layer in changed.model.layers if layer.kind == "block") == 12


# 12 -----------------------------------------------------------------------------------------------
async def test_12_long_errors_are_whole_and_toasts_do_not_cover_the_status(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(app, pilot)
        message = "cluster.nodes[0].inter_node_bandwidth: 'fast': expected a bandwidth like '50 Gbps' or '25 GB/s'"
        app.refuse(message)
        await pilot.pause()
        status = app.query_one(StatusBar)
        assert status.size.height >= 2
        rendered = " ".join(str(status.render()).split())
        assert "'25 GB/s'" in rendered
        from textual.widgets._toast import Toast

        await pilot.pause(0.3)
        toasts = list(app.screen.query(Toast))
        assert toasts
        for toast in toasts:
            assert toast.region.bottom <= status.region.y


# 13 -----------------------------------------------------------------------------------------------
async def test_13_implausible_values_warn_inline(make_app):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=column("network"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "1e9 Gbps"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen), "the first Enter only warns"
        assert "implausible" in app.screen.error_text.lower()
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, EditValueScreen)
        assert app.scenario.cluster.nodes[0].inter_node_bandwidth == pytest.approx(1e18 / 8)
        before = load_scenario("paper-homogeneous")
        batch_warning = edits.plausibility_warning(edits.set_training_field(before, "global_batch_size", 33), before)
        assert "33" in batch_warning and "dp" in batch_warning


# 14 -----------------------------------------------------------------------------------------------
def test_14_units_and_precision_are_consistent():
    from amp_tui.tui.format import format_seconds
    from amp_tui.tui.widgets.cluster_pane import instance_items

    assert format_seconds(1.1) == "1.10 s" and format_seconds(1.17) == "1.17 s"
    assert format_seconds(0.0) == "0 s"
    for item in instance_items()[1:]:
        assert "GB/s" not in item.detail.split("(")[0], item.detail


# 15 -----------------------------------------------------------------------------------------------
async def test_15_quit_keeps_unsaved_edits_and_redo_works(make_app, tmp_path, monkeypatch):
    monkeypatch.setenv("AMP_TUI_STATE_DIR", str(tmp_path))
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        original = app.scenario
        app.apply_scenario(edits.set_node_field(original, 0, "count", 5), "5 nodes")
        await pilot.press("ctrl+z")
        assert app.scenario == original
        await pilot.press("ctrl+y")
        assert app.scenario.cluster.nodes[0].count == 5
        edited = app.scenario
        await pilot.press("ctrl+q")         # quits at once (issue 13), and the edits are not lost
        await pilot.pause()
    kept = list(tmp_path.glob("unsaved-*.yaml"))
    assert len(kept) == 1 and load_scenario(str(kept[0])) == edited


# 16 -----------------------------------------------------------------------------------------------
async def test_16_results_get_the_larger_share_at_160x48(make_app):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        results = app.query_one("#results")
        editors = app.query_one("#tabs")
        assert results.size.width > editors.size.width
        headers = [str(c.label).strip() for c in app.query_one(StrategyTable).table.columns.values()]
        assert "partition" in headers and "tok/s" in headers
        assert "no partitio" not in str(app.query_one("#strategies-note").content)


async def test_3_in_the_model_pane_a_copy_row_edits_that_copy_alone(make_app):
    from amp_tui.tui.widgets.model_pane import LAYER_COLUMNS

    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        pane = app.query_one(ModelPane)
        table = pane.layers_table
        table.focus()
        group = next(i for i, g in enumerate(app.scenario.model.groups) if g.repeat == 24)
        row = pane._rows.index((group, None))
        table.move_cursor(row=row)
        await pilot.press("space")                     # expand: copies #1..#24 follow
        await pilot.pause()
        flops = [c[0] for c in LAYER_COLUMNS].index("FLOPs")
        table.move_cursor(row=row + 5, column=flops)   # copy #5
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)
        assert "copy #5" in app.screen._title and "4 + 1 + 19" in app.screen._hint
        app.screen.query_one(Input).value = "1e9"
        await pilot.press("enter")
        await pilot.pause()
        repeats = [g.repeat for g in app.scenario.model.groups[group:group + 3]]
        assert repeats == [4, 1, 19] and app.scenario.model.groups[group + 1].flops == 1e9
