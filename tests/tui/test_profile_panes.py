"""The dashboard shows whether a profile file is loaded and from when: the model pane's note, the
calibrate screen (C), and the Selected pane's measured layers."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.tui.screens.calibrate import CalibrateScreen
from amp_tui.tui.widgets.selected_pane import SelectedPane

from .conftest import settle

H200_PROFILE = Path(__file__).resolve().parent.parent / "data" / "profiling" / "gpt2-medium.profile.yaml"


async def test_a_loaded_profile_shows_in_the_model_pane_calibrate_and_selected(make_app, tmp_path):
    (tmp_path / "p.yaml").write_text(H200_PROFILE.read_text())      # measured on an H200 (docs/profiling.md)
    (tmp_path / "s.yaml").write_text(dump_yaml({
        "name": "gpt2 on one h200", "model": {"preset": "gpt2-medium", "profile": "p.yaml"},
        "cluster": {"nodes": [{"gpu": "H200", "count": 1, "gpus_per_node": 2, "intra_node_bandwidth": "900 GB/s",
                               "inter_node_bandwidth": "50 GB/s"}]},
        "training": {"global_batch_size": 8, "precision": "bf16", "framework": "pytorch"}}))
    app = make_app(str(tmp_path / "s.yaml"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        note = str(app.query_one("#model-note", Static).content)
        assert "Layer times from profile p.yaml: measured on H200 (NVIDIA H200, torch 2.11" in note
        assert "2026-11-27" in note
        selected = str(app.query_one(SelectedPane).query_one("#selected-summary", Static).content)
        assert "layer times: stage 0 on H200 measured (profile p.yaml, 2026-11-27, H200)" in selected
        await pilot.press("C")
        await pilot.pause()
        assert isinstance(app.screen, CalibrateScreen)
        assert "Layer times from profile p.yaml" in str(app.screen.query_one("#profile", Static).content)


async def test_without_a_profile_the_panes_say_so(make_app):
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert "No profile loaded" in str(app.query_one("#model-note", Static).content)
        assert "profile" not in str(app.query_one(SelectedPane).query_one("#selected-summary", Static).content)
