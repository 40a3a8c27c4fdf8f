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
