"""Every field of a scenario and a strategy is validated at the edge: a bad value raises SpecError whose
`.field` is the field's path and whose message is one line showing the bad value."""

from dataclasses import replace

import pytest
from core_builders import with_change

from amp_tui.core.base.errors import SpecError
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy, parse_strategy
from amp_tui.core.spec.validity import validate_strategy

# Explicit layers (gpt2-medium with measured profiles), two node groups given by instance.
HET = load_scenario("paper-het-cluster").to_dict()
# A family model (gpt) given by hyperparameters.
FAMILY = load_scenario("dgx-a100-gpt3-13b").to_dict()
LLAMA = load_scenario("mixed-h100-a100-llama3-8b").to_dict()

N0 = ("cluster", "nodes", 0)
N1 = ("cluster", "nodes", 1)
L0 = ("model", "layers", 0)
L2 = ("model", "layers", 2)   # the repeated transformer block (repeat 24)

SCENARIO_CASES = [
    # cluster.nodes[i]
    (HET, N0 + ("count",), "three", "cluster.nodes[0].count"),
    (HET, N0 + ("count",), 0, "cluster.nodes[0].count"),
    (HET, N1 + ("count",), -2, "cluster.nodes[1].count"),
    (HET, N1 + ("count",), 1.5, "cluster.nodes[1].count"),
    (HET, N0 + ("gpus_per_node",), "four", "cluster.nodes[0].gpus_per_node"),
    (HET, N0 + ("gpus_per_node",), 0, "cluster.nodes[0].gpus_per_node"),
    (HET, N1 + ("gpus_per_node",), -4, "cluster.nodes[1].gpus_per_node"),
    (HET, N0 + ("gpu",), "Z80", "cluster.nodes[0].gpu"),
    (HET, N1 + ("gpu",), 42, "cluster.nodes[1].gpu"),
    (HET, N0 + ("gpu",), {"base": "Z80"}, "cluster.nodes[0].gpu.base"),
    (HET, N0 + ("gpu",), {"base": "V100", "fp16_tflops": "fast"}, "cluster.nodes[0].gpu.fp16_tflops"),
    (HET, N0 + ("gpu",), {"base": "V100", "fp16_tflops": -1}, "cluster.nodes[0].gpu.fp16_tflops"),
    (HET, N0 + ("gpu",), {"base": "V100", "memory": "lots"}, "cluster.nodes[0].gpu.memory"),
    (HET, N0 + ("gpu",), {"base": "V100", "memory": "-16 GiB"}, "cluster.nodes[0].gpu.memory"),
    (HET, N0 + ("gpu",), {"base": "V100", "memory_bandwidth": "9 parsecs"},
     "cluster.nodes[0].gpu.memory_bandwidth"),
    (HET, N0 + ("gpu",), {"base": "V100", "colour": "green"}, "cluster.nodes[0].gpu.colour"),
    (HET, N0 + ("gpu",), {"memory": "16 GiB", "fp16_tflops": 100, "fp32_tflops": 10},
     "cluster.nodes[0].gpu.memory_bandwidth"),
    (HET, N0 + ("gpu",), {"base": "V100", "efficiency": {"peak_fraction": 1.5}},
     "cluster.nodes[0].gpu.efficiency.peak_fraction"),
    (HET, N0 + ("intra_node_bandwidth",), "fast", "cluster.nodes[0].intra_node_bandwidth"),
    (HET, N0 + ("intra_node_bandwidth",), "-170 Gbps", "cluster.nodes[0].intra_node_bandwidth"),
    (HET, N1 + ("intra_node_bandwidth",), 0, "cluster.nodes[1].intra_node_bandwidth"),
    (HET, N0 + ("inter_node_bandwidth",), "10 Gfurlongs", "cluster.nodes[0].inter_node_bandwidth"),
    (HET, N1 + ("inter_node_bandwidth",), "0 Gbps", "cluster.nodes[1].inter_node_bandwidth"),
    (HET, N1 + ("inter_node_bandwidth",), -50, "cluster.nodes[1].inter_node_bandwidth"),
    (HET, N0 + ("instance",), "p9.mega", "cluster.nodes[0].instance"),
    (HET, N1 + ("colour",), "blue", "cluster.nodes[1].colour"),
    (HET, ("cluster", "nodes"), [], "cluster.nodes"),
    (HET, ("cluster", "colour"), "x", "cluster.colour"),
    # model: family hyperparameters
    (FAMILY, ("model", "hidden_size"), "wide", "model.hidden_size"),
    (FAMILY, ("model", "hidden_size"), -5120, "model.hidden_size"),
    (FAMILY, ("model", "num_layers"), 0, "model.num_layers"),
    (FAMILY, ("model", "num_layers"), "forty", "model.num_layers"),
    (FAMILY, ("model", "num_heads"), 0, "model.num_heads"),
    (FAMILY, ("model", "num_heads"), 48, "model.num_heads"),           # does not divide 5120
    (FAMILY, ("model", "sequence_length"), "long", "model.sequence_length"),
    (FAMILY, ("model", "vocab_size"), 0, "model.vocab_size"),
    (FAMILY, ("model", "ffn_hidden_size"), -1, "model.ffn_hidden_size"),
    (FAMILY, ("model", "flash_attention"), "yes", "model.flash_attention"),
    (FAMILY, ("model", "dropout"), 0.1, "model.dropout"),
    (FAMILY, ("model", "family"), "mamba", "model.family"),
    (LLAMA, ("model", "num_kv_heads"), 5, "model.num_kv_heads"),       # does not divide 32
    (LLAMA, ("model", "num_kv_heads"), "eight", "model.num_kv_heads"),
    # model: explicit layers
    (HET, L0 + ("params",), "many", "model.layers[0].params"),
    (HET, L0 + ("params",), -1, "model.layers[0].params"),
    (HET, L2 + ("flops",), "lots", "model.layers[2].flops"),
    (HET, L2 + ("flops",), -3e10, "model.layers[2].flops"),
    (HET, L2 + ("activation_bytes",), "12 XB", "model.layers[2].activation_bytes"),
    (HET, L2 + ("activation_bytes",), -1e6, "model.layers[2].activation_bytes"),
    (HET, L0 + ("output_bytes",), "big", "model.layers[0].output_bytes"),
    (HET, L0 + ("output_bytes",), -2, "model.layers[0].output_bytes"),
    (HET, L2 + ("tp_comm_bytes",), "x", "model.layers[2].tp_comm_bytes"),
    (HET, L2 + ("activation_replicated_bytes",), 1e12, "model.layers[2].activation_replicated_bytes"),
    (HET, L2 + ("repeat",), 0, "model.layers[2].repeat"),
    (HET, L2 + ("repeat",), "twice", "model.layers[2].repeat"),
    (HET, L2 + ("repeat",), 2.5, "model.layers[2].repeat"),
    (HET, L0 + ("profile",), "fast", "model.layers[0].profile"),
    (HET, L0 + ("profile",), {"T4": "fast"}, "model.layers[0].profile.T4"),
    (HET, L0 + ("profile",), {"T4": {1: -0.001}}, "model.layers[0].profile.T4.1"),
    (HET, L0 + ("profile",), {"T4": {1: "quick"}}, "model.layers[0].profile.T4.1"),
    (HET, L0 + ("kind",), "conv", "model.layers[0].kind"),
    (HET, L0 + ("colour",), "red", "model.layers[0].colour"),
    (HET, ("model", "layers"), [], "model.layers"),
    (HET, ("model", "sequence_length"), 0, "model.sequence_length"),
    (HET, ("model", "colour"), "red", "model.colour"),
    # training
    (HET, ("training", "global_batch_size"), "many", "training.global_batch_size"),
    (HET, ("training", "global_batch_size"), 0, "training.global_batch_size"),
    (HET, ("training", "global_batch_size"), -32, "training.global_batch_size"),
    (HET, ("training", "global_batch_size"), 2.5, "training.global_batch_size"),
    (HET, ("training", "precision"), "fp8", "training.precision"),
    (HET, ("training", "optimizer"), "lamb", "training.optimizer"),
    (HET, ("training", "schedule"), "interleaved", "training.schedule"),
    (HET, ("training", "precision"), "bf16", "training.precision"),   # V100 and T4 have no bf16
    (HET, ("training", "recompute"), "partial", "training.recompute"),
    (HET, ("training", "zero_stage"), 4, "training.zero_stage"),
    (HET, ("training", "context_parallel"), 0, "training.context_parallel"),
    (HET, ("training", "sequence_parallel"), "yes", "training.sequence_parallel"),
    (HET, ("training", "zero_stage"), "one", "training.zero_stage"),
    (HET, ("training", "zero_stage"), -1, "training.zero_stage"),
    (HET, ("training", "runtime_reserve"), "lots", "training.runtime_reserve"),
    (HET, ("training", "runtime_reserve"), "-1 GiB", "training.runtime_reserve"),
    (HET, ("training", "state_bytes_per_param"), "many", "training.state_bytes_per_param"),
    (HET, ("training", "state_bytes_per_param"), 0, "training.state_bytes_per_param"),
    (HET, ("training", "state_bytes_per_param"), -16, "training.state_bytes_per_param"),
    (HET, ("training", "state_bytes_per_param"), 3, "training.state_bytes_per_param"),  # < 2 + 2 at fp16
    (HET, ("training", "colour"), "red", "training.colour"),
    # search options
    (HET, ("search", "allow_cross_node_tp"), "yes", "search.allow_cross_node_tp"),
    (HET, ("search", "reorder_nodes"), 1, "search.reorder_nodes"),
    (HET, ("search", "top"), 0, "search.top"),
    (HET, ("search", "top"), "ten", "search.top"),
    (HET, ("search", "max_micro_batch_size"), -1, "search.max_micro_batch_size"),
    (HET, ("search", "colour"), "red", "search.colour"),
    # the scenario itself
    (HET, ("colour",), "red", "scenario.colour"),
]


