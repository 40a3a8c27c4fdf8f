"""The terms the fidelity and modern-training issues added, each checked by hand on a small case,
and the search over the training techniques against brute force."""

from dataclasses import replace

import numpy as np
import pytest
from core_builders import GBPS, IDEAL, brute_force_over_knobs, build, close, examples, layer, node, scenario_dicts
from hypothesis import given, settings

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.terms.compute import attention_core
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.search import search
from amp_tui.core.spec.knobs import Knobs, knob_choices, resolve
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.scenario import parse_scenario
from amp_tui.core.spec.strategy import Strategy
from amp_tui.core.spec.validity import validate_strategy

LAYER = dict(params=1e6, flops=1e9, activation_bytes=1e6, output_bytes=4e6, tokens=1024, width=1024)


def ideal_with(**changes) -> dict:
    return {"parameters": {**IDEAL["parameters"], **changes}}


# -- latency, achieved bandwidth, fixed costs (issue 10) -----------------------------------------

def test_pipeline_send_pays_link_efficiency_and_latency():
    """100 Gbps inside a node is PCIe class: 2 x 4 MB over 0.5 of it, plus one latency each way."""
    calibration = ideal_with(**{"link_efficiency.pcie": 0.5, "link_latency_s.pcie": 1e-3})
    scn = build([node(1, "V100", 2, intra=100, inter=10)], [layer(**LAYER)] * 2, 4, calibration=calibration)
    p = CostModel(scn).candidate(1, 2, 1, 1, (0,)).predict((1, 1))
    cut = 2 * 4e6 / (0.5 * 100 * GBPS) + 2 * 1e-3
    assert [s.comm_s for s in p.stages] == pytest.approx([cut, cut], rel=1e-12)
    assert [s.latency_s for s in p.stages] == pytest.approx([2e-3, 2e-3], rel=1e-12)


def test_tensor_parallel_collectives_pay_latency_per_ring_step():
    """A block all-reduces twice per pass, forward and backward: 4 calls of 2 (tp - 1) hops. At
    0.5 MB a call and 100 us a hop (Simple's), NCCL's tuning model picks LL: its base latency
    (6.6 / 8.4 of Simple's), 0.18 of the hop latency per hop, half the bus bandwidth."""
    alpha, base = 1e-4, 8.4e-6
    block = layer(kind="block", tp_comm_bytes=1e6, **LAYER)
    scn = build([node(1, "V100", 4, intra=100, inter=10)], [block], 1,
                calibration=ideal_with(**{"link_latency_s.pcie": alpha, "collective_base_s": base}))
    p = CostModel(scn).candidate(4, 1, 1, 1, (0,)).predict((1,))
    wire = 0.5e6 * 2 * (4 - 1) / 4                       # one call's bytes over the ring
    latency = 6.6 / 8.4 * base + 2 * (4 - 1) * 0.18 * alpha
    simple = base + 2 * (4 - 1) * alpha + wire / (100 * GBPS)
    assert latency + wire / (0.5 * 100 * GBPS) < simple        # (LL is NCCL's pick here)
    assert p.stages[0].tp_comm_s == pytest.approx(4 * (latency + wire / (0.5 * 100 * GBPS)), rel=1e-12)
    assert p.stages[0].tp_latency_s == pytest.approx(4 * latency, rel=1e-12)
    assert p.stages[0].latency_s == pytest.approx(4 * latency, rel=1e-12)
    assert p.time_terms()["tensor-parallel latency"] == pytest.approx(4 * latency, rel=1e-12)


def test_fixed_costs_per_micro_batch_and_per_iteration():
    o, fixed = 2e-3, 0.05
    base = build([node(1, "V100", 2, intra=100, inter=10)], [layer(**LAYER)] * 2, 8, calibration=IDEAL)
    costly = build([node(1, "V100", 2, intra=100, inter=10)], [layer(**LAYER)] * 2, 8,
                   calibration=ideal_with(micro_batch_overhead_s=o, iteration_overhead_s=fixed))
    a, b = (CostModel(scn).candidate(1, 2, 1, 1, (0,)).predict((1, 1)) for scn in (base, costly))
    B, pp = 8, 2
    # every stage's busy time grows by o; the steady state sees it B - 1 times, fill and drain pp times
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s + (B - 1 + pp) * o + fixed, rel=1e-12)
    assert b.time_terms()["pipeline engine overhead"] == pytest.approx((B - 1 + pp) * o, rel=1e-12)
    assert b.time_terms()["per-iteration overhead"] == fixed


