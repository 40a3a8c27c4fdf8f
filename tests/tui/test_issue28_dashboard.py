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

    layer = {"params": 1e6, "flops": 1e9, "activation_bytes": 1e6, "output_bytes": 1e5}
    big = {**layer, "params": 6e8}
    scenario = parse_scenario({
        "name": "adapter",
        "cluster": {"nodes": [{"count": 1, "gpu": "T4", "gpus_per_node": 2, "intra_node_bandwidth": "50 Gbps",
                               "inter_node_bandwidth": "50 Gbps"}]},
        "model": {"name": "toy", "hidden_size": 64, "num_heads": 4, "sequence_length": 16, "layers": [
            {"name": "embed", "kind": "embedding", **big}, {"name": "block", "kind": "block", "repeat": 4, **layer},
            {"name": "adapter", "kind": "other", **big}, {"name": "block", "kind": "block", "repeat": 4, **layer},
            {"name": "head", "kind": "head", **layer}]},
        "training": {"global_batch_size": 8}})
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
