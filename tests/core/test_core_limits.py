"""limits.py at the edge: hostile files, numbers and names are refused with one-line errors naming
the field, and legitimate inputs far larger than any real job still pass."""

from __future__ import annotations

import os
import threading

import pytest

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_FILE_BYTES, MAX_GPUS, MAX_LAYERS, MAX_YAML_DEPTH
from amp_tui.core.base.yamlio import load_yaml_file, load_yaml_text
from amp_tui.core.spec.scenario import load_scenario, parse_scenario

BASE = load_scenario("paper-het-cluster").to_dict()


def _error(call, *args) -> SpecError:
    with pytest.raises(SpecError) as info:
        call(*args)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400
    return info.value


def _scenario(**changes) -> dict:
    data = {**BASE, **changes}
    return data


# -- YAML: aliases, nesting, integers ------------------------------------------------------------

def alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_before_it_expands():
    error = _error(load_yaml_text, alias_bomb(), "bomb.yaml")
    # (the file, and where in it: "bomb.yaml (line 5, column 5)", issue 34)
    assert error.field.startswith("bomb.yaml (line ") and "aliases are expanded" in error.reason


def test_a_few_aliases_are_fine():
    data = load_yaml_text(alias_bomb(3))
    assert len(data["a3"]) == 9 and data["a3"][0][0][0] == ["lol"] * 9


def test_an_alias_inside_its_own_value_is_refused():
    error = _error(load_yaml_text, "a: &a [1, *a]\n")
    assert "refers to the value that holds it" in error.reason


def test_deep_nesting_is_refused():
    error = _error(load_yaml_text, "x: " + "[" * 500 + "]" * 500 + "\n")
    assert f"nested more than {MAX_YAML_DEPTH}" in error.reason
    assert load_yaml_text("x: " + "[" * 20 + "1" + "]" * 20)   # ordinary depths pass


def test_integer_too_long_to_convert_is_a_yaml_error():
    error = _error(load_yaml_text, "x: " + "9" * 5000 + "\n")
    assert "malformed YAML" in error.reason


def test_text_over_the_size_limit():
    error = _error(load_yaml_text, "x: " + "a" * MAX_FILE_BYTES)
    assert "larger than the limit" in error.reason


# -- files that are not files --------------------------------------------------------------------

def test_dev_zero_is_refused_at_once():
    error = _error(load_yaml_file, "/dev/zero")
    assert error.field == "file" and "not a regular file" in error.reason


def test_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    result: list = []
    thread = threading.Thread(target=lambda: result.append(_error(load_yaml_file, fifo)), daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "reading a FIFO blocked"
    assert "not a regular file" in result[0].reason


def test_a_file_over_the_size_limit(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    assert "larger than the limit" in _error(load_yaml_file, path).reason


def test_a_name_too_long_for_the_file_system():
    error = _error(load_scenario, "x" * 300)
    assert error.field == "scenario"
    error = _error(load_scenario, "x" * 300 + ".yaml")
    assert error.field == "file"


# -- numbers ----------------------------------------------------------------------------------------

def _node_change(key, value) -> dict:
    nodes = [dict(BASE["cluster"]["nodes"][0], **{key: value}), *BASE["cluster"]["nodes"][1:]]
    return _scenario(cluster={**BASE["cluster"], "nodes": nodes})


@pytest.mark.parametrize("key, value, reason", [
    ("count", 10**400, "too large"),
    ("count", 1e9, "at most"),
    ("count", MAX_GPUS, "limit of"),          # within the count's own range, but too many GPUs
    ("inter_node_bandwidth", 5e-324, "outside the range"),
    ("inter_node_bandwidth", "5e-324 Gbps", "outside the range"),
    ("intra_node_bandwidth", "1e400 Gbps", "outside the range"),
    ("intra_node_bandwidth", 10**400, "too large"),
])
def test_unrepresentable_cluster_figures(key, value, reason):
    error = _error(parse_scenario, _node_change(key, value))
    assert error.field.startswith("cluster.nodes") and reason in error.reason


def _layer_change(key, value) -> dict:
    layers = [dict(BASE["model"]["layers"][0], **{key: value}), *BASE["model"]["layers"][1:]]
    return _scenario(model={**BASE["model"], "layers": layers})


@pytest.mark.parametrize("key, value, reason", [
    ("flops", 1e308, "too large"),
    ("params", 10**400, "too large"),
    ("activation_bytes", "1e300 GiB", "too large"),
    ("output_bytes", 5e-324, "too small"),
    ("repeat", 1e9, "at most"),
])
def test_unrepresentable_layer_figures(key, value, reason):
    error = _error(parse_scenario, _layer_change(key, value))
    assert error.field.startswith("model.layers[0]") and reason in error.reason


def test_layer_count_after_repeats():
    layers = [dict(layer, repeat=MAX_LAYERS) for layer in BASE["model"]["layers"][:2]]
    error = _error(parse_scenario, _scenario(model={**BASE["model"], "layers": layers}))
    assert error.field == "model.layers" and "after repeats" in str(error)


def test_family_with_a_billion_layers():
    scenario = load_scenario("dgx-a100-gpt3-13b").to_dict()
    scenario["model"]["num_layers"] = 1e9
    assert _error(parse_scenario, scenario).field == "model.num_layers"


def test_family_whose_figures_overflow():
    scenario = load_scenario("dgx-a100-gpt3-13b").to_dict()
    scenario["model"].update(hidden_size=2**40, num_heads=1, ffn_hidden_size=2**40, sequence_length=2**40)
    assert "too large" in _error(parse_scenario, scenario).reason


def test_global_batch_of_a_trillion_is_read_exactly():
    scenario = parse_scenario(_scenario(training={**BASE["training"], "global_batch_size": 1e12}))
    assert scenario.training.global_batch_size == 10**12


# -- names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change, field", [
    ({"name": "two\nlines"}, "name"),
    ({"name": "x" * 201}, "name"),
    ({"name": ["a"]}, "name"),
    ({"name": {"a": 1}}, "name"),
    ({"name": "bidi\u202eoverride"}, "name"),
    ({"description": "nul\x00byte"}, "description"),
])
def test_bad_scenario_names(change, field):
    assert _error(parse_scenario, _scenario(**change)).field == field