def test_hierarchical_all_reduce_by_hand():
    """dp = 8 over 2 nodes of 4 GPUs: inside each node 2 (4-1)/4 over NVLink, then 2 (2-1)/2 across
    (the node's four rings share its interface as the flat ring's one crossing flow does) beats the
    flat ring's 2 (8-1)/8 over the network."""
    layers = [layer(**LAYER)] * 2
    scn = build([node(2, "V100", 4, intra=2400, inter=100)], layers, 8, calibration=IDEAL)
    p = CostModel(scn).candidate(1, 1, 8, 1, (0,)).predict((2,))
    grads = 2e6 * 2                              # fp16 bytes of both layers' gradients
    intra, inter = 1 / (2400 * GBPS), 1 / (100 * GBPS)
    hierarchical = 2 * 3 / 4 * intra + 2 * 1 / 2 * inter
    assert hierarchical < 2 * 7 / 8 * inter
    assert p.dp_allreduce_s == pytest.approx(grads * hierarchical, rel=1e-12)


def test_link_classes_are_inferred_and_can_be_named():
    scn = build([node(1, "V100", 4, intra=170, inter=10), node(1, "A100-40GB", 8, intra=2400, inter=400)],
                [layer(**LAYER)], 1)
    assert [(g.intra_link_class, g.inter_link_class) for g in scn.cluster.nodes] == \
        [("nvlink", "ethernet"), ("nvlink", "infiniband")]
    named = node(1, "V100", 4, intra=170, inter=10)
    named["inter_node_link"] = "infiniband"
    assert build([named], [layer(**LAYER)], 1).cluster.nodes[0].inter_link_class == "infiniband"
    bad = dict(named, inter_node_link="carrier pigeon")
    with pytest.raises(SpecError) as info:
        build([bad], [layer(**LAYER)], 1)
    assert info.value.field == "cluster.nodes[0].inter_node_link"


def test_calibration_section_is_checked():
    for parameters, field in [({"compute_efficiency": 1.0}, "calibration.parameters"),
                              ({"link_efficiency.ethernet": 3.0}, "calibration.parameters.link_efficiency.ethernet"),
                              ({"nonsense": 1.0}, "calibration.parameters"),
                              ({"link_latency_s.wifi": 1e-3}, "calibration.parameters")]:
        with pytest.raises(SpecError) as info:
            build([node()], [layer(**LAYER)], 1, calibration={"parameters": parameters})
        assert info.value.field == field


# -- the training techniques (issue 11) ----------------------------------------------------------

def gpt(**training):
    """A small GPT (family form, so attention scores and shapes are known) on one 8-GPU node."""
    return parse_scenario({
        "name": "t", "cluster": {"nodes": [{"count": 1, "gpu": "A100-80GB", "gpus_per_node": 8,
                                            "intra_node_bandwidth": "300 GB/s", "inter_node_bandwidth": "200 Gbps"}]},
        "model": {"family": "gpt", "hidden_size": 1024, "num_layers": 4, "num_heads": 16,
                  "sequence_length": 2048, "vocab_size": 32000},
        "training": {"global_batch_size": 16, "precision": "bf16", **training},
        "calibration": IDEAL,
    })


def predict(scn, tp, pp, dp, mbs=1, **knobs):
    return evaluate(scn, Strategy(tp, pp, dp, mbs, **knobs))


