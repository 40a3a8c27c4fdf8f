"""The dashboard says where the layer times come from (issue 34, major 4): the model pane in one
statement per GPU type of the cluster, the Selected pane per stage, with the same labels as the
command line."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.spec.scenario import load_scenario
from amp_tui.tui import edits
from amp_tui.tui.widgets.selected_pane import SelectedPane

from .conftest import settle

TRAINING = {"global_batch_size": 32, "precision": "fp16", "framework": "deepspeed", "recompute": "none",
            "zero_stage": 0, "state_bytes_per_param": 20}
CARRIED = "carried from T4+V100's measured/analytic ratio (AMP 2020)"


def _app(make_app, tmp_path, model: dict, nodes: list, training: dict = TRAINING):
    """The dashboard on a scenario file with this model, cluster and training."""
    (tmp_path / "s.yaml").write_text(dump_yaml({"name": "sources", "model": model, "training": training,
                                                "cluster": {"nodes": nodes}}))
    return make_app(str(tmp_path / "s.yaml"))


async def test_the_model_and_selected_panes_name_measured_and_carried_times(make_app, tmp_path):
    app = _app(make_app, tmp_path, {"preset": "gpt2-medium"}, [{"instance": "p3.8xlarge", "count": 2},
               {"instance": "g4dn.12xlarge", "count": 1, "gpu": "A10G"}])
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        note = str(app.query_one("#model-note", Static).content)
        assert f"Layer times: on V100 measured (AMP 2020, V100); on A10G {CARRIED}." in note
        assert "analytic model's" not in note        # no second statement beside it that says otherwise
        selected = str(app.query_one(SelectedPane).query_one("#selected-summary", Static).content)
        line = next(line for line in selected.splitlines() if line.startswith("layer times: "))
        for part in line.removeprefix("layer times: ").split("; "):
            assert part.endswith("measured (AMP 2020, V100)") and " on V100 " in f" {part}" \
                or part.endswith(CARRIED) and " on A10G " in f" {part}", part
        assert "different sources" not in selected


async def test_an_analytic_model_says_so_once(make_app, tmp_path):
    app = _app(make_app, tmp_path, {"preset": "llama3-8b", "num_layers": 4}, [{"instance": "p4d.24xlarge", "count": 1}],
               {"global_batch_size": 8})
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        note = str(app.query_one("#model-note", Static).content)
        assert "Layer times: analytic on every GPU type (nothing measured). No profile loaded" in note
        assert "layer times:" not in str(app.query_one(SelectedPane).query_one("#selected-summary", Static).content)


async def test_the_model_pane_says_what_an_override_kept_and_dropped(make_app, tmp_path):
    app = _app(make_app, tmp_path, {"preset": "gpt2-medium", "vocab_size": 50257}, [{"instance": "p3.8xlarge", "count": 2}])
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        note = str(app.query_one("#model-note", Static).content)
        assert "rebuilt from the gpt family's shapes at vocab_size 50257 (was 52256)" in note
        assert "kept on block x24" in note
        assert "on V100 measured (AMP 2020, V100) block x24; analytic embedding, lm_head" in note


def test_the_dashboards_shape_edit_follows_the_same_rule():
    """The same function as a scenario file's override: what it keeps, and what it refuses (the
    dashboard shows a refusal inline and keeps the last good results, as for every edit)."""
    scenario = load_scenario("paper-het-cluster")
    wider = edits.set_model_field(scenario, "vocab_size", 50257)
    assert "kept on block x24" in wider.model.rebuilt
    assert [g.name for g in wider.model.groups] == ["embedding", "block", "lm_head"]
    assert wider.model.groups[1].profile == scenario.model.groups[2].profile

    with pytest.raises(SpecError, match="model.num_layers"):
        edits.set_model_field(load_scenario("paper-het-model"), "num_layers", 3)