def test_a_description_may_have_several_lines():
    assert parse_scenario(_scenario(description="first line\nsecond line")).description.count("\n") == 1


@pytest.mark.parametrize("where, value, field", [
    ("instance", ["a"], "cluster.nodes[0].instance"),
    ("instance", {"a": 1}, "cluster.nodes[0].instance"),
    ("gpu", {"base": "V100", "name": "x\n)\ntouch PWNED\nY=("}, "cluster.nodes[0].gpu.name"),
    ("gpu", ["V100"], "cluster.nodes[0].gpu"),
])
def test_bad_node_names(where, value, field):
    assert _error(parse_scenario, _node_change(where, value)).field == field


def test_bad_model_and_layer_names():
    assert _error(parse_scenario, _scenario(model={**BASE["model"], "name": "x\n)\ntouch PWNED\nY=("})).field \
        == "model.name"
    assert _error(parse_scenario, _layer_change("name", "a\rb")).field == "model.layers[0].name"
    assert _error(parse_scenario, _layer_change("kind", ["block"])).field == "model.layers[0].kind"


@pytest.mark.parametrize("preset", ["../scenarios/paper-homogeneous", "/etc/passwd", "x" * 300, ["a"]])
def test_a_preset_name_is_never_a_path(preset):
    error = _error(parse_scenario, _scenario(cluster={"preset": preset}))
    assert error.field in ("cluster", "cluster.preset")


# -- legitimate inputs far beyond real jobs still pass ---------------------------------------------

def test_llama3_on_16384_gpus():
    scenario = parse_scenario({"name": "llama3-405b-ish", "cluster": {"nodes": [{"instance": "p5.48xlarge", "count": 2048}]},
                               "model": {"preset": "llama3-70b", "num_layers": 126}, "training": {"global_batch_size": 2048}})
    assert scenario.cluster.num_gpus == 16_384 and scenario.model.num_layers == 128


def test_a_thousand_explicit_layers():
    layers = [{"name": f"block{i}", "params": 1e6 + i, "flops": 1e9, "activation_bytes": 1e6, "output_bytes": 1e5}
              for i in range(1200)]
    scenario = parse_scenario(_scenario(model={"name": "wide", "layers": layers}))
    assert scenario.model.num_layers == 1200


def test_every_pipeline_depth_is_searched():
    """No depth is left out for the size of its partition tables (large ones are lean)."""
    from amp_tui.core.search.search import enumerate_candidates

    depths = {key[1] for key in enumerate_candidates(load_scenario("bench-1024-gpus-1000-layers"))}
    assert depths == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}


def test_divisors_by_trial_division_up_to_the_square_root():
    from amp_tui.core.search.search import divisors

    for n in (1, 2, 12, 97, 360, 1024, 3072):
        assert divisors(n) == tuple(d for d in range(1, n + 1) if n % d == 0)
    assert divisors(10**12, up_to=64) == (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 40, 50, 64)
    assert len(divisors(10**12)) == 169
    assert divisors(999_999_999_989, up_to=2**40) == (1, 999_999_999_989)    # a prime near 10^12


def test_a_batch_of_a_trillion_enumerates_micro_batches_up_to_the_cap():
    from amp_tui.core.search.search import enumerate_candidates

    scenario = load_scenario("paper-homogeneous").with_training(global_batch_size=10**12)
    keys = enumerate_candidates(scenario)
    assert keys and all(key[3] <= scenario.search.max_micro_batch_size for key in keys)