def test_sequence_parallelism_splits_the_replicated_activations():
    scn = gpt()
    plain, sp = predict(scn, 4, 1, 2), predict(scn, 4, 1, 2, sequence_parallel=True)
    cols = scn.model.columns
    replicated = float(cols["activation_replicated_bytes"].sum())
    saved = replicated * (1 - 1 / 4)
    assert plain.stages[0].memory.activations_bytes - sp.stages[0].memory.activations_bytes == \
        pytest.approx(saved, rel=1e-9)
    assert sp.iteration_time_s < plain.iteration_time_s       # the replicated kernels run on 1/tp
    assert sp.strategy.sequence_parallel is True


def test_context_parallelism_divides_tokens_and_joins_the_world_size():
    scn = gpt()
    p1, p2 = predict(scn, 2, 1, 4), predict(scn, 2, 1, 2, cp=2)
    # each GPU keeps the activations of half the tokens (one micro-batch in flight either way)
    assert p2.stages[0].memory.activations_bytes == pytest.approx(p1.stages[0].memory.activations_bytes / 2,
                                                                  rel=1e-9)
    with pytest.raises(SpecError) as info:
        validate_strategy(scn, Strategy(2, 1, 4, 1, cp=2))
    assert info.value.field == "strategy.tp*cp*pp*dp"


def test_selective_recomputation_drops_attention_scores_and_recomputes_them():
    scn = gpt()
    none, selective, full = (predict(scn, 1, 2, 4, recompute=r, partition=(3, 3)) for r in ("none", "selective", "full"))
    _, score_bytes = attention_core(scn.model)
    blocks_stage0 = sum(1 for i in range(none.stages[0].first_layer, none.stages[0].last_layer + 1)
                        if scn.model.layers[i].kind == "block")
    in_flight = 2                               # 1F1B stage 0 of 2
    assert none.stages[0].memory.activations_bytes - selective.stages[0].memory.activations_bytes == \
        pytest.approx(in_flight * blocks_stage0 * score_bytes, rel=1e-9)
    assert full.stages[0].memory.activations_bytes < selective.stages[0].memory.activations_bytes
    assert none.iteration_time_s < selective.iteration_time_s < full.iteration_time_s


def test_fsdp_selective_is_op_level_checkpointing_by_hand():
    """torchtitan's op-level checkpointing of a GPT block keeps its input, the attention output and
    the outputs of the odd matrix multiplies (fused qkv: 3h, fc1: 4h): 9h elements per token, and
    recomputes the even ones (proj h x h, fc2 4h x h): 5 of 12 h^2 of the block's matmul FLOPs."""
    scn = gpt(framework="fsdp")
    h, s, e = 1024, 2048, 2
    none, selective = (predict(scn, 1, 2, 4, recompute=r, partition=(3, 3)) for r in ("none", "selective"))
    blocks_stage0 = sum(1 for i in range(none.stages[0].first_layer, none.stages[0].last_layer + 1)
                        if scn.model.layers[i].kind == "block")
    kept_block = 9 * h * s * e
    cols = scn.model.columns
    full_block = float(cols["activation_bytes"][1])
    in_flight = 2
    assert none.stages[0].memory.activations_bytes - selective.stages[0].memory.activations_bytes == \
        pytest.approx(in_flight * blocks_stage0 * (full_block - kept_block), rel=1e-9)
    assert none.iteration_time_s < selective.iteration_time_s
    from amp_tui.core.costmodel.terms.compute import op_checkpoint_block
    ops = op_checkpoint_block(scn.model)
    assert (ops.split, ops.replicated) == (h + 3 * h + 4 * h, h)
    assert ops.recomputed_share == pytest.approx(5 / 12)
    # Megatron's selective under the same model keeps more (only attention scores dropped).
    megatron = predict(gpt(), 1, 2, 4, recompute="selective", partition=(3, 3))
    assert megatron.stages[0].memory.activations_bytes > selective.stages[0].memory.activations_bytes


def test_fused_loss_drops_the_fp32_logit_buffers():
    plain, fused = (predict(gpt(fused_loss=f), 1, 2, 4, partition=(3, 3)) for f in (False, True))
    workspace = float(gpt().model.columns["workspace_bytes"].max())     # the head's 12 s V
    assert plain.stages[1].memory.workspace_bytes - fused.stages[1].memory.workspace_bytes == \
        pytest.approx(workspace, rel=1e-9)
    assert plain.stages[0].memory == fused.stages[0].memory


