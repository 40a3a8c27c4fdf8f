"""Overrides on a layer-list preset (issue 34, major 2): applied where the list names the family
whose shapes its layers follow (gpt2-medium: `shape_family: gpt`), the measured times that no
longer match the layers' shapes dropped and said; refused in one line where it names none
(transgan-generator: AMP's layer list, no family to rebuild it from)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from amp_tui.cli import main
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import dump_yaml
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.model import parse_model
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.spec.strategy import Strategy

TRAINING = {"global_batch_size": 32, "precision": "fp16", "framework": "deepspeed", "recompute": "none",
            "zero_stage": 0, "state_bytes_per_param": 20}


def _scenario(model: dict) -> dict:
    return {"name": "override", "model": model, "training": TRAINING,
            "cluster": {"nodes": [{"instance": "p3.8xlarge", "count": 2}]}}


def _measured_copies(model) -> list[float]:
    return [layer.profiled_time("V100", 1, int(copy)) for layer, copy in zip(model.layers, model.copy_index)
            if layer.kind == "block"]


def test_the_preset_as_written_is_unchanged():
    plain = parse_model({"preset": "gpt2-medium"}, 2)
    same = parse_model({"preset": "gpt2-medium", "num_layers": 24, "hidden_size": 1024, "sequence_length": 1024}, 2)
    assert plain.num_layers == same.num_layers == 30 and plain.groups == same.groups
    assert plain.rebuilt == same.rebuilt == ""


def test_num_layers_resizes_the_measured_block():
    plain = parse_model({"preset": "gpt2-medium"}, 2)
    model = parse_model({"preset": "gpt2-medium", "num_layers": 48}, 2)
    assert model.num_layers == 54 and model.total_params == pytest.approx(
        plain.total_params + 24 * plain.groups[2].params)
    times = _measured_copies(model)
    assert times[:24] == _measured_copies(plain)
    assert times[24:] == pytest.approx([np.mean(times[:24])] * 24)
    assert "num_layers 48 (was 24)" in model.rebuilt and "mean" in model.rebuilt
    fewer = parse_model({"preset": "gpt2-medium", "num_layers": 6}, 2)
    assert fewer.num_layers == 12 and _measured_copies(fewer) == _measured_copies(plain)[:6]


def test_a_new_hidden_size_rebuilds_the_layers_from_the_family_and_drops_the_times():
    model = parse_model({"preset": "gpt2-medium", "hidden_size": 2048}, 2)
    family = parse_model({"family": "gpt", "hidden_size": 2048, "num_layers": 24, "num_heads": 16,
                          "sequence_length": 1024, "vocab_size": 52256}, 2)
    assert [(g.name, g.repeat, g.params, g.flops) for g in model.groups] == \
        [(g.name, g.repeat, g.params, g.flops) for g in family.groups]
    assert not any(group.profile for group in model.groups)
    assert "hidden_size 2048 (was 1024)" in model.rebuilt
    assert "dropped" in model.rebuilt and "T4, V100" in model.rebuilt


def test_a_new_vocabulary_keeps_the_blocks_measured_times():
    """The blocks' shapes do not depend on the vocabulary: their AMP times stand."""
    plain = parse_model({"preset": "gpt2-medium"}, 2)
    model = parse_model({"preset": "gpt2-medium", "vocab_size": 50257}, 2)
    assert _measured_copies(model) == _measured_copies(plain)
    assert not next(g for g in model.groups if g.name == "embedding").profile
    assert "kept on block x24" in model.rebuilt


def test_a_longer_sequence_prices_the_time_not_only_the_dollars():
    """AMP measured its times at 1024 tokens: at 2048 they are dropped, every layer is priced (and
    labelled) by the analytic model, and the compute grows with the tokens, not only the $/M tokens."""
    strategy = Strategy(1, 1, 8, 1)
    same_shape = {"family": "gpt", "name": "gpt2-medium", "hidden_size": 1024, "num_layers": 24, "num_heads": 16,
                  "sequence_length": 1024, "vocab_size": 52256}
    short = evaluate(parse_scenario(_scenario(same_shape)), strategy)
    scenario = parse_scenario(_scenario({"preset": "gpt2-medium", "sequence_length": 2048}))
    long = evaluate(scenario, strategy)
    assert "sequence_length 2048 (was 1024)" in scenario.model.rebuilt
    assert "every measured layer" in scenario.model.rebuilt
    assert long.stages[0].time_source == short.stages[0].time_source == "analytic"
    assert long.stages[0].compute_s > 2 * short.stages[0].compute_s     # twice the tokens, attention s^2
    assert long.iteration_time_s > short.iteration_time_s


@pytest.mark.parametrize("override", [{"num_layers": 3}, {"hidden_size": 2048}, {"sequence_length": 100}])
def test_a_layer_list_without_a_family_refuses_a_shape_override(override):
    with pytest.raises(SpecError) as err:
        parse_model({"preset": "transgan-generator", **override}, 2)
    key, value = next(iter(override.items()))
    assert err.value.field == f"model.{key}" and str(value) in str(err.value)
    assert "transgan-generator" in str(err.value) and "\n" not in str(err.value)


def test_a_rebuilt_model_round_trips_and_keeps_its_times():
    scenario = parse_scenario(_scenario({"preset": "gpt2-medium", "vocab_size": 50257}))
    again = parse_scenario(scenario.to_dict())
    assert again.model.groups == scenario.model.groups
    assert again.model.rebuilt == ""          # as written now, the list and its shape agree


def test_plan_says_what_an_override_did(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text(dump_yaml(_scenario({"preset": "gpt2-medium", "hidden_size": 2048})))
    assert main(["plan", str(tmp_path / "s.yaml"), "--top", "1", "--time-limit", "60"]) == 0
    out = capsys.readouterr().out
    assert "gpt2-medium: 26 layers" in out and "0.41 B params" not in out
    assert "model gpt2-medium: rebuilt from the gpt family's shapes at hidden_size 2048 (was 1024)" in out
    assert main(["plan", str(tmp_path / "s.yaml"), "--top", "1", "--json", "--time-limit", "60"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "hidden_size 2048" in data["layer_times"]["rebuilt"]


def test_the_refusal_is_one_line_and_exit_2(tmp_path, capsys):
    data = _scenario({"preset": "transgan-generator", "num_layers": 3})
    (tmp_path / "s.yaml").write_text(dump_yaml(data))
    assert main(["plan", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model.num_layers" in err and "3" in err
