"""Memory as the engines allocate it (issue 35), each term by hand: fp32 main gradients by engine,
precision and ZeRO stage, the optimizer step's fp32 copies, DDP's and DeepSpeed's buckets, the
CUDA context by software era and GPU generation, NCCL's buffers per process group and transport."""

import pytest
from core_builders import GIB, IDEAL, build, layer, node

from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.memory import breakdown, engine_state, state_bytes_per_param
from amp_tui.core.costmodel.terms import runtime
from amp_tui.core.search.partition.memory import partition_fits
from amp_tui.core.spec.scenario import parse_scenario

MIB = 2**20
P = [1000.0, 2000.0, 3000.0, 4000.0]
LAYERS = [layer(params=p, activation_bytes=10.0, output_bytes=1.0, width=64) for p in P]


def scenario(framework="megatron", precision="bf16", zero_stage=0, gpus_per_node=8, gpu="A100-80GB", count=1,
             intra=4800, inter=1600, **training):
    return build([node(count, gpu, gpus_per_node, intra, inter)], LAYERS, 64, framework=framework,
                 precision=precision, zero_stage=zero_stage, calibration=IDEAL, **training)


def per_param(s):
    return (s.weights, s.gradients, s.main_gradients, s.optimizer, s.buckets, s.step)


@pytest.mark.parametrize("precision, d, expected", [
    # Megatron's docs (dist_optimizer.md): bf16 params with fp32 grads 18 and 6 + 12/d; fp16 20 and
    # 4 + 16/d, the fp32 copy of the (shard's) gradients made by the step; fp32 16 and 8 + 8/d
    ("bf16", 1, (2, 0, 4, 12, 0, 0)), ("bf16", 4, (2, 0, 4, 3, 0, 0)),
    ("fp16", 1, (2, 2, 0, 12, 0, 4)), ("fp16", 4, (2, 2, 0, 3, 0, 1)),
    ("fp32", 4, (4, 4, 0, 2, 0, 0)),
])
def test_megatron_state_per_parameter(precision, d, expected):
    training = scenario(precision=precision, zero_stage=1 if d > 1 else 0).training
    assert per_param(state_bytes_per_param(training, d)) == expected
    persistent = state_bytes_per_param(training, d).total + state_bytes_per_param(training, d).step
    assert persistent == {("bf16", 1): 18, ("bf16", 4): 6 + 12 / 4, ("fp16", 1): 20, ("fp16", 4): 4 + 16 / 4,
                          ("fp32", 4): 8 + 8 / 4}[(precision, d)]


@pytest.mark.parametrize("framework, precision, grad_fp32, reduced", [
    ("megatron", "bf16", None, 4.0), ("megatron", "bf16", False, 2.0), ("megatron", "fp16", None, 2.0),
    ("deepspeed", "bf16", None, 4.0), ("pytorch", "bf16", None, 4.0), ("megatron", "fp32", None, 4.0)])
def test_the_gradient_all_reduce_moves_the_buffers_it_reduces(framework, precision, grad_fp32, reduced):
    """Megatron-LM all-reduces bf16 training's fp32 main gradients (4 bytes a parameter), unless
    told to reduce in bf16; DeepSpeed's BF16_Optimizer its fp32 buffer; DDP the fp32 gradients
    autocast leaves."""
    extra = {} if grad_fp32 is None else {"grad_reduce_in_fp32": grad_fp32}
    training = scenario(framework, precision, **extra).training
    assert state_bytes_per_param(training, 4, 0).reduced == reduced


def test_megatron_1x_keeps_its_fp32_master_gradients_between_steps():
    """Megatron-LM 1.x's FP16_Optimizer zeroes its fp32 master gradients rather than freeing them:
    held through the iteration (20 bytes), where today's Megatron makes them for each step."""
    training = scenario(framework="megatron-2020", precision="fp16").training
    assert per_param(state_bytes_per_param(training, 1)) == (2, 2, 4, 12, 0, 0)