def _shown(value) -> str:
    return repr(value) if isinstance(value, str) else str(value)


@pytest.mark.parametrize("base, path, value, field", SCENARIO_CASES,
                         ids=[f"{c[3]}={c[2]!r}" for c in SCENARIO_CASES])
def test_bad_scenario_field(base, path, value, field):
    parse_scenario(base)  # the base is valid
    with pytest.raises(SpecError) as info:
        parse_scenario(with_change(base, path, value))
    err = info.value
    text = str(err)
    assert err.field == field, text
    assert "\n" not in text
    assert text.startswith(f"{field}: ")
    if err.value is None:   # a field left out: named with what is needed, never "None" (issue 28, minor 17)
        assert text == f"{field}: {err.reason}" and "None" not in text
    else:
        assert _shown(value)[:50] in text or _shown(err.value) in text
    if not isinstance(value, (dict, list)):
        assert _shown(value) in text


@pytest.mark.parametrize("key", ["cluster", "model", "training"])
def test_missing_section(key):
    data = dict(HET)
    del data[key]
    with pytest.raises(SpecError) as info:
        parse_scenario(data)
    assert info.value.field == key


def test_profile_list_length_must_match_repeat():
    with pytest.raises(SpecError) as info:
        parse_scenario(with_change(HET, L2 + ("profile",), {"T4": {1: [0.1, 0.2, 0.3]}}))
    assert info.value.field == "model.layers[2].profile.T4.1"
    assert "3 values" in str(info.value) and "24" in str(info.value)


