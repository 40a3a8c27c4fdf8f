"""Fixed costs (issue 26): the host's time to issue a layer's kernels, per execution profile, and
NCCL's per-call latency of small collectives, each checked by hand on a small case; compiled
execution; the memory a GPU really has; GeForce cards' peer-to-peer through host memory."""

import math

import pytest
from core_builders import GIB, IDEAL, build, layer, node

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.terms.collectives import ring_allreduce_time
from amp_tui.core.costmodel.terms.host import KIND_SHARE, host_issue_time
from amp_tui.core.spec.frameworks import PROFILES, execution_key, loss_buffers
from amp_tui.core.spec.hardware import gpu_catalog, parse_gpu
from amp_tui.core.spec.params import ModelParams
from amp_tui.core.spec.scenario import load_scenario, parse_scenario

# A GPU step of a microsecond at most: the host's issue time is the longer path.
TINY = {"params": 0.0, "flops": 1e6, "activation_bytes": 0.0, "output_bytes": 0.0}


def ideal_with(**changes) -> dict:
    return {"parameters": {**IDEAL["parameters"], **changes}}


def host_scenario(framework="megatron", recompute="none", compile_mode=False, **params):
    layers = [layer(name="embedding", kind="embedding", **TINY), layer(name="block", kind="block", **TINY),
              layer(name="head", kind="head", **TINY), layer(name="no-op", kind="other")]
    return build([node(1, "V100", 1)], layers, 4, framework=framework, recompute=recompute, compile=compile_mode,
                 calibration=ideal_with(**params))


def test_a_layer_takes_the_host_time_to_issue_it_when_the_gpu_is_faster():
    """host_forward_s 1 ms and host_backward_s 2 ms per block: a block takes 3 ms a micro-batch,
    an embedding a fifth of it, a head two fifths, a layer without FLOPs nothing; four
    micro-batches on one stage: 4 x (1 + 0.2 + 0.4) x 3 ms of 'kernel issue (host)'."""
    forward, backward = 1e-3, 2e-3
    scn = host_scenario(**{"host_forward_s.megatron": forward, "host_backward_s.megatron": backward})
    p = CostModel(scn).candidate(1, 1, 1, 1, (0,)).predict((4,))
    per_micro_batch = (KIND_SHARE["block"] + KIND_SHARE["embedding"] + KIND_SHARE["head"]) * (forward + backward)
    assert (KIND_SHARE["embedding"], KIND_SHARE["head"]) == (0.2, 0.4)
    # what the GPU computes (under a microsecond) is inside the host's time, not added to it
    assert p.stages[0].compute_s == pytest.approx(per_micro_batch, rel=1e-12)
    assert p.stages[0].host_s == pytest.approx(per_micro_batch, rel=1e-3)
    assert p.time_terms()["kernel issue (host)"] == pytest.approx(4 * p.stages[0].host_s, rel=1e-12)


def test_full_recomputation_issues_the_forward_twice():
    forward, backward = 1e-3, 2e-3
    scn = host_scenario(recompute="full", **{"host_forward_s.megatron": forward, "host_backward_s.megatron": backward})
    cost = CostModel(scn)
    host = cost.host_times("V100", 1)
    assert host[1] == pytest.approx(2 * forward + backward)
    assert host[3] == 0.0                       # no FLOPs, no kernels


def test_the_host_floor_hides_nothing_when_the_gpu_is_slower():
    """A block of 10 TFLOP on a V100: its GPU time dwarfs a millisecond of host time, which adds nothing."""
    scn = build([node(1, "V100", 1)], [layer(name="block", kind="block", flops=1e13)], 4,
                calibration=ideal_with(**{"host_forward_s.megatron": 1e-3, "host_backward_s.megatron": 2e-3}))
    p = CostModel(scn).candidate(1, 1, 1, 1, (0,)).predict((1,))
    assert p.stages[0].host_s == 0.0 and p.time_terms()["kernel issue (host)"] == 0.0


def test_tensor_parallel_collectives_cost_the_host_to_issue():
    """At tp 2, a block's 4 all-reduces (2 forward, 2 backward) add 4 x collective_host_s to its host time."""
    scn = build([node(1, "V100", 2, intra=1000)], [layer(name="block", kind="block", tp_comm_bytes=1e3, **TINY)], 2,
                calibration=ideal_with(**{"host_forward_s.megatron": 1e-3, "host_backward_s.megatron": 2e-3,
                                          "collective_host_s.megatron": 1e-4}))
    cost = CostModel(scn)
    assert cost.host_times("V100", 2)[0] == pytest.approx(3e-3 + 4 * 1e-4)
    assert cost.host_times("V100", 1)[0] == pytest.approx(3e-3)