def test_deepspeed_bf16_keeps_fp32_gradients_zero_1_does_not_shard():
    """BF16_Optimizer: bf16 weights and gradients, a whole fp32 gradient buffer, fp32 master and
    moments partitioned (even at stage 0): 8 + 12/d; after backward it flattens the fp32
    gradients for the all-reduce (4 bytes each)."""
    for zero in (0, 1):
        training = scenario("deepspeed", "bf16", zero).training
        assert per_param(state_bytes_per_param(training, 4, zero)) == (2, 2, 4, 3, 0, 4)
    # ZeRO-2 runs DeepSpeed's ZeRO optimizer: gradients partitioned, the step's fp32 copy of the partition
    assert per_param(state_bytes_per_param(scenario("deepspeed", "bf16", 2).training, 4, 2)) == (2, 0.5, 0, 3, 0, 1)


def test_deepspeed_fp16_without_zero_flattens_fp32_gradients_for_the_step():
    training = scenario("deepspeed", "fp16", 0).training
    assert per_param(state_bytes_per_param(training, 4, 0)) == (2, 2, 0, 12, 0, 4)
    assert per_param(state_bytes_per_param(scenario("deepspeed", "fp16", 1).training, 4, 1)) == (2, 2, 0, 3, 0, 1)


def test_plain_pytorch_keeps_fp32_weights_and_ddp_buckets():
    training = scenario("pytorch", "bf16").training
    assert per_param(state_bytes_per_param(training, 4, 0)) == (4, 4, 0, 8, 4, 0)
    assert per_param(state_bytes_per_param(training, 1, 0)) == (4, 4, 0, 8, 0, 0)      # no DDP alone
    assert engine_state("pytorch", "fp16", "sgd", 0, 2).optimizer == 4                 # momentum only


def test_a_stated_state_size_keeps_its_own_split():
    training = scenario(precision="bf16", state_bytes_per_param=20).training
    assert per_param(state_bytes_per_param(training, 1, 0)) == (2, 2, 0, 16, 0, 0)


def test_the_peak_is_the_larger_of_backward_and_the_step():
    """16 bytes held, activations 100 and workspace 50 (grown by the allocator's 10%) against a
    step copy of 400: the step sets the peak, 250 over backward's 150 + its allocator share."""
    m = breakdown((10.0, 20.0, 0.0, 30.0, 5.0), 110.0, 55.0, 400.0, (0.0, 7.0, 3.0, 1.0), 0.1)
    assert (m.activations_bytes, m.workspace_bytes) == pytest.approx((100.0, 50.0))
    assert m.allocator_bytes == pytest.approx(15.0)
    assert m.optimizer_step_bytes == pytest.approx(400.0 - 165.0)
    assert m.total_bytes == pytest.approx(65.0 + 400.0 + 7.0 + 3.0 + 1.0)
    assert m.reserved_bytes == pytest.approx(65.0 + 400.0 + 1.0)
    small = breakdown((10.0, 20.0, 0.0, 30.0, 5.0), 110.0, 55.0, 100.0, (0.0, 0.0, 0.0, 0.0), 0.1)
    assert small.optimizer_step_bytes == 0.0 and small.total_bytes == pytest.approx(65.0 + 165.0)


def test_context_by_era_and_generation():
    assert runtime.context_bytes("volta", eager_loading=True) == GIB + 4 * 8 * MIB
    assert runtime.context_bytes("hopper", eager_loading=False) == pytest.approx(0.4 * GIB + 4 * 32 * MIB)


def test_nccl_communicator_of_four_a100s_matches_the_measured_688_mb():
    """24 channels x 3 connections (ring + tree, connected at init) x (0.5 + 4.6875 + 4) MiB =
    661.5 MiB = 694 MB, against 688 MB measured for a group of 4 A100s (NVIDIA/nccl#964)."""
    import numpy as np

    got = runtime.collective_bytes(4, np.array([False]), np.array([24.0]),
                                   np.array([runtime.NCCL_CONNECTION_BYTES]), runtime_connect=False)[0]
    assert got == pytest.approx(24 * 3 * 9.1875 * MIB)
    assert got / 1e6 == pytest.approx(688, rel=0.02)
    # after NCCL 2.22 only the ring a group inside a node runs is connected
    assert runtime.collective_bytes(4, np.array([False]), np.array([24.0]),
                                    np.array([runtime.NCCL_CONNECTION_BYTES]), runtime_connect=True)[0] == got / 3


def test_nccl_buffers_by_transport():
    """NVLink's P2P transport keeps all three protocols' buffers on the GPU; the network with
    GPUDirect RDMA LL128 and Simple; shared memory (PCIe through the CPU) and sockets none."""
    assert runtime.connection_bytes("nvlink", "infiniband") == (9.1875 * MIB, 8.6875 * MIB)
    assert runtime.connection_bytes("pcie", "ethernet") == (0.0, 0.0)