def test_missing_required_layer_field():
    layer = dict(HET["model"]["layers"][0])
    del layer["flops"]
    with pytest.raises(SpecError) as info:
        parse_scenario(with_change(HET, L0, layer))
    assert info.value.field == "model.layers[0].flops"


def test_node_without_instance_needs_its_figures():
    node = {"count": 1, "gpu": "V100", "gpus_per_node": 4, "intra_node_bandwidth": "170 Gbps"}
    with pytest.raises(SpecError) as info:
        parse_scenario(with_change(HET, N0, node))
    assert info.value.field == "cluster.nodes[0].inter_node_bandwidth"


def test_zero_stage_rejects_a_boolean():
    with pytest.raises(SpecError):
        parse_scenario(with_change(HET, ("training", "zero_stage"), True))


# -- strategies -----------------------------------------------------------------------------------

SCENARIO = parse_scenario(HET)  # 16 GPUs in 2 node groups, 30 layers, global batch 32, 16 heads
FEW_HEADS = parse_scenario(with_change(HET, ("model", "num_heads"), 12))

STRATEGY_CASES = [
    (SCENARIO, Strategy(1, 2, 4, 1), "strategy.tp*pp*dp", "1*2*4=8"),
    (SCENARIO, Strategy(2, 4, 4, 1), "strategy.tp*pp*dp", "2*4*4=32"),
    (SCENARIO, Strategy(1, 2, 8, 3), "strategy.micro_batch_size", 3),       # 8*3 does not divide 32
    (SCENARIO, Strategy(1, 1, 16, 4), "strategy.micro_batch_size", 4),      # 64 > 32
    (SCENARIO, Strategy(1, 2, 8, 1, (10, 10, 10)), "strategy.partition", [10, 10, 10]),
    (SCENARIO, Strategy(1, 2, 8, 1, (30,)), "strategy.partition", [30]),
    (SCENARIO, Strategy(1, 2, 8, 1, (15, 14)), "strategy.partition", [15, 14]),
    (SCENARIO, Strategy(1, 2, 8, 1, (15, 16)), "strategy.partition", [15, 16]),
    (SCENARIO, Strategy(1, 2, 8, 1, None, (0, 0)), "strategy.placement", [0, 0]),
    (SCENARIO, Strategy(1, 2, 8, 1, None, (1, 2)), "strategy.placement", [1, 2]),
    (SCENARIO, Strategy(1, 2, 8, 1, None, (0,)), "strategy.placement", [0]),
    (FEW_HEADS, Strategy(8, 2, 1, 1), "strategy.tp", 8),                    # 8 does not divide 12
]


