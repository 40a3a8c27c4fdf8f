"""Editing: valid edits rerun the search, invalid ones are refused inline, undo reverts."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from amp_tui.tui.screens.edit_value import EditValueScreen
from amp_tui.tui.widgets.cluster_pane import COLUMNS, ClusterPane
from amp_tui.tui.widgets.status_bar import StatusBar

from .conftest import settle


def column(header: str) -> int:
    return [c[0] for c in COLUMNS].index(header)


async def open_cluster_editor(app, pilot, header: str) -> EditValueScreen:
    table = app.query_one(ClusterPane).table
    table.focus()
    table.move_cursor(row=0, column=column(header))
    await pilot.press("enter")
    await pilot.pause()
    assert isinstance(app.screen, EditValueScreen)
    return app.screen


async def submit(app, pilot, text: str) -> None:
    app.screen.query_one(Input).value = text
    await pilot.press("enter")
    await pilot.pause()


async def test_editing_network_bandwidth_reruns_the_search(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        before = app.result
        await open_cluster_editor(app, pilot, "network")
        await submit(app, pilot, "1 Gbps")
        assert not isinstance(app.screen, EditValueScreen)
        assert app.scenario.cluster.nodes[0].inter_node_bandwidth == pytest.approx(1e9 / 8)
        await settle(app, pilot)
        assert app.result is not before
        assert app.result.scenario is app.scenario
        assert app.applied_generations == [1, 2]
        # a 50x slower network makes data parallelism expensive: the best strategy gets slower
        assert app.result.strategies[0].iteration_time_s > before.strategies[0].iteration_time_s
        cell = app.query_one(ClusterPane).table.get_cell_at((0, column("network")))
        assert "1 Gbps" in str(cell)


INVALID = [
    ("count", "abc", "expected a number"),
    ("count", "0", "must be at least 1"),
    ("/node", "2.5", "expected a whole number"),
    ("network", "-5 Gbps", "greater than 0"),
    ("intra", "0", "greater than 0"),
    ("network", "fast", "expected a bandwidth like '50 Gbps'"),
]


async def test_invalid_values_are_refused_inline(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        original, generation = app.scenario, app._generation
        for header, text, expected in INVALID:
            dialog = await open_cluster_editor(app, pilot, header)
            await submit(app, pilot, text)
            assert app.screen is dialog, (header, text)  # still open, showing why
            assert expected in dialog.error_text, (header, text, dialog.error_text)
            assert "cluster.nodes[0]" in dialog.error_text
            assert app.scenario is original
            assert app.query_one(StatusBar).error == dialog.error_text  # the status line says it too
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, EditValueScreen)
        assert app.scenario is original and app._generation == generation


async def test_refused_message_edit_keeps_scenario(make_app):
    """A dict proposed by a pane that does not parse is refused by the app itself."""
    from amp_tui.tui.messages import ScenarioEdited

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        original = app.scenario
        data = original.to_dict()
        data["cluster"]["nodes"][0]["count"] = "many"
        app.post_message(ScenarioEdited(data, "bad count"))
        await pilot.pause()
        assert app.scenario is original
        assert "expected a number" in app.query_one(StatusBar).error


async def test_quick_edits_apply_only_the_last_generation(make_app):
    app = make_app(debounce_s=2.0)   # three presses always land inside one debounce, however loaded the machine
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.query_one(ClusterPane).table.focus()
        await pilot.press("plus", "plus", "plus")
        assert app.scenario.cluster.nodes[0].count == 7
        assert app.results_stale  # old results still shown, marked stale
        assert app.query_one("#strategies-pane").has_class("-stale")
        await settle(app, pilot)
        assert app._generation == 4
        assert app.applied_generations == [1, 4]
        assert app.result.scenario is app.scenario
        assert app.result.scenario.cluster.num_gpus == 28
        assert not app.query_one("#strategies-pane").has_class("-stale")


async def test_stale_results_are_dropped(make_app):
    """A result delivered for an older generation is never applied."""
    from amp_tui.tui.messages import SearchDone

    # The edit's search waits out a debounce no loaded machine reaches before the check (a 1 s one
    # could pass, and its result arrive, before the pause ended); a search started at once follows.
    app = make_app(debounce_s=3600.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        current = app.result
        app.post_message(SearchDone(app._generation - 1, current, 0.0))
        app.query_one(ClusterPane).table.focus()
        await pilot.press("plus")
        stale_result = app.result
        app.post_message(SearchDone(app._generation - 1, stale_result, 0.0))
        await pilot.pause()
        assert app.applied_generations == [1] and app._generation == 2
        app.start_search(0.0)           # (generation 3: the edit's search, now, not after the debounce)
        await settle(app, pilot)
        assert app.applied_generations == [1, 3]


async def test_undo_reverts_edits_in_order(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        original = app.scenario
        app.query_one(ClusterPane).table.focus()
        await pilot.press("plus")
        await settle(app, pilot)
        after_one = app.scenario
        await pilot.press("minus", "minus")
        await settle(app, pilot)
        assert app.scenario.cluster.nodes[0].count == 3
        await pilot.press("ctrl+z")
        assert app.scenario.cluster.nodes[0].count == 4
        await pilot.press("ctrl+z")
        assert app.scenario == after_one
        await pilot.press("ctrl+z")
        assert app.scenario == original
        await pilot.press("ctrl+z")  # nothing left: no change, no crash
        assert app.scenario == original
        await settle(app, pilot)
        assert app.result.scenario is app.scenario


async def test_count_cannot_drop_below_one(make_app):
    app = make_app("paper-het-cluster")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=1)
        assert app.scenario.cluster.nodes[1].count == 1
        original = app.scenario
        await pilot.press("minus")
        await pilot.pause()
        assert app.scenario is original


async def test_add_and_remove_node_groups(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.query_one(ClusterPane).table.focus()
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*"p4d.24")
        await pilot.press("enter")
        await pilot.pause()
        assert [g.instance for g in app.scenario.cluster.nodes] == ["g4dn.12xlarge", "p4d.24xlarge"]
        await settle(app, pilot)
        assert app.result.scenario.cluster.num_gpus == 24
        # a custom node copies the selected group's hardware without the instance name
        await pilot.press("a")
        await pilot.pause()
        await pilot.press(*"custom", "enter")
        await pilot.pause()
        assert len(app.scenario.cluster.nodes) == 3 and app.scenario.cluster.nodes[2].instance is None
        table = app.query_one(ClusterPane).table
        table.move_cursor(row=1)
        await pilot.press("d")
        await pilot.pause()
        assert [g.instance for g in app.scenario.cluster.nodes] == ["g4dn.12xlarge", None]
        table.move_cursor(row=0)
        await pilot.press("d")
        await pilot.press("d")  # the last group stays
        await pilot.pause()
        assert len(app.scenario.cluster.nodes) == 1
        await settle(app, pilot)


async def test_change_gpu_type(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=column("GPU"))
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press(*"A10G", "enter")
        await pilot.pause()
        assert app.scenario.cluster.nodes[0].gpu.name == "A10G"
        assert "A10G*" in str(table.get_cell_at((0, column("GPU"))))
        await settle(app, pilot)
        assert isinstance(app.focused, DataTable)


async def test_selection_follows_the_best_or_keeps_a_picked_strategy(make_app):
    from amp_tui.tui import edits
    from amp_tui.tui.widgets.strategy_table import StrategyTable

    app = make_app("paper-het-cluster")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.apply_scenario(edits.set_node_field(app.scenario, 0, "inter_node_bandwidth", "1 Gbps"), "slow network")
        await settle(app, pilot)
        assert app.selected_index == 0  # the best stays selected, whichever strategy it now is
        table = app.query_one(StrategyTable).table
        table.focus()
        await pilot.press("down", "down")
        await pilot.pause()
        picked = app.selected_prediction().strategy
        # An edit after which the picked strategy is still ranked, on another row
        app.apply_scenario(edits.set_node_field(app.scenario, 0, "inter_node_bandwidth", "1.2 Gbps"), "faster")
        await settle(app, pilot)
        kept = app.selected_prediction().strategy
        assert (kept.tp, kept.pp, kept.dp, kept.micro_batch_size) == (
            picked.tp, picked.pp, picked.dp, picked.micro_batch_size)
        assert app.query_one(StrategyTable).rows[table.cursor_row].index == app.selected_index
