"""The Serve view: solves on open, shows bars and figures, reruns live on a cluster edit, cancels."""

from amp_tui.serving.spec import load_serving_scenario
from amp_tui.tui.screens.serve import ServeApp, ServeScreen, serving_target
from amp_tui.tui.widgets.serve_bars import ServeBars


async def test_serve_view_solves_and_reruns_on_edit():
    app = ServeApp(load_serving_scenario("helix-single24-llama2-70b"), time_limit_s=3)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ServeScreen)
        assert screen.result is not None
        assert screen.result.served.decode_tokens_per_s > 0
        assert "decode" in str(screen.query_one("#serve-summary").render())
        assert "TTFT" in str(screen.query_one("#serve-summary").render())
        assert "█" in str(screen.query_one(ServeBars).render())
        before = screen.result.solution.upper_bound
        await pilot.press("g", "g", "minus")     # one T4 fewer
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.scenario.groups[2].count == 11
        assert len(screen.result.placement.count) == 23
        assert screen.result.solution.upper_bound <= before + 1e-6     # fewer machines: the bound cannot rise


async def test_main_app_opens_the_serve_view(app_factory=None):
    from amp_tui.core.spec.scenario import load_scenario
    from amp_tui.tui.app import AmpApp

    app = AmpApp(load_scenario("paper-homogeneous"), show_timings=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.press("v")
        await pilot.pause()
        assert isinstance(app.screen, ServeScreen)
        # it serves the scenario being edited: its model on its cluster, not a fixed preset
        assert app.screen.scenario.model.name == app.scenario.model.name
        assert [g.count for g in app.screen.scenario.groups] == [n.count for n in app.scenario.cluster.nodes]
        await app.workers.wait_for_complete()
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ServeScreen)


def test_ui_target_detection():
    assert serving_target("helix-geo3x24-llama2-70b") is not None
    assert serving_target("paper-homogeneous") is None


async def test_cancel_stops_a_running_solve_and_escape_keeps_the_only_view():
    app = ServeApp(load_serving_scenario("helix-geo3x24-llama2-70b"), time_limit_s=10)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ServeScreen) and screen.solving
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not screen.solving and screen.result is None
        assert "cancelled" in str(screen.query_one("#serve-summary").render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is screen


async def test_the_header_marks_the_picked_group_by_style_not_a_stray_character():
    app = ServeApp(load_serving_scenario("helix-single24-llama2-70b"), time_limit_s=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        screen = app.screen

        def picked():
            title = screen._title()
            assert ">" not in title.plain
            return [title.plain[span.start:span.end] for span in title.spans if "reverse" in str(span.style)]

        groups = screen.scenario.groups
        assert picked() == [f"{groups[0].count} x {groups[0].label}"]
        await pilot.press("g", "g")
        await pilot.pause()
        assert picked() == [f"{groups[2].count} x {groups[2].label}"]