def test_host_issue_time_by_profile():
    """The defaults are the profiles' kernels times their per-kernel cost; compiled execution issues
    far less than eager PyTorch, CUDA graphs almost nothing."""
    params = ModelParams()
    model = host_scenario().model
    eager = host_issue_time(model, params, "pytorch", 1.0, 0.0)[1]
    compiled = host_issue_time(model, params, "compiled", 1.0, 0.0)[1]
    graphs = host_issue_time(model, params, "cudagraphs", 1.0, 0.0)[1]
    p = PROFILES["pytorch"]
    assert eager == pytest.approx(p.forward_kernels * p.host_s_per_forward_kernel
                                  + p.backward_kernels * p.host_s_per_backward_kernel)
    assert graphs < compiled < eager / 5
    assert execution_key("pytorch", True) == "compiled" and execution_key("fsdp", "cudagraphs") == "cudagraphs"
    assert execution_key("megatron", False) == "megatron"


def test_the_eager_profile_matches_the_h200_block_floor():
    """The plain-torch eager profile's host times are the floor the H200 block measurements show."""
    from amp_tui.core.validation.blocks import floor_from_measurements

    forward, backward = floor_from_measurements()
    eager = PROFILES["fsdp"]
    assert eager.host_forward_s == pytest.approx(forward, rel=0.01)
    assert eager.host_backward_s == pytest.approx(backward, rel=0.01)
    assert 0.4e-3 < forward < 0.7e-3 and 1.2e-3 < backward < 1.7e-3


# -- NCCL's latency by protocol ---------------------------------------------------------------

def test_a_small_all_reduce_pays_nccl_low_latency_protocol():
    """8 ranks, 64 KB, hops of 3 us (Simple's), a bus of 300 GB/s: LL's 6.6 us base and 14 hops of
    0.18 x 3 us, and the bytes at half the bus capped at 87.7 GB/s (llMaxBws), beat LL128 and Simple."""
    wire = 64e3 * 14 / 8
    latency, bandwidth = ring_allreduce_time([64e3], 8, 1 / 300e9, 3e-6)
    ll = (6.6e-6 + 14 * 0.18 * 3e-6, wire / 87.7e9)
    simple = 8.4e-6 + 14 * 3e-6 + wire / 300e9
    ll128 = 14.0e-6 + 14 * 0.45 * 3e-6 + wire / (0.92 * 300e9)
    assert (latency[0], bandwidth[0]) == pytest.approx(ll, rel=1e-12)
    assert sum(ll) < min(simple, ll128)


def test_a_large_all_reduce_runs_at_the_bus_bandwidth():
    """1 GB over 8 ranks: Simple at the whole bus wins; LL is capped at 87.7 GB/s (NCCL's llMaxBws)."""
    wire = 1e9 * 14 / 8
    latency, bandwidth = ring_allreduce_time([1e9], 8, 1 / 300e9, 3e-6)
    assert latency[0] == pytest.approx(8.4e-6 + 14 * 3e-6, rel=1e-12)
    assert bandwidth[0] == pytest.approx(wire / 300e9, rel=1e-12)
    small = ring_allreduce_time([1e3], 8, 1 / 1e12, 3e-6)          # LL's pick, its cap binding
    assert small[1][0] == pytest.approx(1e3 * 14 / 8 / 87.7e9, rel=1e-12)


def test_one_rank_or_no_bytes_costs_nothing():
    assert ring_allreduce_time([1e6], 1, 1e-9, 1e-6) == (pytest.approx([0.0]), pytest.approx([0.0]))
    latency, bandwidth = ring_allreduce_time([0.0, 1e6], 4, 1e-9, 1e-6)
    assert latency[0] == 0.0 and bandwidth[0] == 0.0 and latency[1] > 0


# -- compiled execution, plain PyTorch ----------------------------------------------------------

def _gpt(framework: str, compile_mode=False, mbs: int = 1):
    spec = load_scenario("paper-homogeneous").to_dict()
    return parse_scenario({**spec, "model": {"family": "gpt", "name": "GPT-2 medium", "hidden_size": 1024,
                                             "num_layers": 24, "num_heads": 16, "sequence_length": 1024,
                                             "vocab_size": 50257, "flash_attention": True},
                           "cluster": {"nodes": [{"count": 1, "gpu": "H200", "gpus_per_node": 1,
                                                  "intra_node_bandwidth": "450 GB/s",
                                                  "inter_node_bandwidth": "400 Gbps"}]},
                           "training": {"global_batch_size": 32, "precision": "bf16", "framework": framework,
                                        "compile": compile_mode}})


