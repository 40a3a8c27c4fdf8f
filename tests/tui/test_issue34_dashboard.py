"""Issue 34 (every figure says where it comes from) in the dashboard: one test per item, each failed
before its fix."""

from __future__ import annotations

from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.tui.app import AmpApp
from amp_tui.tui.widgets.strategy_table import StrategyTable

from .conftest import settle

MY_CLUSTER = {"name": "my-cluster", "cluster": {"nodes": [{"instance": "p4d.24xlarge", "count": 2},
                                                          {"instance": "g5.12xlarge", "count": 4}]},
              "model": {"preset": "llama2-13b"},
              "training": {"global_batch_size": 128, "precision": "bf16", "recompute": "full", "zero_stage": 1}}
ONE_NODE = {"cluster": {"nodes": [{"instance": "g4dn.12xlarge", "count": 1}]}, "model": {"preset": "gpt2-medium"},
            "training": {"global_batch_size": 32}}


# Minor: words ---------------------------------------------------------------------------------------
async def test_minor_one_node_is_not_1_nodes_and_the_micro_batch_count_is_b_as_in_the_cli():
    """Before: "4 GPUs on 1 nodes"; the Strategies table called the micro-batch count "µbs" (beside
    "mbs", the micro-batch size), `plan` "B"."""
    app = AmpApp(parse_scenario(ONE_NODE), show_timings=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        totals = str(app.query_one("#cluster-totals").content)
        assert ": 4 GPUs on 1 node (4 x T4)" in totals
        headers = [str(c.label).strip().rstrip("▲▼") for c in app.query_one(StrategyTable).table.columns.values()]
        assert "B" in headers and "µbs" not in headers and headers.index("B") == headers.index("mbs") + 1


async def test_minor_a_gpu_swapped_in_the_dashboard_drops_the_instance_price(make_app):
    """Before: the g4dn.12xlarge changed to A10G kept its price ($0.04 per million tokens), marked only
    by the '*' of a changed cell."""
    from amp_tui.tui import edits
    from amp_tui.tui.widgets.selected_pane import SelectedPane

    app = make_app("paper-het-cluster")
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        assert app.scenario.cluster.nodes[1].price_per_hour is not None
        app.apply_scenario(edits.set_node_field(app.scenario, 1, "gpu", "A10G"), "A10G")
        await settle(app, pilot)
        assert app.scenario.cluster.nodes[1].price_per_hour is None
        totals = str(app.query_one("#cluster-totals").content)
        note = "no price for cluster.nodes[1] (g4dn.12xlarge): its price is for T4s, not A10G"
        assert note in totals
        uses_it = [p for p in app.result.strategies if p.strategy.idle is None]
        assert uses_it and all(p.cost_per_hour_usd is None for p in uses_it)
        table = app.query_one(StrategyTable)           # its first row is the uniform baseline's
        table.table.move_cursor(row=next(i for i, r in enumerate(table.rows) if r.entry is uses_it[0]))
        await settle(app, pilot)
        assert note in "".join(str(static.content) for static in app.query_one(SelectedPane).query("Static"))


# Minor: the blocks edit's limit -------------------------------------------------------------------
def test_minor_the_blocks_edit_refuses_with_the_limit_it_then_accepts():
    """Before: 10000 blocks were refused as "at most 2,048", then 2,048 as "2,054 layers after
    repeats": the limit counts the model's other layers too."""
    import pytest

    from amp_tui.core.base.errors import SpecError
    from amp_tui.core.base.limits import MAX_LAYERS
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.tui import edits

    explicit = load_scenario("paper-homogeneous")          # 24 blocks and 6 other layers, listed
    family = parse_scenario({**ONE_NODE, "model": {"preset": "llama2-13b"}})     # 40 blocks and 2 others
    for scenario, edit, others in ((explicit, lambda s, v: edits.set_model_field(s, "num_layers", v), 6),
                                   (explicit, lambda s, v: edits.set_layer_field(s, 2, "repeat", v), 6),
                                   (family, lambda s, v: edits.set_model_field(s, "num_layers", v), 2)):
        most = MAX_LAYERS - others
        with pytest.raises(SpecError) as refused:
            edit(scenario, "10000")
        assert f"must be at most {most:,}" in str(refused.value) and f"{others} other layers" in str(refused.value)
        assert edit(scenario, str(most)).model.num_layers == MAX_LAYERS
        with pytest.raises(SpecError) as refused:
            edit(scenario, str(most + 1))
        assert f"must be at most {most:,}" in str(refused.value)


# Minor: the pin message after a node-count change -------------------------------------------------
async def test_minor_unpinning_after_a_node_count_change_says_why_in_words(make_app):
    """Before: "Unpinned: the pinned strategy no longer runs (strategy.tp*pp*dp: '1*6*2=12': must equal
    the GPU count it uses (16 of 20, the rest idle))"."""
    from amp_tui.tui import edits

    app = make_app("paper-het-cluster")
    said: list[str] = []
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        app.notify = lambda message, **kwargs: said.append(message)
        await pilot.press("4", "p")
        assert app.pinned is not None and app.pinned.strategy.label == "1x6x2" and app.pinned.strategy.idle
        app.apply_scenario(edits.set_node_field(app.scenario, 0, "count", 4), "4 nodes")
        await settle(app, pilot)
        assert app.pinned is None
        unpinned = [line for line in said if line.startswith("Unpinned")]
        assert unpinned == ["Unpinned 1x6x2 mbs 1, 1 node idle: its degrees make 12 GPUs, and on this cluster, with "
                            "that node idle, it would use 16 (pin one of the new ranking)"]


# Minor: the Strategies pane at 160x48 -------------------------------------------------------------
def screen_lines(app) -> list[str]:
    """The screen as text lines (from the SVG screenshot: each line's cells by their x)."""
    import html
    import re

    rows: dict[float, list[tuple[float, str]]] = {}
    for x, y, text in re.findall(r'<text[^>]*?x="([\d.]+)"[^>]*?y="([\d.]+)"[^>]*>([^<]*)</text>',
                                 app.export_screenshot()):
        rows.setdefault(float(y), []).append((float(x), html.unescape(text).replace("\xa0", " ")))
    return ["".join(text for _, text in sorted(cells)) for _, cells in sorted(rows.items())]


async def test_minor_the_unif_row_stays_in_view_and_every_column_shown_fits():
    """Before, at 160x48 on the README's cluster: the `unif` row scrolled out of the Strategies pane
    (its note stayed), the partition column was cut off ('partit') and placement never showed."""
    import re

    app = AmpApp(parse_scenario(MY_CLUSTER), show_timings=False, debounce_s=0.02)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        pane = app.query_one(StrategyTable)
        assert any(re.search(r"\bunif +\d+x\d+x\d+ ", line) for line in screen_lines(app))     # at rank 1
        await pilot.press("4", *["j"] * (len(app.result.strategies) - 1))      # to the last ranked row
        await settle(app, pilot)
        assert app.selected_index == len(app.result.strategies) - 1
        assert any(re.search(r"\bunif +\d+x\d+x\d+ ", line) for line in screen_lines(app))
        assert "placement" in pane._shown_columns and "partition" in pane._shown_columns
        assert pane.table.max_scroll_x == 0                  # nothing shown is cut off to the right
        await pilot.press("p")                               # (the comparison: a wider Strategies pane)
        await settle(app, pilot)
        assert "placement" in pane._shown_columns and pane.table.max_scroll_x == 0


# Minor: keys typed right after `e` ----------------------------------------------------------------
async def test_minor_keys_typed_right_after_e_reach_the_dialog(make_app):
    """Before: under load, '8' typed right after `e` (both in one read of the terminal) reached the
    dialog before its input had focus and was lost; Enter then applied the old value."""
    from textual import events

    from amp_tui.tui.widgets.cluster_pane import ClusterPane

    from .test_editing import column

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=column("count"))
        await pilot.pause()
        for key, character in (("e", "e"), ("8", "8"), ("enter", None)):     # queued together
            app.post_message(events.Key(key, character))
        await settle(app, pilot)
        assert app.scenario.cluster.nodes[0].count == 8


async def test_minor_an_empty_value_is_not_applied_and_refused(make_app):
    """Before: Enter on an emptied value applied it, and the refusal went to the status bar as an
    error; now the dialog stays open and says what it needs."""
    from textual.widgets import Input

    from amp_tui.tui.screens.edit_value import EditValueScreen
    from amp_tui.tui.widgets.cluster_pane import ClusterPane
    from amp_tui.tui.widgets.status_bar import StatusBar

    from .test_editing import column

    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=column("count"))
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)
        app.screen.query_one(Input).value = ""
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)         # still open, nothing applied
        assert "type a value" in app.screen.error_text and "Escape" in app.screen.error_text
        assert not app.query_one(StatusBar).error
        await pilot.press(*"6", "enter")
        await settle(app, pilot)
        assert app.scenario.cluster.nodes[0].count == 6
