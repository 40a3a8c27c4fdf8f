"""Memory per GPU per stage (memory.py, cost.Candidate.stage_memory and predict), checked by hand on a
tiny explicit-layer model, plus properties on generated ones."""

import pytest
from core_builders import IDEAL, build, examples, layer, node, scenario_dicts
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from amp_tui.core.base.units import format_bytes
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.memory import micro_batches_in_flight, state_bytes_per_param
from amp_tui.core.search.search import divisors, enumerate_candidates
from amp_tui.core.spec.scenario import parse_scenario

# Four uneven layers: (params, activation bytes, replicated part, output bytes, workspace bytes)
LAYERS = [
    layer(params=1000, activation_bytes=100, output_bytes=10, width=64),
    layer(params=2000, activation_bytes=200, output_bytes=20, activation_replicated_bytes=50, width=64),
    layer(params=3000, activation_bytes=300, output_bytes=30, workspace_bytes=1000, width=64),
    layer(params=4000, activation_bytes=400, output_bytes=40, activation_replicated_bytes=400, width=64),
]
P = [1000, 2000, 3000, 4000]
ACT = [100, 200, 300, 400]
REP = [0, 50, 0, 400]
OUT = [10, 20, 30, 40]
WORK = [0, 0, 1000, 0]
RESERVE = 2**20
BIG = {"base": "V100", "memory": "64 GiB", "precisions": ["fp16", "bf16", "fp32"]}  # bf16 too, for the memory cases


def scenario(gbs=8, gpu=BIG, per_node=8, calibration=IDEAL, **training):
    training.setdefault("runtime_reserve", "1 MiB")
    return build([node(1, gpu, per_node, 100, 100)], LAYERS, gbs, calibration=calibration, **training)


def candidate(scn, tp, pp, dp, mbs):
    return CostModel(scn).candidate(tp, pp, dp, mbs, (0,))


def stage(scn, tp, pp, dp, mbs, partition, s):
    """(stage memory from stage_memory, the same stage from predict) for layers of stage s."""
    c = candidate(scn, tp, pp, dp, mbs)
    start = sum(partition[:s])
    direct = c.stage_memory(s, start, start + partition[s])
    predicted = c.predict(partition).stages[s].memory
    assert predicted == direct
    return direct


@pytest.mark.parametrize("precision, optimizer, per_param", [
    ("fp16", "adam", (2, 2, 0, 12)),   # 16 bytes per parameter: fp16 weights and grads, fp32 master + 2 moments
    ("bf16", "adam", (2, 0, 4, 12)),   # Megatron: bf16 accumulates in an fp32 main-gradient buffer (18)
    ("fp32", "adam", (4, 4, 0, 8)),
    ("fp16", "sgd", (2, 2, 0, 8)),     # fp32 master + momentum
    ("fp32", "sgd", (4, 4, 0, 4)),
])
def test_state_bytes_zero_0(precision, optimizer, per_param):
    scn = scenario(precision=precision, optimizer=optimizer)
    m = stage(scn, 1, 2, 4, 1, (2, 2), 0)
    params = P[0] + P[1]
    assert (m.weights_bytes, m.gradients_bytes, m.main_gradients_bytes, m.optimizer_bytes) == tuple(
        b * params for b in per_param)


def test_mixed_precision_adam_is_16_bytes_per_parameter():
    scn = scenario()
    m = stage(scn, 1, 1, 8, 1, (4,), 0)
    assert m.weights_bytes + m.gradients_bytes + m.optimizer_bytes == 16 * sum(P)


def test_zero_1_shards_optimizer_state_over_dp():
    scn = scenario(zero_stage=1)
    m = stage(scn, 1, 2, 4, 1, (2, 2), 1)
    params = P[2] + P[3]
    assert m.weights_bytes == 2 * params
    assert m.gradients_bytes == 2 * params
    assert m.optimizer_bytes == pytest.approx(12 * params / 4)


def test_zero_2_also_shards_gradients():
    scn = scenario(zero_stage=2)
    m = stage(scn, 1, 2, 4, 1, (2, 2), 1)
    params = P[2] + P[3]
    assert m.weights_bytes == 2 * params
    assert m.gradients_bytes == pytest.approx(2 * params / 4)
    assert m.optimizer_bytes == pytest.approx(12 * params / 4)