def test_megatron_process_groups_on_one_nvlink_node_by_hand():
    """tp 2 x pp 2 x dp 2 on one 8-GPU A100 node under Megatron-LM 2022 (NCCL connects ring and
    tree at init): stage 0 holds the world (8 ranks), tp (2), dp (2), model-parallel (4) and
    embedding (2) communicators at 24 channels of 9.1875 MiB per connection, 3 connections in a
    group of more than two, 2 in a group of two; and p2p buffers to its one neighbour: 24 / 2
    channels x 2 directions x 8 steps x 512 KiB."""
    scn = scenario(framework="megatron-2022")
    c = CostModel(scn).candidate(2, 2, 2, 1, (0,))
    conn = 9.1875 * MIB
    collectives = 24 * conn * (3 + 2 + 2 + 3 + 2)
    p2p = 1 * 2 * (24 // 2) * 8 * 512 * 1024
    assert c.stage_reserve[0] == pytest.approx(collectives + p2p + GIB + 4 * 8 * MIB)
    m = c.stage_memory(0, 0, 2)
    assert m.nccl_bytes == pytest.approx(collectives + p2p) and m.context_bytes == GIB + 4 * 8 * MIB


def test_no_nccl_buffers_on_a_pcie_node_without_p2p():
    scn = scenario(gpu="T4", intra=50, inter=50, gpus_per_node=4, precision="fp16")
    c = CostModel(scn).candidate(2, 1, 2, 1, (0,))
    assert c.stage_memory(0, 0, 4).nccl_bytes == 0.0


def test_deepspeed_zero_1_bucket_by_phase():
    """DeepSpeed's ZeRO-1/2 gradient bucket, 5e8 elements of fp16: through backward without a
    pipeline, in the step's phase after backward with one; none under BF16_Optimizer."""
    assert runtime.deepspeed_bucket_bytes("deepspeed", "fp16", 1, 2) == 1e9
    assert runtime.deepspeed_bucket_bytes("deepspeed", "bf16", 1, 2) == 0.0
    assert runtime.deepspeed_bucket_bytes("megatron", "fp16", 1, 2) == 0.0
    scn = scenario("deepspeed", "fp16", 1, gpu={"base": "A100-80GB"})
    flat = CostModel(scn).candidate(1, 1, 8, 1, (0,))
    piped = CostModel(scn).candidate(1, 2, 4, 1, (0,))
    assert flat.stage_memory(0, 0, 4).buffers_bytes == 1e9 and flat.step_fixed[0] == 0.0
    assert piped.stage_memory(0, 0, 2).buffers_bytes == 0.0 and piped.step_fixed[0] == 1e9


def test_a_stated_runtime_reserve_replaces_context_and_nccl():
    scn = scenario(framework="megatron-2022", runtime_reserve="3 GiB")
    m = CostModel(scn).candidate(2, 2, 2, 1, (0,)).stage_memory(0, 0, 2)
    assert (m.context_bytes, m.nccl_bytes, m.reserve_bytes) == (0.0, 0.0, 3 * GIB)
    assert parse_scenario(scn.to_dict()).training.runtime_reserve_bytes == 3 * GIB
    assert "runtime_reserve" not in scenario().to_dict()["training"]


def test_the_search_sizes_segments_as_the_prediction_does():
    """A tight GPU where the step's copy sets the peak (Megatron fp16 with little activation
    memory): a partition fits for the search exactly when its prediction fits."""
    small = {"base": "V100", "memory": "1100 MiB"}
    scn = build([node(1, small, 4, 100, 100)], [layer(params=4e6, activation_bytes=1e3, output_bytes=1.0)] * 8, 8,
                precision="fp16", calibration=IDEAL, runtime_reserve="1 GiB")
    cost = CostModel(scn)
    for pp, partitions in ((2, [(4, 4), (2, 6), (7, 1)]), (4, [(2, 2, 2, 2), (5, 1, 1, 1)])):
        c = cost.candidate(1, pp, 4 // pp, 1, (0,))
        for partition in partitions:
            prediction = c.predict(partition)
            assert partition_fits(c, partition) == prediction.fits_memory
            assert any(st.memory.optimizer_step_bytes > 0 for st in prediction.stages)