def test_compile_round_trips_and_refuses_other_values():
    for mode in (False, True, "cudagraphs"):
        scn = _gpt("pytorch", mode)
        assert parse_scenario(scn.to_dict()).training.compile == mode
    spec = _gpt("pytorch").to_dict()
    for bad in ("yes", 1, "max-autotune"):
        with pytest.raises(SpecError) as err:
            parse_scenario({**spec, "training": {**spec["training"], "compile": bad}})
        assert err.value.field == "training.compile"


def test_plain_pytorch_is_launch_bound_at_micro_batch_one_and_compile_lifts_it():
    """GPT-2 medium, one H200, micro-batch 1: eager Hugging Face code is bound by issuing its
    kernels; compiled, by far less; at micro-batch 32 the GPU sets the pace."""
    eager, compiled = (CostModel(_gpt("pytorch", mode)).candidate(1, 1, 1, 1, (0,)).predict((26,))
                       for mode in (False, True))
    assert eager.time_terms()["kernel issue (host)"] > 0.5 * eager.iteration_time_s
    assert compiled.iteration_time_s < 0.5 * eager.iteration_time_s
    big = CostModel(_gpt("pytorch")).candidate(1, 1, 1, 32, (0,)).predict((26,))
    assert big.time_terms()["kernel issue (host)"] < 0.01 * big.iteration_time_s


def test_eager_pytorch_keeps_more_activations_and_compiled_fewer():
    """Per block, Hugging Face eager code keeps 1.9x a fused block's activations (the GELU's
    intermediates), compiled code 0.9x; the loss's fp32 logit copies 1.5 of 3, 0.33 compiled."""
    def activations(framework, mode):
        cost = CostModel(_gpt(framework, mode))
        prefix, _ = cost.activation_arrays(1)
        return prefix[-1]
    megatron, eager, compiled = activations("megatron", False), activations("pytorch", False), activations("pytorch", True)
    assert eager > 1.8 * compiled and compiled < megatron < eager
    assert loss_buffers("pytorch", False) == 1.5 and loss_buffers("pytorch", True) == pytest.approx(0.33)
    assert loss_buffers("fsdp", True) == loss_buffers("fsdp", False)       # torchtitan compiles blocks, not the loss


# -- the memory a GPU has, GeForce peer-to-peer ---------------------------------------------------

def test_every_catalog_gpu_states_what_pytorch_can_allocate():
    catalog = gpu_catalog()
    assert catalog["H200"].usable_memory_bytes / GIB == pytest.approx(139.8, abs=0.01)
    assert 21.5 < catalog["L4"].usable_memory_bytes / GIB < 22.5
    for name, gpu in catalog.items():
        assert 0.85 * gpu.memory_bytes < gpu.usable_memory_bytes <= 1.1 * gpu.memory_bytes, name
    # a Llama-shaped run that used 129.6 GiB fits the H200 now (it did not at 141 GB read as 131 GiB)
    assert catalog["H200"].usable_memory_bytes > 129.6 * GIB
    with pytest.raises(SpecError) as err:
        parse_gpu({"base": "H100", "memory": "80 GB", "usable_memory": "100 GB"}, "gpu")
    assert err.value.field == "gpu.usable_memory"


def test_geforce_cards_talk_through_host_memory():
    """A PCIe node of RTX 3090s (no peer-to-peer) is link class host: its rings run at
    link_efficiency.host of the x16 rate, an A10G node's (peer-to-peer) at PCIe's."""
    geforce, a10g = (build([{**node(1, gpu, 8, intra=256), "intra_node_link": "pcie"}], [layer(**TINY)], 8)
                     for gpu in ("RTX-3090", "A10G"))
    assert geforce.cluster.nodes[0].intra_link_class == "host"
    assert a10g.cluster.nodes[0].intra_link_class == "pcie"
    assert not gpu_catalog()["RTX-2080Ti"].peer_to_peer and gpu_catalog()["TITAN-V"].peer_to_peer
    params = ModelParams()
    slow, fast = (CostModel(s).layout(1, 1, 8, (0,)).dp_allreduce_seconds_per_byte[0] for s in (geforce, a10g))
    assert slow / fast == pytest.approx(params("link_efficiency", "pcie") / params("link_efficiency", "host"))
    assert params("link_latency_s", "host") > params("link_latency_s", "pcie")
    assert math.isclose(params("link_efficiency", "host"), 0.35)