@pytest.mark.parametrize("zero, per_param", [(0, (2, 2, 16)), (1, (2, 2, 4)), (2, (2, 0.5, 4))])
def test_engine_state_bytes_20(zero, per_param):
    """An engine keeping an fp32 gradient copy too needs 20 bytes per parameter; ZeRO shards the
    20 - 2 - 2 bytes that are neither weights nor gradients."""
    scn = scenario(zero_stage=zero, state_bytes_per_param=20)
    m = stage(scn, 1, 2, 4, 1, (2, 2), 0)
    params = P[0] + P[1]
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == pytest.approx(
        tuple(b * params for b in per_param), rel=1e-12)


def test_zero_does_nothing_without_data_parallelism():
    for zero in (0, 1, 2):
        sb = state_bytes_per_param(scenario(zero_stage=zero).training, 1)
        assert (sb.weights, sb.gradients, sb.optimizer) == (2, 2, 12)


@pytest.mark.parametrize("pp, s, B, expected", [(4, 0, 8, 4), (4, 3, 8, 1), (4, 1, 2, 2), (4, 3, 2, 1),
                                                (1, 0, 5, 1), (8, 2, 3, 3)])
def test_1f1b_in_flight(pp, s, B, expected):
    assert micro_batches_in_flight("1f1b", s, pp, B) == expected == min(pp - s, B)


@pytest.mark.parametrize("pp, s, B", [(4, 0, 8), (4, 3, 8), (2, 1, 1)])
def test_gpipe_in_flight(pp, s, B):
    assert micro_batches_in_flight("gpipe", s, pp, B) == B


@pytest.mark.parametrize("mbs", [1, 2])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_activations_of_micro_batches_in_flight(schedule, mbs):
    scn = scenario(gbs=8, schedule=schedule)
    dp = 2
    B = 8 // (dp * mbs)               # 4 or 2 micro-batches
    for s in range(4):                # one layer per stage
        m = stage(scn, 1, 4, dp, mbs, (1, 1, 1, 1), s)
        held = B if schedule == "gpipe" else min(4 - s, B)
        assert m.activations_bytes == held * mbs * ACT[s]
        assert m.workspace_bytes == mbs * WORK[s]
        assert m.reserve_bytes == RESERVE


def test_full_recomputation_keeps_layer_inputs_and_one_layer_working_set():
    scn = scenario(gbs=8, recompute="full")
    mbs, dp = 2, 1                    # B = 4
    # stage 0 holds layers 0-1, stage 1 layers 2-3; 1F1B: 2 and 1 micro-batches in flight at pp = 2
    m0 = stage(scn, 1, 2, dp, mbs, (2, 2), 0)
    m1 = stage(scn, 1, 2, dp, mbs, (2, 2), 1)
    inputs = [0] + OUT[:-1]           # the first layer's input is the data, not counted
    assert m0.activations_bytes == 2 * mbs * (inputs[0] + inputs[1])
    assert m1.activations_bytes == 1 * mbs * (inputs[2] + inputs[3])
    # the largest of (workspace + full activations) of one layer, recomputed one at a time
    assert m0.workspace_bytes == mbs * max(WORK[0] + ACT[0], WORK[1] + ACT[1])
    assert m1.workspace_bytes == mbs * max(WORK[2] + ACT[2], WORK[3] + ACT[3])


def test_recomputation_saves_memory_on_big_activations():
    plain = stage(scenario(), 1, 1, 8, 1, (4,), 0)
    recomputed = stage(scenario(recompute="full"), 1, 1, 8, 1, (4,), 0)
    assert recomputed.activations_bytes < plain.activations_bytes