def test_fsdp_under_pipelines_keeps_gathered_weights_and_whole_fp32_gradients():
    scn = gpt(framework="fsdp", zero_stage=3)
    piped, flat = predict(scn, 1, 2, 4, partition=(3, 3)), predict(scn, 1, 1, 8)
    params = sum(float(scn.model.columns["params"][i]) for i in range(3))
    m = piped.stages[0].memory
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == \
        pytest.approx((params * (2 + 2 / 4), params * (4 + 2 / 4), params * 12 / 4), rel=1e-12)
    total = float(scn.model.columns["params"].sum())
    assert flat.stages[0].memory.weights_bytes == pytest.approx(total * 2 / 8, rel=1e-12)


@pytest.mark.parametrize("framework, collectives", [("deepspeed", 4), ("fsdp", 3), ("megatron", 3)])
def test_zero_3_under_full_recomputation_gathers_again_only_in_deepspeed(framework, collectives):
    """DeepSpeed releases a module's parameters after each forward, so the recomputed forward
    gathers them once more: 4 collectives per layer; FSDP's backward hook gathers a block once."""
    scn = gpt(framework=framework)
    cost = CostModel(scn, Knobs(zero_stage=3, recompute="full"))
    c = cost.candidate(1, 1, 8, 1, (0,))
    compute, _ = cost.layer_times(0, 1, 1)
    (_, _, _, (spb, latency), _), = c.stage_hardware
    traffic = collectives * scn.model.columns["params"] * 2 * spb
    times, _ = c.stage_layer_times
    assert times[0] == pytest.approx(compute + np.maximum(traffic - compute, 0) + collectives * latency, rel=1e-12)


def test_pipeline_sends_are_split_over_tensor_parallel_ranks():
    """Each of the tp ranks sends its 1/tp share at once: per rank, tp times fewer bytes."""
    scn = build([node(2, "V100", 2, intra=100, inter=10)], [layer(kind="block", tp_comm_bytes=1e6, **LAYER)] * 2, 4,
                calibration=IDEAL)
    one = CostModel(scn).candidate(1, 2, 2, 1, (0,)).predict((1, 1))
    two = CostModel(scn).candidate(2, 2, 1, 1, (0,)).predict((1, 1))
    # tp 1: 2 flows per node boundary share the NIC (dp 2); tp 2: 2 flows of half the bytes.
    assert two.stages[0].comm_s == pytest.approx(one.stages[0].comm_s / 2, rel=1e-12)


def test_zero_3_overlaps_parameter_traffic_with_compute():
    """Per layer per micro-batch: all-gather forward and backward, reduce-scatter gradients,
    3 x params x 2 bytes x (n-1)/n over the data-parallel ring; only what compute does not hide
    is exposed."""
    scn = gpt()
    cost = CostModel(scn, Knobs(zero_stage=3))
    c = cost.candidate(1, 1, 8, 1, (0,))
    compute, _ = cost.layer_times(0, 1, 1)
    (groups, _, _, shard, _), = c.stage_hardware
    spb, latency = shard
    traffic = 3 * scn.model.columns["params"] * 2 * spb
    exposed = np.maximum(traffic - compute, 0) + 3 * latency
    times, _ = c.stage_layer_times
    assert times[0] == pytest.approx(compute + exposed, rel=1e-12)
    assert c.predict((len(compute),)).dp_allreduce_s == 0          # nothing left after the last micro-batch


def test_interleaving_shrinks_fill_and_drain():
    scn = gpt(global_batch_size=32)
    flat, interleaved = predict(scn, 1, 2, 4), predict(scn, 1, 2, 4, virtual_stages=2)
    assert interleaved.fill_drain_s < flat.fill_drain_s
    assert interleaved.virtual_stages == 2
    with pytest.raises(SpecError):
        validate_strategy(scn, Strategy(1, 1, 8, 1, virtual_stages=2))


