"""Issue 28 (a newcomer's audit) in the dashboard: one test per item, each failed before its fix."""

from __future__ import annotations

from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.tui.app import AmpApp
from amp_tui.tui.widgets.status_bar import StatusBar

from .conftest import settle

TOO_BIG = {"cluster": {"preset": "4x-g4dn.12xlarge"}, "model": {"preset": "llama3.1-405b"},
           "training": {"global_batch_size": 512, "precision": "fp16"}}


# Major 2 ------------------------------------------------------------------------------------------
async def test_major_2_a_model_too_big_for_the_cluster_says_so(make_app):
    """Before: '16 GPUs cannot be split as tp x pp x dp ... Try a global batch of 513 or 15 GPUs'."""
    app = AmpApp(parse_scenario(TOO_BIG), show_timings=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        note = str(app.query_one("#strategies-note").content)
        assert "too big for this cluster" in note and "5.91 TiB" in note
        assert "cannot be split" not in note and "Try a global batch" not in note
        assert "too big for the cluster" in str(app.query_one(StatusBar).render())


# Major 4 ------------------------------------------------------------------------------------------
async def test_major_4_the_export_dialog_says_does_not_fit_in_its_header(make_app):
    """Before: the Megatron export wrote a split predicted to run out of memory and said so only at the
    end of its notes."""
    from amp_tui.core.search.evaluate import evaluate
    from amp_tui.core.spec.strategy import Strategy
    from amp_tui.tui.screens.export_picker import ExportScreen

    from tests.core.core_builders import adapter_scenario

    scenario = adapter_scenario(heavy_params=6e8)
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        screen = ExportScreen(scenario, evaluate(scenario, Strategy(1, 2, 1, 1, (5, 6), (0,))))
        app.push_screen(screen)
        await pilot.pause()
        assert screen.fmt == "megatron" and screen.query_one("#export-warning").display
        assert "Does not fit" in str(screen.query_one("#export-warning").content)
        assert "does not fit" in str(screen._format_label("megatron"))
        assert "# WARNING: does not fit" in screen.query_one("#export-text").text.split("MEGATRON_ARGS=(")[0]


# Minor 5, 7, 19 -----------------------------------------------------------------------------------
async def test_minors_5_7_19_help_says_what_ctrl_q_does_and_lists_calibrate_and_stays_in_the_footer(make_app):
    """ctrl+q quits at once and keeps unsaved edits in a recovery file (the help said it asks first);
    C (calibrate) was in neither the help nor the footer; at 80 columns the footer dropped `? Help`."""
    from amp_tui.tui.screens.help import SECTIONS
    from amp_tui.tui.widgets.key_footer import KeyFooter

    keys = dict(SECTIONS[0][1])
    assert "asks first" not in keys["ctrl+q"] and "recovery file" in keys["ctrl+q"]
    assert "calibrate" in keys["C"]
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        line = app.query_one(KeyFooter).render().plain
        assert len(line) <= 80 and "? Help" in line[-30:] and "palette" in line[-30:]
    async with make_app().run_test(size=(200, 48)) as pilot:
        await settle(pilot.app, pilot)
        assert "Calibrate" in pilot.app.query_one(KeyFooter).render().plain


# Minor 6 ------------------------------------------------------------------------------------------
async def test_minor_6_the_palette_names_every_action(make_app):
    from amp_tui.tui.widgets.strategy_table import StrategyTable

    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        commands = {command.title: command for command in app.get_system_commands(app.screen)}
        names = " ".join(commands)
        for action in ("What-if", "Serve", "Calibrate", "Objective", "Budget", "Save scenario", "Redo", "Pin", "Sort",
                       "Filter", "Columns"):
            assert action in names, action
        table = app.query_one(StrategyTable)
        before = table.sort_column
        commands["Sort (s, in Strategies)"].callback()
        await pilot.pause()
        assert table.sort_column != before


# Minor 9 ------------------------------------------------------------------------------------------
async def test_minor_9_e_on_the_mem_column_edits_the_gpu_memory(make_app):
    from textual.widgets import Input

    from amp_tui.tui.screens.edit_value import EditValueScreen
    from amp_tui.tui.widgets.cluster_pane import COLUMNS, ClusterPane

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        table.focus()
        table.move_cursor(row=0, column=[c[0] for c in COLUMNS].index("mem"))
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, EditValueScreen)
        app.screen.query_one(Input).value = "32 GiB"
        await pilot.press("enter")
        await settle(app, pilot)
        gpu = app.scenario.cluster.nodes[0].gpu
        assert gpu.memory_bytes == 32 * 2**30 and 0.9 < gpu.usable_memory_bytes / gpu.memory_bytes < 1


