"""Edits beyond amp-tui's limits are refused (SpecError: the edit dialog shows it inline and the app
keeps the last good scenario) before anything as large as the edit asks for is built."""

import pytest

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui import edits


@pytest.mark.parametrize("edit, field", [
    (lambda s: edits.set_node_field(s, 0, "count", 1e9), "cluster.nodes"),
    (lambda s: edits.set_node_field(s, 0, "inter_node_bandwidth", "5e-324 Gbps"), "cluster.nodes[0].inter_node_bandwidth"),
    (lambda s: edits.set_layer_field(s, 2, "repeat", 1e9), "model.layers[2].repeat"),
    (lambda s: edits.set_layer_field(s, 0, "flops", 1e308), "model.layers[0].flops"),
    (lambda s: edits.set_layer_field(s, 0, "name", "two\nlines"), "model.layers[0].name"),
    (lambda s: edits.set_training_field(s, "global_batch_size", 10**400), "training.global_batch_size"),
])
def test_edits_beyond_the_limits_are_refused(edit, field):
    scenario = load_scenario("paper-het-cluster")
    with pytest.raises(SpecError) as info:
        edit(scenario)
    assert info.value.field.startswith(field) and "\n" not in str(info.value)