def test_fp8_needs_a_gpu_that_has_it_and_runs_matmuls_faster():
    h100 = {"count": 1, "gpu": "H100", "gpus_per_node": 8, "intra_node_bandwidth": "450 GB/s",
            "inter_node_bandwidth": "400 Gbps"}
    model = {"family": "gpt", "hidden_size": 4096, "num_layers": 4, "num_heads": 32, "sequence_length": 2048,
             "vocab_size": 32000}
    times = {}
    for precision in ("bf16", "fp8"):
        scn = parse_scenario({"cluster": {"nodes": [h100]}, "model": model,
                              "training": {"global_batch_size": 8, "precision": precision}})
        times[precision] = predict(scn, 1, 1, 8).iteration_time_s
    assert times["fp8"] < times["bf16"]
    a100 = dict(h100, gpu="A100-80GB")
    with pytest.raises(SpecError) as info:
        parse_scenario({"cluster": {"nodes": [a100]}, "model": model,
                        "training": {"global_batch_size": 8, "precision": "fp8"}})
    assert info.value.field == "training.precision" and "A100-80GB" in str(info.value)


def _llama_block(precision: str, gpu: str = "H100"):
    """One LLaMA block (8k tokens) on an 8-GPU node, AMP's ideal links: (scenario, GPU, params, model)."""
    from amp_tui.core.spec.hardware import gpu_catalog
    scn = parse_scenario({"cluster": {"nodes": [{"count": 1, "gpu": gpu, "gpus_per_node": 8,
                                                 "intra_node_bandwidth": "450 GB/s", "inter_node_bandwidth": "400 Gbps"}]},
                          "model": {"family": "llama", "hidden_size": 4096, "num_layers": 1, "num_heads": 32,
                                    "sequence_length": 8192, "vocab_size": 32000},
                          "training": {"global_batch_size": 8, "precision": precision}, "calibration": IDEAL})
    return scn, gpu_catalog()[gpu], scn.params, scn.model


@pytest.mark.parametrize("precision, gpu", [("fp8", "H100"), ("fp4", "B200")])
def test_low_precision_runs_linear_layers_at_its_peak_and_the_attention_core_in_bf16(precision, gpu):
    """By hand on one block: linear FLOPs at the fp8 (NVFP4) peak x fp8_efficiency
    (fp4_efficiency), attention FLOPs at bf16; activations kept as Transformer Engine's casts."""
    from amp_tui.core.costmodel.terms.compute import (
        FP8_ACTIVATION_SHARE,
        activation_terms,
        analytic_forward,
        matmul_efficiency,
    )
    scn, gpu, params, model = _llama_block(precision, gpu)
    assert precision in gpu.precisions and gpu.peak_flops(precision) > gpu.peak_flops("bf16")
    low, bf16 = (analytic_forward(model, gpu, p, params, 1, 1, False, 1.0) for p in (precision, "bf16"))
    block = [i for i, layer in enumerate(model.layers) if layer.kind == "block"][0]
    flops, _ = attention_core(model)
    rows, width = float(model.columns["tokens"][block]), float(model.columns["width"][block])
    eff = float(matmul_efficiency(gpu, params, np.array([rows]), np.array([width]))[0])
    linear = float(model.columns["flops"][block]) - flops
    expected_gap = (linear / (gpu.peak_flops("bf16") * eff)
                    - linear / (gpu.peak_flops(precision) * eff * params(f"{precision}_efficiency")))
    assert bf16[block] - low[block] == pytest.approx(expected_gap, rel=1e-9)
    knobs = resolve(Strategy(1, 1, 8, 1), scn.training)
    kept_low, _ = activation_terms(model, 1, knobs, scn.training)
    kept_bf16, _ = activation_terms(model, 1, knobs, replace(scn.training, precision="bf16"))
    assert kept_low[block] == pytest.approx(FP8_ACTIVATION_SHARE * kept_bf16[block])


def test_the_catalog_gives_blackwell_its_dense_nvfp4_rate():
    from amp_tui.core.spec.hardware import gpu_catalog
    assert [gpu_catalog()[g].peak_flops("fp4") for g in ("B200", "GB200", "GB300")] == [9000e12, 10000e12, 15000e12]


