"""Snapshots of the main screen: wide (120x40, inputs beside results) and compact (80x24, tabs).

Timings are hidden (`show_timings=False`) so the pictures only change when the screen or the
predictions do. After a deliberate change to either, regenerate with
`python -m pytest tests/tui/test_snapshots.py --snapshot-update` and look at the SVGs.
"""

from __future__ import annotations

from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui.app import AmpApp

from .conftest import settle


def snapshot_app(preset: str = "paper-homogeneous") -> AmpApp:
    return AmpApp(load_scenario(preset), show_timings=False, debounce_s=0.0)


async def wait_for_results(pilot) -> None:
    await settle(pilot.app, pilot)


def test_main_screen_wide(snap_compare):
    assert snap_compare(snapshot_app("paper-het-cluster"), terminal_size=(120, 40), run_before=wait_for_results)


def test_main_screen_compact(snap_compare):
    assert snap_compare(snapshot_app(), terminal_size=(80, 24), run_before=wait_for_results)


def test_selected_strategy_tab_compact(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot.app, pilot)
        await pilot.press("5")
        await pilot.pause()

    assert snap_compare(snapshot_app("paper-het-cluster"), terminal_size=(80, 24), run_before=run_before)


async def pin_and_move(pilot) -> None:
    """Pin the best strategy, move to the second: the Selected pane compares them."""
    await settle(pilot.app, pilot)
    await pilot.press("4", "p", "j")
    await settle(pilot.app, pilot)
    pilot.app.clear_notifications()
    await pilot.pause()


def test_compare_view_wide(snap_compare):
    assert snap_compare(snapshot_app("paper-het-cluster"), terminal_size=(160, 48), run_before=pin_and_move)


def test_compare_view_compact(snap_compare):
    async def run_before(pilot) -> None:
        await pin_and_move(pilot)
        await pilot.press("5")
        await pilot.pause()

    assert snap_compare(snapshot_app("paper-het-cluster"), terminal_size=(80, 24), run_before=run_before)


async def open_what_if(pilot) -> None:
    await settle(pilot.app, pilot)
    await pilot.press("w")
    screen = pilot.app.screen
    for _ in range(1200):
        await pilot.pause(0.05)
        if getattr(screen, "result", None) is not None:
            break
    await pilot.press("j", "j")          # the chart of the row under the cursor
    await pilot.pause()


def test_sensitivity_view_wide(snap_compare):
    assert snap_compare(snapshot_app(), terminal_size=(160, 48), run_before=open_what_if)


def test_sensitivity_view_compact(snap_compare):
    assert snap_compare(snapshot_app(), terminal_size=(80, 24), run_before=open_what_if)
