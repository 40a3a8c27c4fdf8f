"""Issue 34 (every figure says where it comes from) in the dashboard: one test per item, each failed
before its fix."""

from __future__ import annotations

from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.tui.app import AmpApp
from amp_tui.tui.widgets.strategy_table import StrategyTable

from .conftest import settle

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
