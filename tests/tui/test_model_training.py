"""Model and training edits through the panes."""

from __future__ import annotations

from textual.widgets import Input

from amp_tui.tui.screens.edit_value import EditValueScreen
from amp_tui.tui.screens.picker import PickerScreen
from amp_tui.tui.widgets.model_pane import LAYER_COLUMNS, ModelPane
from amp_tui.tui.widgets.training_pane import SETTINGS, TrainingPane

from .conftest import settle


def layer_column(header: str) -> int:
    return [c[0] for c in LAYER_COLUMNS].index(header)


def block_row(pane: ModelPane) -> int:
    groups = pane.scenario.model.groups
    index = next(i for i, layer in enumerate(groups) if layer.repeat > 1)
    return pane._rows.index((index, None))


async def test_layers_expand_duplicate_insert_delete(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("2")
        await pilot.pause()
        pane = app.query_one(ModelPane)
        table = pane.layers_table
        table.focus()
        table.move_cursor(row=block_row(pane))
        groups_before = len(app.scenario.model.groups)
        repeat = app.scenario.model.groups[2].repeat
        assert repeat == 24 and "block x 24" in str(table.get_cell_at((block_row(pane), 0)))
        rows_before = table.row_count
        await pilot.press("space")
        await pilot.pause()
        assert table.row_count == rows_before + 24
        await pilot.press("space")
        await pilot.pause()
        assert table.row_count == rows_before
        await pilot.press("c")
        await pilot.pause()
        assert len(app.scenario.model.groups) == groups_before + 1
        assert app.scenario.model.num_layers == 30 + 24
        await pilot.press("ctrl+z")
        await pilot.press("i")
        await pilot.pause()
        assert app.scenario.model.groups[3].name == "layer"
        await pilot.press("ctrl+z")
        table.move_cursor(row=0)
        await pilot.press("d")
        await pilot.pause()
        assert app.scenario.model.groups[0].name == "noop"
        await settle(app, pilot)
        assert app.result.scenario is app.scenario


async def test_change_repeat_count_and_refuse_bad_value(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("2")
        pane = app.query_one(ModelPane)
        table = pane.layers_table
        table.focus()
        table.move_cursor(row=block_row(pane), column=layer_column("x"))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)
        app.screen.query_one(Input).value = "twelve"
        await pilot.press("enter")
        await pilot.pause()
        assert "model.layers[2].repeat" in app.screen.error_text
        app.screen.query_one(Input).value = "12"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.model.groups[2].repeat == 12
        assert app.scenario.model.num_layers == 18
        await settle(app, pilot)
        assert app.result.scenario is app.scenario


async def test_family_hyperparameter_edit_and_layer_edit_goes_explicit(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app._preset_picked(("models", "gpt3-1.3b"))
        await settle(app, pilot)
        assert app.scenario.model.family == "gpt"
        await pilot.press("2")
        pane = app.query_one(ModelPane)
        shape = pane.shape_table
        shape.focus()
        headers = [c[0] for c in pane._shape_columns]
        shape.move_cursor(row=0, column=headers.index("layers"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "12"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.model.shape["num_layers"] == 12
        # heads must divide hidden: refused inline
        shape.move_cursor(row=0, column=headers.index("heads"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "7"
        await pilot.press("enter")
        await pilot.pause()
        assert "must divide hidden_size" in app.screen.error_text
        await pilot.press("escape")
        # editing a layer of a family model turns it into explicit layers
        table = pane.layers_table
        table.focus()
        table.move_cursor(row=block_row(pane), column=layer_column("params"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "1e6"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.model.family is None
        assert app.scenario.model.groups[1].params == 1e6
        await settle(app, pilot)
        assert app.result.scenario is app.scenario


async def test_training_settings(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        pane = app.query_one(TrainingPane)
        keys = [s.key for s in SETTINGS]
        pane.table.focus()
        # a yes/no setting toggles
        pane.table.move_cursor(row=keys.index("allow_cross_node_tp"))
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.search.allow_cross_node_tp is True
        # a choice opens a list
        pane.table.move_cursor(row=keys.index("precision"))
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, PickerScreen)
        await pilot.press("down", "down", "enter")   # fp32: the preset's T4s have no bf16
        await pilot.pause()
        assert app.scenario.training.precision == "fp32"
        pane.table.move_cursor(row=keys.index("zero_stage"))
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        assert app.scenario.training.zero_stage == 2
        # numbers go through the edit dialog
        pane.table.move_cursor(row=keys.index("global_batch_size"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "0"
        await pilot.press("enter")
        await pilot.pause()
        assert "must be at least 1" in app.screen.error_text
        app.screen.query_one(Input).value = "64"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.training.global_batch_size == 64
        pane.table.move_cursor(row=keys.index("top"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "5"
        await pilot.press("enter")
        await settle(app, pilot)
        assert len(app.result.strategies) == 5
        assert app.result.scenario is app.scenario


async def test_every_training_field_and_search_option_is_a_row(make_app):
    """Techniques the model honours (framework, SP, CP, interleaving, fp8 scaling...) and whether
    every GPU must be used are set from the keyboard, not only in YAML."""
    from dataclasses import fields

    from amp_tui.core.spec.scenario import AUTO, Training
    keys = [s.key for s in SETTINGS]
    named = {"runtime_reserve_bytes": "runtime_reserve"}        # (the override of the optimizer's bytes stays YAML's)
    assert {named.get(f.name, f.name) for f in fields(Training)} - {"state_bytes_override"} <= set(keys)
    assert {"use_all_gpus", "allow_cross_node_tp", "reorder_nodes", "top", "max_micro_batch_size"} <= set(keys)
    app = make_app()
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(app, pilot)
        await pilot.press("3")
        await pilot.pause()
        pane = app.query_one(TrainingPane)
        pane.table.focus()
        pane.table.move_cursor(row=keys.index("use_all_gpus"))
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.search.use_all_gpus is True

        async def pick(key: str, value) -> None:
            """Open the setting's list (its cursor on the current value) and move to `value`."""
            setting = SETTINGS[keys.index(key)]
            current = getattr(app.scenario.training, key)
            pane.table.move_cursor(row=keys.index(key))
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, PickerScreen)
            steps = setting.choices.index(value) - setting.choices.index(current)
            await pilot.press(*(["down"] * steps if steps >= 0 else ["up"] * -steps), "enter")
            await pilot.pause()

        await pick("framework", "fsdp")
        assert app.scenario.training.framework == "fsdp"
        await pick("framework", "pytorch")
        assert app.scenario.training.framework == "pytorch"
        await pick("compile", "cudagraphs")
        assert app.scenario.training.compile == "cudagraphs"
        await pick("compile", True)
        assert app.scenario.training.compile is True
        await pick("sequence_parallel", AUTO)
        assert app.scenario.training.sequence_parallel == AUTO
        pane.table.move_cursor(row=keys.index("virtual_stages"))
        await pilot.press("enter")
        await pilot.pause()
        app.screen.query_one(Input).value = "0"
        await pilot.press("enter")
        await pilot.pause()
        assert "virtual_stages" in app.screen.error_text and "at least 1" in app.screen.error_text
        app.screen.query_one(Input).value = "auto"
        await pilot.press("enter")
        await pilot.pause()
        assert app.scenario.training.virtual_stages == AUTO
        # fp8 scaling needs fp8: refused inline, the scenario unchanged
        await pick("fp8_scaling", "rowwise")
        assert app.scenario.training.fp8_scaling == "tensorwise"
        await settle(app, pilot)
        assert app.result.scenario is app.scenario


async def test_objective_and_budget_from_the_keyboard(make_app):
    """o ranks by cost per token; b keeps only strategies within a budget in dollars per hour (a bad
    one is refused in the dialog, empty removes it)."""
    app = make_app()        # 4 x g4dn.12xlarge, $3.912 an hour each
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert max(p.strategy.num_gpus for p in app.result.strategies) == 16     # the whole cluster
        await pilot.press("o")
        await settle(app, pilot)
        assert app.objective.kind == "cost"
        costs = [p.iteration_time_s * p.cost_per_hour_usd for p in app.result.strategies]
        assert costs == sorted(costs)
        await pilot.press("b")
        await pilot.pause()
        app.screen.query_one(Input).value = "-1"
        await pilot.press("enter")
        await pilot.pause()
        assert "budget" in app.screen.error_text and app.objective.budget_usd_per_hour is None
        app.screen.query_one(Input).value = "$8"
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.objective.budget_usd_per_hour == 8.0 and app.objective.kind == "cost"
        assert app.result.strategies and all(p.cost_per_hour_usd <= 8.0 for p in app.result.strategies)
        await pilot.press("b")
        await pilot.pause()
        assert app.screen.query_one(Input).value == "8"
        app.screen.query_one(Input).value = ""
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.objective.budget_usd_per_hour is None