def test_tensor_parallelism_divides_params_and_the_split_activations():
    tp, mbs = 2, 1
    scn = scenario(gbs=8)
    m = stage(scn, tp, 2, 2, mbs, (2, 2), 1)      # layers 2, 3; B = 4, 1 micro-batch in flight
    params = (P[2] + P[3]) / tp
    assert m.weights_bytes == 2 * params and m.optimizer_bytes == 12 * params
    split = sum(REP[i] + (ACT[i] - REP[i]) / tp for i in (2, 3))
    assert m.activations_bytes == pytest.approx(1 * mbs * split)
    assert m.workspace_bytes == pytest.approx(mbs * WORK[2] / tp)
    m0 = stage(scn, tp, 2, 2, mbs, (2, 2), 0)      # 2 in flight
    assert m0.activations_bytes == pytest.approx(2 * mbs * (REP[0] + (ACT[0] - REP[0]) / tp
                                                            + REP[1] + (ACT[1] - REP[1]) / tp))


def test_total_and_peak():
    scn = scenario(gbs=8)
    prediction = candidate(scn, 1, 2, 4, 1).predict((3, 1))
    for st_ in prediction.stages:
        m = st_.memory
        assert m.total_bytes == pytest.approx(sum(m.terms().values()))
        assert m.total_bytes == pytest.approx(m.weights_bytes + m.gradients_bytes + m.main_gradients_bytes
                                              + m.optimizer_bytes + m.activations_bytes + m.workspace_bytes
                                              + m.optimizer_step_bytes + m.buffers_bytes + m.allocator_bytes
                                              + m.context_bytes + m.nccl_bytes + m.reserve_bytes)
    assert prediction.peak_memory_bytes == max(st_.memory.total_bytes for st_ in prediction.stages)
    assert prediction.fits_memory and prediction.reason is None


def test_a_strategy_over_capacity_names_the_stage_and_the_bytes_over():
    capacity = 130_000
    scn = scenario(gbs=8, gpu={"base": "V100", "memory": f"{capacity} B"}, runtime_reserve="1 KiB")
    mbs, dp = 1, 4                     # B = 2; stage 0 holds 2 micro-batches, stage 1 one
    prediction = candidate(scn, 1, 2, dp, mbs).predict((2, 2))
    # 16 bytes per parameter held, and the larger of backward's peak (activations, workspace) and
    # the optimizer step's fp32 gradient copy (Megatron's fp16 optimizer, 4 bytes per parameter)
    stage0 = 16 * (P[0] + P[1]) + max(2 * (ACT[0] + ACT[1]) + 0, 4 * (P[0] + P[1])) + 1024   # 61024 B: fits
    stage1 = 16 * (P[2] + P[3]) + max(1 * (ACT[2] + ACT[3]) + WORK[2], 4 * (P[2] + P[3])) + 1024  # 141024 B: over
    assert prediction.stages[0].memory.total_bytes == stage0
    assert prediction.stages[1].memory.total_bytes == stage1
    assert prediction.stages[0].capacity_bytes == capacity
    assert prediction.stages[0].fits and not prediction.stages[1].fits
    assert not prediction.fits_memory
    assert "stage 1" in prediction.reason
    assert format_bytes(stage1 - capacity) in prediction.reason
    assert "over" in prediction.reason
    # the other partition puts the big layers apart and fits
    assert candidate(scn, 1, 2, dp, mbs).predict((3, 1)).stages[0].memory.total_bytes < capacity