@pytest.mark.parametrize("scenario, strategy, field, value", STRATEGY_CASES,
                         ids=[f"{c[2]}-{c[1].label}-{c[3]}" for c in STRATEGY_CASES])
def test_invalid_strategy(scenario, strategy, field, value):
    with pytest.raises(SpecError) as info:
        validate_strategy(scenario, strategy)
    err = info.value
    assert err.field == field
    assert err.value == value
    assert "\n" not in str(err) and str(value) in str(err)
    with pytest.raises(SpecError):           # evaluate validates too
        evaluate(scenario, strategy)


def test_pipeline_deeper_than_the_model():
    small = parse_scenario(with_change(HET, ("model", "layers"), HET["model"]["layers"][:2]))
    with pytest.raises(SpecError) as info:
        validate_strategy(small, Strategy(1, 4, 4, 1))
    assert info.value.field == "strategy.pp"


def test_valid_strategy_passes():
    validate_strategy(SCENARIO, Strategy(1, 2, 8, 2, (15, 15), (1, 0)))
    validate_strategy(SCENARIO, Strategy(4, 4, 1, 32))


def test_partition_with_an_empty_stage_is_a_spec_error():
    with pytest.raises(SpecError) as info:
        validate_strategy(SCENARIO, Strategy(1, 2, 8, 1, (0, 30)))
    assert info.value.field.startswith("strategy.partition")


def test_partition_with_a_negative_stage_is_a_spec_error():
    with pytest.raises(SpecError):
        validate_strategy(SCENARIO, Strategy(1, 2, 8, 1, (-1, 31)))


GOOD = {"tp": 1, "pp": 2, "dp": 8, "micro_batch_size": 2}

PARSE_CASES = [
    ({k: v for k, v in GOOD.items() if k != "tp"}, "strategy.tp", None),
    ({k: v for k, v in GOOD.items() if k != "micro_batch_size"}, "strategy.micro_batch_size", None),
    ({**GOOD, "tp": "two"}, "strategy.tp", "two"),
    ({**GOOD, "pp": 0}, "strategy.pp", 0),
    ({**GOOD, "dp": -8}, "strategy.dp", -8),
    ({**GOOD, "dp": True}, "strategy.dp", True),
    ({**GOOD, "micro_batch_size": 1.5}, "strategy.micro_batch_size", 1.5),
    ({**GOOD, "partition": "15,15"}, "strategy.partition", "15,15"),
    ({**GOOD, "partition": []}, "strategy.partition", []),
    ({**GOOD, "partition": [15, "x"]}, "strategy.partition[1]", "x"),
    ({**GOOD, "partition": [15, 0]}, "strategy.partition[1]", 0),
    ({**GOOD, "placement": 1}, "strategy.placement", 1),
    ({**GOOD, "placement": [0, -1]}, "strategy.placement[1]", -1),
    ({**GOOD, "speed": "fast"}, "strategy.speed", "fast"),
]


@pytest.mark.parametrize("data, field, value", PARSE_CASES, ids=[c[1] + "=" + repr(c[2]) for c in PARSE_CASES])
def test_parse_strategy_rejects(data, field, value):
    with pytest.raises(SpecError) as info:
        parse_strategy(data)
    err = info.value
    assert err.field == field
    assert err.value == value and type(err.value) is type(value)
    assert "\n" not in str(err)


@pytest.mark.parametrize("value", ["1x2x8", None, [1, 2, 8]])
def test_parse_strategy_needs_a_mapping(value):
    with pytest.raises(SpecError) as info:
        parse_strategy(value)
    assert info.value.field == "strategy"


def test_parse_strategy_reads_every_field():
    strategy = parse_strategy({**GOOD, "partition": [10, 20], "placement": [1, 0], "rank": 3})
    assert strategy == Strategy(1, 2, 8, 2, (10, 20), (1, 0))
    assert parse_strategy(strategy.to_dict()) == strategy
    assert replace(strategy, partition=None).to_dict() == GOOD | {"placement": [1, 0]}