# Minor 10 -----------------------------------------------------------------------------------------
async def test_minor_10_an_accepted_budget_clears_the_refused_ones_error_and_shows(make_app):
    from textual.widgets import Input

    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        await pilot.press("b")
        await pilot.pause()
        app.screen.query_one(Input).value = "-3"
        await pilot.press("enter")
        await pilot.pause()
        assert app.status.error          # refused, inline and in the status line
        app.screen.query_one(Input).value = "8"
        await pilot.press("enter")
        await settle(app, pilot)
        status = app.query_one(StatusBar).render().plain
        assert not app.status.error and "within $8.00/hour" in status


# Minor 11 -----------------------------------------------------------------------------------------
def test_minor_11_huge_hidden_sizes_and_batches_get_the_plausibility_warning_and_times_read():
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.tui import edits
    from amp_tui.tui.format import format_seconds

    scenario = load_scenario("mixed-h100-a100-llama3-8b")
    wide = edits.apply(scenario, lambda data: data["model"].update(hidden_size=10**9 // 32 * 32, num_heads=32))
    assert "Implausible hidden size" in edits.plausibility_warning(wide, scenario)
    big = scenario.with_training(global_batch_size=10**9)
    assert "Implausible global batch" in edits.plausibility_warning(big, scenario)
    assert format_seconds(275502992) == "8.73 years" and format_seconds(7300) == "2.03 h"


# Minor 13 -----------------------------------------------------------------------------------------
async def test_minor_13_a_pick_within_the_memory_band_is_marked(make_app):
    from amp_tui.core.plans.confidence import MEMORY_BAND, memory_at_risk
    from amp_tui.tui.widgets.strategy_table import StrategyTable

    app = make_app("mixed-a100-a10g-llama2-13b")      # 39.3 of 39.6 GiB among the top picks
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        risky = [i for i, p in enumerate(app.result.strategies) if memory_at_risk(p)]
        assert risky
        stage = app.result.strategies[risky[0]].tightest_stage
        assert stage.memory.total_bytes * (1 + MEMORY_BAND) > stage.capacity_bytes
        table = app.query_one(StrategyTable)
        memory = [str(c.label).strip() for c in table.table.columns.values()].index("memory")
        row = next(i for i, r in enumerate(table.rows) if r.entry is app.result.strategies[risky[0]])
        assert str(table.table.get_row_at(row)[memory]).endswith("!")
        assert "may not fit" in str(app.query_one("#strategies-note").content)


# Minor 16 -----------------------------------------------------------------------------------------
async def test_minor_16_the_export_preview_never_wraps_a_comment_onto_a_line_of_its_own(make_app):
    from textual.widgets import TextArea

    from amp_tui.tui.screens.export_picker import ExportScreen

    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        screen = ExportScreen(app.result.scenario, app.result.strategies[0])
        app.push_screen(screen)
        await pilot.pause()
        area = screen.query_one(TextArea)
        assert max(len(line) for line in area.text.splitlines()) > area.content_size.width   # long lines exist
        assert not area.soft_wrap and area.wrapped_document.height == area.document.line_count


# Minor 18 -----------------------------------------------------------------------------------------
def test_minor_18_the_chart_colours_are_far_apart():
    from amp_tui.tui.widgets.time_chart import PARTS

    def rgb(index: int) -> tuple[int, int, int]:     # the xterm 256-colour cube
        steps = (0, 95, 135, 175, 215, 255)
        index -= 16
        return steps[index // 36], steps[index // 6 % 6], steps[index % 6]

    colours = [rgb(code) for name, code, _ in PARTS if name != "idle (bubble)"]
    closest = min(sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
                  for i, a in enumerate(colours) for b in colours[i + 1:])
    assert closest >= 150