def test_capacity_is_the_usable_memory_of_the_smallest_gpu_in_the_stage():
    small = {"base": "V100", "memory": "8 GiB"}
    scn = build([node(1, BIG, 1), node(1, small, 1)], LAYERS, 8)
    c = CostModel(scn).candidate(1, 1, 2, 1, (0, 1))          # one stage on both nodes
    assert c.predict((4,)).stages[0].capacity_bytes == 8 * 2**30
    c = CostModel(scn).candidate(1, 2, 1, 1, (0, 1))
    assert [st_.capacity_bytes for st_ in c.predict((2, 2)).stages] == [64 * 2**30, 8 * 2**30]


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data(), spec=scenario_dicts(max_layers=6))
def test_memory_never_shrinks_with_a_bigger_micro_batch(data, spec):
    scn = parse_scenario(spec)
    keys = enumerate_candidates(scn)
    assume(keys)
    tp, pp, dp, _, order = data.draw(st.sampled_from(keys))
    cost = CostModel(scn)
    layers = scn.model.num_layers
    cuts = sorted(data.draw(st.lists(st.integers(1, layers - 1), min_size=pp - 1, max_size=pp - 1,
                                     unique=True))) if pp > 1 else []
    bounds = [0, *cuts, layers]
    partition = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    sizes = [m for m in divisors(scn.training.global_batch_size // dp)]
    previous = None
    for mbs in sizes:
        c = cost.candidate(tp, pp, dp, mbs, order)
        act_prefix, peak, _ = c.memory_arrays
        one = cost.candidate(tp, pp, dp, 1, order).memory_arrays
        # per micro-batch, activations and working set are linear in its size
        assert act_prefix == pytest.approx(mbs * one[0], rel=1e-12)
        assert peak == pytest.approx(mbs * one[1], rel=1e-12)
        totals = [st_.memory for st_ in c.predict(partition).stages]
        if previous is not None:
            for before, after in zip(previous, totals):
                assert after.activations_bytes >= before.activations_bytes * (1 - 1e-12)
                assert after.total_bytes >= before.total_bytes * (1 - 1e-12)
        previous = totals


def test_allocator_fragmentation_grows_activations_and_buffers_not_state():
    frag = 0.25
    calibrated = {"parameters": {**IDEAL["parameters"], "memory_fragmentation": frag}}
    plain, grown = (stage(scenario(calibration=c), 1, 2, 4, 1, (2, 2), 1) for c in (IDEAL, calibrated))
    # the tensors are the same; the allocator holds a share more of the activations and workspace
    assert (grown.activations_bytes, grown.workspace_bytes) == pytest.approx(
        (plain.activations_bytes, plain.workspace_bytes))
    assert plain.allocator_bytes == 0.0
    assert grown.allocator_bytes == pytest.approx(frag * (plain.activations_bytes + plain.workspace_bytes))
    assert (grown.weights_bytes, grown.optimizer_bytes) == (plain.weights_bytes, plain.optimizer_bytes)


def test_zero_3_shards_weights_gradients_and_optimizer_state():
    scn = scenario(zero_stage=3)
    m = stage(scn, 1, 2, 4, 1, (2, 2), 1)
    params = P[2] + P[3]
    assert (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes) == (2 * params / 4, 2 * params / 4, 12 * params / 4)


def test_interleaved_schedule_holds_more_micro_batches_on_early_stages():
    """Megatron's interleaved 1F1B, v chunks per rank: stage s warms up with
    2 (pp - s - 1) + (v - 1) pp + 1 chunk passes of 1/v of its activations each."""
    pp, v, B = 4, 2, 8
    held = [micro_batches_in_flight("1f1b", s, pp, B, v) for s in range(pp)]
    assert held == [(2 * (pp - s - 1) + (v - 1) * pp + 1) / v for s in range(pp)]
    assert held[0] > pp and held[-1] < 4      # first stage holds more than plain 1F1B's pp


def test_zero_3_holds_whole_blocks_under_fsdp_and_bounded_buckets_under_deepspeed():
    """FSDP: the running block gathered, the next prefetched, its unsharded gradient (3 layers).
    DeepSpeed and Megatron: at most stage3_max_live_parameters gathered and one reduce bucket of
    gradients, so SC21's 5-billion-parameter layers of the 530B model do not sit whole."""
    from amp_tui.core.costmodel.memory import ZERO3_MAX_LIVE_PARAMS, ZERO3_REDUCE_BUCKET, zero3_gathered_params

    small, huge = 1e8, 5.03e9
    assert zero3_gathered_params(small, "fsdp") == 3 * small
    assert zero3_gathered_params(small, "deepspeed") == 3 * small
    assert zero3_gathered_params(huge, "fsdp") == 3 * huge
    assert zero3_gathered_params(huge, "megatron") == ZERO3_MAX_LIVE_PARAMS + ZERO3_REDUCE_BUCKET
    scn = scenario(zero_stage=3, framework="deepspeed")
    fsdp = scenario(zero_stage=3, framework="fsdp")
    a, b = stage(scn, 1, 2, 4, 1, (2, 2), 0), stage(fsdp, 1, 2, 4, 1, (2, 2), 0)   # no loss buffers there
    assert a.workspace_bytes == b.workspace_bytes      # small layers: the same 3 layers either way
