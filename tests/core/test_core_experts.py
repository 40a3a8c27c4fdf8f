"""Mixture of experts: the family builder's counts, the layer columns, ep in the strategy, and the
all-to-all and expert-memory terms, each checked against a hand computation."""

from __future__ import annotations

import pytest

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.terms.experts import (
    alltoall_bytes_per_gpu,
    alltoall_seconds,
    expert_params_per_gpu,
    expert_state_bytes_per_gpu,
)
from amp_tui.core.spec.model import parse_model
from amp_tui.core.spec.scenario import load_scenario, parse_scenario
from amp_tui.core.spec.strategy import Strategy, parse_strategy
from amp_tui.core.spec.validity import _validate_ep, validate_strategy

TINY = {"family": "llama", "hidden_size": 8, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
        "ffn_hidden_size": 16, "sequence_length": 4, "vocab_size": 32}


def block(model):
    return next(layer for layer in model.groups if layer.kind == "block")


def test_moe_block_counts_by_hand():
    """h 8, kv width 4, 4 experts of FFN 6, top 2, s 4, 2-byte elements."""
    dense = block(parse_model(TINY, 2))
    moe = block(parse_model({**TINY, "num_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 6}, 2))
    attention = 2 * 8 * 8 + 2 * 8 * 4            # q, o, and k, v of width 4: 192
    expert = 3 * 8 * 6                           # SwiGLU: 144 per expert
    assert moe.expert_params == 4 * expert == 576
    assert moe.params == attention + 4 * expert + 8 * 4 + 2 * 8   # + router 8x4 + two norms = 816
    # FLOPs: 2 per multiply-add over the attention matmuls, 2 of 4 experts and the router; plus 4 s^2 h.
    assert moe.flops == 2 * 4 * (attention + 2 * expert + 8 * 4) + 4 * 4 * 4 * 8 == 4608
    # Dispatch and combine: each of 4 tokens' 8-wide state to 2 experts and back, 2 bytes each.
    assert moe.moe_alltoall_bytes == 2 * 4 * 2 * 8 * 2 == 256
    assert moe.experts == 4
    # Activations: the dense MLP's (2h + 8f) becomes top_k expert copies plus router probabilities.
    assert moe.activation_bytes - dense.activation_bytes == 4 * (2 * (2 * 8 + 8 * 6) + 2 * 4 - (2 * 8 + 8 * 16))
    assert dense.experts == dense.expert_params == dense.moe_alltoall_bytes == 0


def test_mixtral_presets_match_published_sizes():
    for name, total, active in (("mixtral-8x7b", 46.7e9, 12.9e9), ("mixtral-8x22b", 140.6e9, 39.2e9)):
        model = parse_model(name, 2)
        moe = block(model)
        top_k, experts = model.shape["top_k"], model.shape["num_experts"]
        active_params = model.total_params - moe.repeat * moe.expert_params * (1 - top_k / experts)
        assert model.total_params == pytest.approx(total, rel=0.005), name
        assert active_params == pytest.approx(active, rel=0.01), name
        assert model.columns["experts"].max() == experts == 8
        assert model.columns["expert_params"].sum() == moe.repeat * moe.expert_params


def test_moe_fields_round_trip_and_reach_the_columns():
    model = parse_model({**TINY, "num_experts": 4, "top_k": 1}, 2)
    again = parse_model(model.to_dict(), 2)
    assert again == model and again.shape["expert_ffn_hidden_size"] == 16
    explicit = parse_model({"name": "x", "sequence_length": 4, "layers": [block(model).to_dict()]}, 2)
    assert block(explicit).moe_alltoall_bytes == block(model).moe_alltoall_bytes
    assert list(explicit.columns["expert_params"]) == [block(model).expert_params] * 2


@pytest.mark.parametrize("spec, field", [
    ({"num_experts": 4}, "model.top_k"),
    ({"num_experts": 4, "top_k": 5}, "model.top_k"),
    ({"top_k": 2}, "model.top_k"),
    ({"expert_ffn_hidden_size": 32}, "model.expert_ffn_hidden_size"),
    ({"num_experts": 0, "top_k": 1}, "model.num_experts"),
])
def test_moe_spec_errors_name_the_field(spec, field):
    with pytest.raises(SpecError) as info:
        parse_model({**TINY, **spec}, 2)
    assert info.value.field == field


def test_explicit_layer_expert_params_cannot_exceed_params():
    layer = {"params": 10, "flops": 1, "activation_bytes": 1, "output_bytes": 1, "expert_params": 11}
    with pytest.raises(SpecError) as info:
        parse_model({"name": "x", "layers": [layer]}, 2)
    assert info.value.field == "model.layers[0].expert_params"
    with pytest.raises(SpecError) as info:
        parse_model({"name": "x", "layers": [{**layer, "expert_params": 5, "experts": 2.5}]}, 2)
    assert info.value.field == "model.layers[0].experts"


# -- ep in the strategy ------------------------------------------------------------------------------

def moe_scenario(experts=8):
    return parse_scenario({
        "name": "moe",
        "cluster": {"nodes": [{"count": 2, "gpu": "H100", "gpus_per_node": 8, "intra_node_bandwidth": "450 GB/s",
                               "inter_node_bandwidth": "3200 Gbps"}]},
        "model": {**TINY, "num_heads": 2, "num_experts": experts, "top_k": 2},
        "training": {"global_batch_size": 64, "precision": "bf16"}})


def test_ep_parses_round_trips_and_keeps_the_world_size():
    strategy = parse_strategy({"tp": 2, "pp": 1, "dp": 8, "micro_batch_size": 1, "ep": 4})
    assert strategy.ep == 4 and strategy.to_dict()["ep"] == 4
    assert parse_strategy(strategy.to_dict()) == strategy
    assert strategy.num_gpus == 16          # tp x cp x pp x dp: ep divides dp x cp, it is not a factor
    validate_strategy(moe_scenario(), strategy)
    assert "ep" not in parse_strategy({"tp": 1, "pp": 1, "dp": 16, "micro_batch_size": 1}).to_dict()


@pytest.mark.parametrize("strategy, reason", [
    (Strategy(2, 1, 8, 1, ep=3), "dp*cp"),                 # 3 does not divide dp 8
    (Strategy(1, 1, 16, 1, ep=16), "number of experts"),   # 16 does not divide 8 experts
])
def test_ep_errors(strategy, reason):
    with pytest.raises(SpecError) as info:
        validate_strategy(moe_scenario(), strategy)
    assert info.value.field == "strategy.ep" and reason in info.value.reason


def test_ep_needs_a_moe_model():
    scenario = load_scenario("paper-homogeneous")
    with pytest.raises(SpecError) as info:
        validate_strategy(scenario, Strategy(1, 1, 16, 1, ep=2))
    assert info.value.field == "strategy.ep" and "mixture-of-experts" in info.value.reason


def test_ep_with_cp_divides_dp_times_cp():
    """Megatron draws the expert-parallel group from dp x cp ranks (checked apart from the world size)."""
    scenario = moe_scenario(experts=16)
    _validate_ep(scenario, Strategy(2, 1, 4, 1, cp=4, ep=16), "strategy")
    with pytest.raises(SpecError) as info:
        _validate_ep(scenario, Strategy(2, 1, 4, 1, cp=2, ep=16), "strategy")
    assert info.value.field == "strategy.ep" and "dp*cp (4*2=8)" in info.value.reason


# -- terms --------------------------------------------------------------------------------------------

def test_alltoall_inside_a_node():
    """8 GPUs, ep 8, one node: each sends 7/8 of 800 MB over NVLink at 400 GB/s."""
    assert alltoall_seconds(800e6, 8, 8, 8, 400e9, 100e9) == pytest.approx(700e6 / 400e9)


def test_alltoall_across_nodes_shares_the_network():
    """ep 16 over two nodes of 8: 7 shares local, 8 remote. Share 50 MB; NVLink 400 GB/s takes
    350 MB in 0.875 ms; 400 MB remote through a 400 GB/s node network shared by 8 GPUs (50 GB/s)
    takes 8 ms: the network sets the time."""
    assert alltoall_seconds(800e6, 16, 8, 8, 400e9, 400e9) == pytest.approx(400e6 / 50e9)


def test_alltoall_of_one_gpu_or_nothing_is_free():
    assert alltoall_seconds(800e6, 1, 8, 8, 400e9, 400e9) == 0.0
    assert alltoall_seconds(0.0, 8, 8, 8, 400e9, 400e9) == 0.0


def test_alltoall_bytes_per_gpu():
    """Mixtral 8x7B block: 2 x 4096 tokens x top-2 x 4096 x 2 bytes = 134 MB per sample; micro-batch
    2, tp 2, cp 2 leaves a quarter of the tokens on each GPU: 67 MB."""
    per_sample = 2 * 4096 * 2 * 4096 * 2
    assert alltoall_bytes_per_gpu(per_sample, 2, tp=2, cp=2) == per_sample * 2 / 4 == 67_108_864


def test_expert_memory_by_hand():
    """1.4e9 expert params, ep 4, tp 2: 175e6 per GPU. Adam bf16 (2 + 2 + 12 bytes), expert data-
    parallel group 4: ZeRO 0 keeps all 16 bytes, 1 shards the 12, 2 also the gradients, 3 everything."""
    assert expert_params_per_gpu(1.4e9, 4, 2) == 175e6
    per_stage = {0: 16, 1: 2 + 2 + 3, 2: 2 + 0.5 + 3, 3: 0.5 + 0.5 + 3}
    for stage, bytes_per_param in per_stage.items():
        assert expert_state_bytes_per_gpu(1.4e9, 4, 2, 4, stage, 2, 2, 12) == pytest.approx(175e6 * bytes_per_param)
    with pytest.raises(ValueError):
        expert_state_bytes_per_gpu(1.4e9, 4, 2, 0, 1, 2, 2, 12)