def test_fp4_needs_a_gpu_that_has_it():
    h100 = {"count": 1, "gpu": "H100", "gpus_per_node": 8, "intra_node_bandwidth": "450 GB/s",
            "inter_node_bandwidth": "400 Gbps"}
    with pytest.raises(SpecError) as info:
        parse_scenario({"cluster": {"nodes": [h100]}, "model": {"preset": "llama3.1-8b"},
                        "training": {"global_batch_size": 8, "precision": "fp4"}})
    assert info.value.field == "training.precision" and "H100" in str(info.value)
    with pytest.raises(SpecError) as info:       # a GPU that claims fp4 must give its rate
        parse_scenario({"cluster": {"nodes": [dict(h100, gpu={"base": "H100", "precisions": ["bf16", "fp4"]})]},
                        "model": {"preset": "llama3.1-8b"}, "training": {"global_batch_size": 8}})
    assert info.value.field.endswith("fp4_tflops")


def test_flash_attention_backward_recomputes_the_scores_by_hand():
    """Flash attention's backward runs 5 multiplies against the forward's 2: the attention core
    costs 3.5 forwards. By hand on one LLaMA block: compute - 3 x forward = 0.5 x attention."""
    from amp_tui.core.costmodel.terms.compute import analytic_forward, matmul_efficiency
    scn, gpu, params, model = _llama_block("bf16")
    block = [i for i, layer in enumerate(model.layers) if layer.kind == "block"][0]
    compute, _ = CostModel(scn).layer_times(0, 1, 2)
    forward = analytic_forward(model, gpu, "bf16", params, 1, 1, False, 2.0)
    flops, _ = attention_core(model)
    eff = float(matmul_efficiency(gpu, params, np.array([8192.0 * 2]), np.array([4096.0]))[0])
    assert compute[block] - 3 * forward[block] == pytest.approx(0.5 * flops * 2 / (gpu.peak_flops("bf16") * eff),
                                                                rel=1e-9)
    head = [i for i, layer in enumerate(model.layers) if layer.kind == "head"][0]
    assert compute[head] == pytest.approx(3 * forward[head], rel=1e-12)


def test_tp_comm_overlap_hides_its_share_of_the_collectives():
    scn = gpt(tp_comm_overlap=False)
    plain = predict(scn, 4, 1, 2)
    overlapped = predict(gpt(tp_comm_overlap=True), 4, 1, 2)
    share = scn.params("tp_overlap")
    assert overlapped.stages[0].tp_comm_s == pytest.approx(plain.stages[0].tp_comm_s * (1 - share), rel=1e-9)
    assert overlapped.iteration_time_s < plain.iteration_time_s


def test_plan_says_which_techniques_the_search_chose():
    scn = gpt(recompute="auto", sequence_parallel="auto")
    result = search(scn, top=3)
    assert result.strategies
    chosen = {p.strategy.recompute for p in result.strategies} | {"none"}
    assert chosen <= {"none", "selective", "full"}
    assert len(knob_choices(scn.training)) == 3 * 2


# -- the search over techniques against brute force ----------------------------------------------

@pytest.mark.slow          # brute force over every technique setting: the suite's longest test; CI runs it
@settings(max_examples=examples(25), deadline=None)
@given(spec=scenario_dicts(max_layers=5, max_gpus=8))
def test_search_with_techniques_equals_brute_force(spec):
    spec["model"]["sequence_length"] = 8
    spec["training"].update(recompute="auto", zero_stage="auto", sequence_parallel="auto",
                            context_parallel="auto", virtual_stages="auto")
    spec["training"]["global_batch_size"] = 8
    scn = parse_scenario(spec)
    best = brute_force_over_knobs(scn)
    result = search(scn, top=4)
    times = [p.iteration_time_s for p in result.strategies]
    expected = sorted(best.values())[:4]
    assert len(times) == len(expected)
    assert all(close(a, b) for a, b in zip(times, expected)), (times, expected)
    for p in result.strategies:
        again = evaluate(scn, p.strategy)
        assert again.iteration_time_s == p.iteration_time_s
        assert replace(p.strategy, partition=None).cp == p.strategy.cp


