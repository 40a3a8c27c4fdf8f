"""A scenario written out with `to_dict` reads back as the same scenario."""

import numpy as np
import pytest
from core_builders import with_change

from amp_tui.core.spec.presets import load_preset, preset_names
from amp_tui.core.spec.scenario import load_scenario, parse_scenario

SCENARIOS = [n for n in preset_names("scenarios") if "training" in load_preset("scenarios", n)]  # serving ones: tests/serving


def test_the_paper_settings_are_presets():
    assert {"paper-homogeneous", "paper-het-cluster", "paper-het-model"} <= set(SCENARIOS)


def _same(a, b):
    assert b.cluster == a.cluster
    assert b.training == a.training
    assert b.search == a.search
    assert b.model.num_layers == a.model.num_layers
    assert set(b.model.columns) == set(a.model.columns)
    for key, column in a.model.columns.items():
        assert np.array_equal(b.model.columns[key], column), key
    assert [layer.profile for layer in b.model.layers] == [layer.profile for layer in a.model.layers]


@pytest.mark.parametrize("name", SCENARIOS)
def test_preset_round_trip(name):
    original = load_scenario(name)
    again = parse_scenario(original.to_dict())
    _same(original, again)
    assert again.to_dict() == original.to_dict()


def test_round_trip_through_a_file(tmp_path):
    from amp_tui.core.base.yamlio import atomic_write, dump_yaml

    original = load_scenario("paper-het-model")
    path = atomic_write(tmp_path / "mine.yaml", dump_yaml(original.to_dict()))
    _same(original, load_scenario(str(path)))


def test_plan_file_holds_a_scenario(tmp_path):
    from amp_tui.core.base.yamlio import atomic_write, dump_yaml

    original = load_scenario("paper-homogeneous")
    path = atomic_write(tmp_path / "plan.yaml", dump_yaml({"scenario": original.to_dict(), "strategies": []}))
    _same(original, load_scenario(str(path)))


def test_with_training_changes_one_field():
    original = load_scenario("dgx-a100-gpt3-13b")
    changed = original.with_training(precision="fp32")
    assert changed.training.precision == "fp32"
    assert changed.cluster == original.cluster
    # a family model is rebuilt for the new precision: 4-byte activations are twice 2-byte ones
    assert np.array_equal(changed.model.columns["activation_bytes"], 2 * original.model.columns["activation_bytes"])
    assert np.array_equal(changed.model.columns["params"], original.model.columns["params"])


HET = load_scenario("paper-het-cluster").to_dict()


def test_default_state_bytes_follow_optimizer_and_precision():
    data = load_scenario("dgx-a100-gpt3-13b").to_dict()
    training = {k: v for k, v in data["training"].items() if k != "state_bytes_per_param"}
    for optimizer, precision, expected in [("adam", "bf16", 16), ("adam", "fp32", 16), ("sgd", "fp16", 12)]:
        parsed = parse_scenario({**data, "training": {**training, "optimizer": optimizer, "precision": precision}})
        assert parsed.training.state_bytes_per_param == expected


def test_switching_optimizer_keeps_the_default_state_bytes():
    data = load_scenario("dgx-a100-gpt3-13b").to_dict()
    training = {k: v for k, v in data["training"].items() if k != "state_bytes_per_param"}
    adam = parse_scenario({**data, "training": training})
    assert adam.with_training(optimizer="sgd").training.state_bytes_per_param == 12


def test_round_trip_keeps_an_uneven_runtime_reserve():
    original = parse_scenario(with_change(HET, ("training", "runtime_reserve"), "1500 MiB"))
    assert parse_scenario(original.to_dict()).training == original.training


def test_round_trip_keeps_a_binary_bandwidth():
    original = parse_scenario(with_change(HET, ("cluster", "nodes", 0, "intra_node_bandwidth"), "16 GiB/s"))
    assert parse_scenario(original.to_dict()).cluster == original.cluster


def test_round_trip_keeps_an_inline_gpu_memory():
    original = parse_scenario(with_change(HET, ("cluster", "nodes", 0, "gpu"), {"base": "V100", "memory": "24 GB"}))
    assert parse_scenario(original.to_dict()).cluster == original.cluster


def test_round_trip_keeps_an_inline_gpu_with_round_figures():
    gpu = {"base": "V100", "memory": "8 GiB", "fp16_tflops": 50, "efficiency": {"peak_fraction": 0.25, "half_work": 1000}}
    original = parse_scenario(with_change(HET, ("cluster", "nodes", 1, "gpu"), gpu))
    assert original.cluster.nodes[1].gpu.peak_flops_16 == 50e12
    assert original.cluster.nodes[1].gpu.usable_memory_bytes == 8 * 2**30
    _same(original, parse_scenario(original.to_dict()))


def test_a_preset_changed_by_its_reader_stays_intact():
    """Presets are read once and cached; each reader gets its own copy to change."""
    data = load_preset("scenarios", "paper-homogeneous")
    data["training"]["global_batch_size"] = 3
    assert load_preset("scenarios", "paper-homogeneous")["training"]["global_batch_size"] == 32
    assert load_scenario("paper-homogeneous").training.global_batch_size == 32
