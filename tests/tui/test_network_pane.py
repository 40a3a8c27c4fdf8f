"""The dashboard's cluster pane says which links the cluster's network profile measured."""

from __future__ import annotations

from textual.widgets import Static

from pathlib import Path

from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.tui.widgets.cluster_pane import COLUMNS, ClusterPane

from .conftest import settle

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "cluster" / "network-example-2xa100.yaml"


async def test_measured_links_are_marked_and_said(make_app, tmp_path):
    (tmp_path / "s.yaml").write_text(dump_yaml({
        "name": "measured", "model": {"preset": "gpt3-1.3b"}, "training": {"global_batch_size": 64, "precision": "bf16"},
        "cluster": {"network": str(EXAMPLE), "nodes": [
            {"gpu": "A100-80GB", "count": 2, "gpus_per_node": 8, "intra_node_bandwidth": "300 GB/s",
             "inter_node_bandwidth": "400 Gbps"},
            {"gpu": "A10G", "count": 1, "gpus_per_node": 4, "intra_node_bandwidth": "100 Gbps",
             "inter_node_bandwidth": "40 Gbps"}]}}))
    app = make_app(str(tmp_path / "s.yaml"))
    async with app.run_test(size=(140, 45)) as pilot:
        await settle(app, pilot)
        table = app.query_one(ClusterPane).table
        intra = [header for header, _, _ in COLUMNS].index("intra")
        assert str(table.get_cell_at((0, intra))).rstrip().endswith(" m")           # the A100 kind was measured
        assert not str(table.get_cell_at((1, intra))).rstrip().endswith(" m")       # the A10G was not
        totals = str(app.query_one("#cluster-totals", Static).content)
        assert "m measured (network profile " + str(EXAMPLE) + ": measured on GPUs with nccl" in totals
        assert "group 1: nothing measured (catalog figures: inside a node (pcie), between nodes" in totals


async def test_without_a_network_profile_nothing_is_marked(make_app):
    app = make_app()
    async with app.run_test(size=(140, 45)) as pilot:
        await settle(app, pilot)
        assert "measured (network profile" not in str(app.query_one("#cluster-totals", Static).content)
