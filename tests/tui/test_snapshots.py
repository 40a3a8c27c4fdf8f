"""Snapshots of the main screen: wide (120x40, inputs beside results) and compact (80x24, tabs).

Timings are hidden (`show_timings=False`) so the pictures only change when the screen or the
predictions do. After a deliberate change to either, regenerate with
`python -m pytest tests/tui/test_snapshots.py --snapshot-update` and look at the SVGs.
"""

from __future__ import annotations

from amp_tui.core.scenario import load_scenario
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