def test_backward_pass_hides_part_of_the_all_reduce():
    """Bucketed gradient reduction overlaps the last micro-batch's backward pass (2 of its 3
    passes): of the all-reduce, only what outlasts that share of the compute is exposed."""
    layers = [layer(**LAYER)] * 2
    base = build([node(2, "V100", 1, intra=100, inter=10)], layers, 2, framework="fsdp", calibration=IDEAL)
    overlap = build([node(2, "V100", 1, intra=100, inter=10)], layers, 2, framework="fsdp",
                    calibration=ideal_with(**{"dp_overlap.fsdp": 0.5}))
    plain, hidden = (CostModel(scn).candidate(1, 1, 2, 1, (0,)).predict((2,)) for scn in (base, overlap))
    compute = plain.stages[0].compute_s
    assert hidden.dp_allreduce_s == pytest.approx(max(plain.dp_allreduce_s - 0.5 * 2 / 3 * compute, 0), rel=1e-12)
    assert hidden.iteration_time_s == pytest.approx(plain.iteration_time_s - plain.dp_allreduce_s
                                                    + hidden.dp_allreduce_s, rel=1e-12)


def test_expert_parallelism_shards_experts_and_pays_the_all_to_all():
    """Mixtral 8x22B on a GB200 rack: ep = 4 keeps a quarter of each MoE layer's experts per GPU,
    and every MoE layer sends its tokens to the experts and back, forward and backward."""
    from amp_tui.core.costmodel.terms.experts import alltoall_bytes_per_gpu, alltoall_seconds

    scn = parse_scenario({**load_preset("scenarios", "gb200-nvl72-mixtral-8x22b"), "calibration": IDEAL})
    plain, sharded = (evaluate(scn, Strategy(1, 9, 8, 1, partition=None, ep=ep)) for ep in (None, 4))
    cols = scn.model.columns
    stage = sharded.stages[0]
    layers = slice(stage.first_layer, stage.last_layer + 1)
    params = float((cols["params"][layers] - cols["expert_params"][layers] * 3 / 4).sum())
    assert stage.memory.weights_bytes == pytest.approx(params * scn.training.bytes_per_element, rel=1e-9)
    assert sharded.peak_memory_bytes < plain.peak_memory_bytes
    node = scn.cluster.nodes[0]
    per_byte = alltoall_seconds(1.0, 4, 4, node.gpus_per_node, node.intra_node_bandwidth, node.inter_node_bandwidth)
    moved = alltoall_bytes_per_gpu(float(cols["moe_alltoall_bytes"][layers].sum()), 1)
    same_split = evaluate(scn, Strategy(1, 9, 8, 1, partition=sharded.strategy.partition))
    assert stage.compute_s - same_split.stages[0].compute_s == pytest.approx(2 * moved * per_byte, rel=1e-9)
    assert sharded.strategy.ep == 4


def test_zero_shards_expert_state_over_the_expert_data_parallel_group():
    """Under ZeRO-1 with ep = 4 of dp = 8, a GPU keeps 1/4 of the experts, and their optimizer
    state is sharded over the 2 ranks that hold the same experts, not over all 8."""
    scn = parse_scenario({**load_preset("scenarios", "gb200-nvl72-mixtral-8x22b"), "calibration": IDEAL})
    scn = scn.with_training(zero_stage=1)
    p = evaluate(scn, Strategy(1, 9, 8, 1, partition=None, ep=4))
    cols = scn.model.columns
    stage = p.stages[0]
    layers = slice(stage.first_layer, stage.last_layer + 1)
    experts = float(cols["expert_params"][layers].sum()) / 4
    dense = float(cols["params"][layers].sum()) - float(cols["expert_params"][layers].sum())
    optimizer = scn.training.state_bytes_per_param - 2 * scn.training.bytes_per_element
    assert stage.memory.optimizer_bytes == pytest.approx(dense * optimizer / 8 + experts * optimizer / 2, rel=1e-9)
    assert stage.memory.weights_bytes == pytest.approx((dense + experts) * scn.training.bytes_per_element, rel=1e-9)
