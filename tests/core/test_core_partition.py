"""partition.best_partition is exact: it equals brute force over every partition of the layers into
pp contiguous non-empty stages that fits in memory (or finds none when none fits)."""

import dataclasses
import math
from unittest import mock

import numpy as np
import pytest
from core_builders import brute_force, build, close, compositions, examples, layer, node, scenario_dicts
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.search.partition import dp as segment_dp
from amp_tui.core.search.partition import memory as segment_memory
from amp_tui.core.search.partition import tables
from amp_tui.core.search.partition import walk as partition
from amp_tui.core.search.partition.memory import partitions_fit
from amp_tui.core.search.partition.tables import SegmentTables, cheapest_sends
from amp_tui.core.search.partition.walk import best_partition
from amp_tui.core.search.search import enumerate_candidates
from amp_tui.core.spec.knobs import default_knobs
from amp_tui.core.spec.scenario import load_scenario, parse_scenario


def test_compositions_helper():
    assert sorted(compositions(4, 2)) == [(1, 3), (2, 2), (3, 1)]
    assert list(compositions(3, 3)) == [(1, 1, 1)]
    assert len(list(compositions(10, 4))) == math.comb(9, 3)


def _check(candidate, note=event):
    expected_time, expected_partition = brute_force(candidate)
    result = best_partition(candidate)
    if expected_time is None:
        note("nothing fits")
        assert result.partition is None
        assert not result.fits
        assert result.iteration_time_s == math.inf
        return
    unconstrained = min(candidate.predict(p).iteration_time_s
                        for p in compositions(candidate.num_layers, candidate.pp))
    note("memory binds" if unconstrained < expected_time * (1 - 1e-9) else "memory free")
    assert result.partition is not None, f"brute force found {expected_partition}"
    assert len(result.partition) == candidate.pp and sum(result.partition) == candidate.num_layers
    assert all(n >= 1 for n in result.partition)
    prediction = candidate.predict(result.partition)
    assert prediction.fits_memory
    assert close(prediction.iteration_time_s, expected_time), (result.partition, expected_partition)
    assert close(result.iteration_time_s, expected_time)


def _with_memory(spec, num_bytes):
    """Every node group's GPU given `num_bytes` of memory (times unchanged)."""
    nodes = []
    for group in spec["cluster"]["nodes"]:
        gpu = group["gpu"] if isinstance(group["gpu"], dict) else {"base": group["gpu"]}
        nodes.append({**group, "gpu": {**gpu, "memory": f"{num_bytes} B"}})
    return {**spec, "cluster": {"nodes": nodes}}


@st.composite
def candidates(draw, max_layers=10, max_pp=4):
    """A candidate of a generated scenario; in `binding` mode every GPU gets a memory size between the
    least any partition needs and what the fastest partition needs, so memory decides the answer."""
    spec = draw(scenario_dicts(max_layers=max_layers))
    scn = parse_scenario(spec)
    keys = [k for k in enumerate_candidates(scn) if k[1] <= max_pp]
    assume(keys)
    pp = draw(st.sampled_from(sorted({k[1] for k in keys})))   # every depth equally likely
    key = draw(st.sampled_from([k for k in keys if k[1] == pp]))
    event(f"pp={key[1]}")
    candidate = CostModel(scn).candidate(*key)
    mode = draw(st.sampled_from(["as generated", "binding", "binding", "starved"]))
    if mode == "starved":       # one byte less than the leanest partition needs: nothing fits
        least = min(candidate.predict(p).peak_memory_bytes
                    for p in compositions(candidate.num_layers, candidate.pp))
        scn = parse_scenario(_with_memory(spec, math.floor(least) - 1))
        candidate = CostModel(scn).candidate(*key)
    elif mode == "binding" and key[1] > 1:
        predictions = [candidate.predict(p) for p in compositions(candidate.num_layers, candidate.pp)]
        fastest = min(predictions, key=lambda p: p.iteration_time_s).peak_memory_bytes
        least = min(p.peak_memory_bytes for p in predictions)
        if least < fastest:
            fraction = draw(st.floats(0, 1, exclude_max=True))
            capacity = math.ceil(least + fraction * (fastest - least))
            if capacity < fastest:
                scn = parse_scenario(_with_memory(spec, capacity))
                candidate = CostModel(scn).candidate(*key)
    return candidate


@settings(max_examples=examples(100), deadline=None)
@given(candidate=candidates())
def test_best_partition_equals_brute_force(candidate):
    _check(candidate)


@settings(max_examples=examples(25), deadline=None)
@given(candidate=candidates(max_layers=10, max_pp=4), bound_scale=st.sampled_from([0.5, 1.0, 1.5]))
def test_upper_bound_only_prunes_what_cannot_beat_it(candidate, bound_scale):
    """With a finite bound, the result is the exact best when it beats the bound, else nothing."""
    check_upper_bound(candidate, bound_scale, lean=False)


def check_upper_bound(candidate, bound_scale: float, lean: bool) -> None:
    """The search under a bound `bound_scale` x the brute-force best (with lean tables, or not)
    returns that best when it beats the bound and nothing when it does not."""
    expected_time, _ = brute_force(candidate)
    assume(expected_time is not None)
    bound = expected_time * bound_scale
    with mock.patch.object(tables, "MAX_TABLE_CELLS", 0 if lean else tables.MAX_TABLE_CELLS):
        result = best_partition(candidate, upper_bound=bound)
    if expected_time < bound * (1 - 1e-9):
        assert result.partition is not None
        assert close(candidate.predict(result.partition).iteration_time_s, expected_time)
    elif expected_time > bound * (1 + 1e-9):
        assert result.partition is None and result.iteration_time_s == math.inf


@settings(max_examples=examples(60), deadline=None)
@given(candidate=candidates())
def test_partitions_fit_equals_brute_force(candidate):
    assert partitions_fit([candidate]).tolist() == [brute_force(candidate)[0] is not None]


@settings(max_examples=examples(60), deadline=None)
@given(candidate=candidates())
def test_greedy_and_reachable_fits_equal_brute_force(candidate):
    """partitions_fit's two walks on their own (the even split settles most candidates before
    them): the greedy one is right whenever it settles, the exact one always."""
    expected = brute_force(candidate)[0] is not None
    settled, fits = segment_memory._greedy_fits(segment_memory._SegmentMemory([candidate]), lambda: False)
    event("greedy settles" if settled[0] else "greedy leaves open")
    if settled[0]:
        assert fits[0] == expected
    assert segment_memory._reachable_fits(segment_memory._SegmentMemory([candidate]), lambda: False).tolist() == [expected]


@settings(max_examples=examples(30), deadline=None)
@given(spec=scenario_dicts(max_layers=10))
def test_partitions_fit_in_one_batch(spec):
    """Every candidate of a scenario at once (pipelines of every depth, every tp and micro-batch
    size side by side): the same answers as brute force one by one."""
    cost = CostModel(parse_scenario(spec))
    batch = [cost.candidate(*key) for key in enumerate_candidates(cost.scenario)]
    expected = [brute_force(candidate)[0] is not None for candidate in batch]
    event(f"{expected.count(False)} of {len(batch)} do not fit" if False in expected else "all fit")
    assert partitions_fit(batch).tolist() == expected


def test_nothing_fits():
    tiny = {"base": "V100", "memory": "1 MiB"}
    layers = [layer(params=1e6, flops=1e9, activation_bytes=1e3, output_bytes=1e3, width=64)] * 4
    scn = build([node(2, tiny, 1)], layers, 2)
    result = best_partition(CostModel(scn).candidate(1, 2, 1, 1, (0,)))
    assert result.partition is None and not result.fits and result.iteration_time_s == math.inf


def test_memory_forces_an_uneven_split():
    """Stage 1 sits on a small GPU: the best partition moves layers to stage 0 although it is slower."""
    big, small = {"base": "V100", "memory": "64 GiB"}, {"base": "V100", "memory": "2 GiB"}
    layers = [layer(params=2.5e7, flops=1e12, activation_bytes=1e6, output_bytes=1e6, width=1024,
                    tokens=1024)] * 6
    scn = build([node(1, big, 1), node(1, small, 1)], layers, 4, runtime_reserve="256 MiB")
    candidate = CostModel(scn).candidate(1, 2, 1, 1, (0, 1))
    # 2.5e7 params x 16 B = 400 MB per layer: the small GPU (2 GiB - reserve) holds at most 4
    assert not candidate.predict((2, 4)).fits_memory or not candidate.predict((1, 5)).fits_memory
    result = best_partition(candidate)
    assert result.partition == brute_force(candidate)[1] == (3, 3)
    fast = CostModel(scn.with_training(runtime_reserve_bytes=2**30 * 1.5)).candidate(1, 2, 1, 1, (0, 1))
    expected = brute_force(fast)
    assert expected[1] is not None and best_partition(fast).partition[0] >= 3


@pytest.mark.parametrize("name", ["paper-het-cluster", "paper-het-model"])
def test_paper_settings_against_brute_force(name):
    """A few real candidates (30 and 56 layers) whose brute force is cheap (pp <= 3)."""
    scn = load_scenario(name)
    cost = CostModel(scn)
    keys = [k for k in enumerate_candidates(scn) if k[1] == 2 or (k[1] == 3 and k[3] == 4)][:6]
    assert keys
    for key in keys:
        _check(cost.candidate(*key), note=lambda _: None)


@st.composite
def interleaved_candidates(draw):
    """A candidate with two interleaved model chunks per pipeline rank (fill and drain shrink)."""
    scn = parse_scenario(draw(scenario_dicts(max_layers=10)))
    knobs = dataclasses.replace(default_knobs(scn.training), virtual_stages=2)
    keys = [k for k in enumerate_candidates(scn, knobs=knobs) if k[1] <= 4]
    assume(keys)
    return CostModel(scn, knobs).candidate(*draw(st.sampled_from(keys)))


@settings(max_examples=examples(60), deadline=None)
@given(candidate=st.one_of(candidates(), interleaved_candidates()))
def test_tables_cut_at_the_even_splits_cap_keep_the_optimum(candidate):
    """Tables of every size cut at the cap from the even split's time (by default only large
    ones are): still the brute-force optimum, with memory binding or not, 1F1B or GPipe,
    interleaved or not, mixed GPUs."""
    event(f"v={candidate.knobs.virtual_stages}")
    with mock.patch.object(partition, "CAP_MIN_CELLS", 0):
        _check(candidate)


@settings(max_examples=examples(40), deadline=None)
@given(candidate=st.one_of(candidates(max_layers=10, max_pp=4), candidates(max_layers=12, max_pp=12)),
       scale=st.sampled_from([1.001, 1.2, 2.0]))
def test_cut_tables_hold_every_segment_below_the_cap(candidate, scale):
    """With tau_cap above the least max tau of a partition, the tables keep every segment of every
    partition (brute force) whose segments all fit in memory with tau below the cap, with the
    same figures as the uncut tables, in fewer or as many cells; shallow and deep pipelines."""
    full = SegmentTables(candidate)
    assume(full.feasible.any() and candidate.pp > 1)
    t_star, _ = full.minmax("tau")
    assume(t_star < math.inf)
    cap = scale * t_star
    cut = SegmentTables(candidate)
    cut.tau_cap = cap
    assert cut.feasible.size <= full.feasible.size
    kept = full.feasible & (full.tau < cap)
    used = set()
    for sizes in compositions(candidate.num_layers, candidate.pp):
        ends = np.cumsum(sizes)
        segments = [(s, int(ends[s]) - s - 1, size - 1) for s, size in enumerate(sizes)]
        if all(w < full.W and full._low[s] <= r < full._high[s] and kept[full.row(s, r), w]
               for s, r, w in segments):
            used.update(segments)
    assert used
    stage, r, w = (np.array(column) for column in zip(*sorted(used)))
    assert np.all(w < cut.W)
    assert np.all((r >= cut._low[stage]) & (r < cut._high[stage]))
    rows, full_rows = cut.row(stage, r), full.row(stage, r)
    assert np.all(cut.feasible[rows, w])
    assert np.allclose(cut.tau[rows, w], full.tau[full_rows, w]) and np.allclose(cut.e[rows, w], full.e[full_rows, w])


@settings(max_examples=examples(40), deadline=None)
@given(candidate=candidates(max_layers=12, max_pp=12))
def test_deep_pipelines_equal_brute_force(candidate):
    """Up to 8 stages over up to 12 layers, the tables cut at the even split's or a balanced
    partition's cap (as large tables are) and banded per stage: the brute-force optimum."""
    with mock.patch.object(partition, "CAP_MIN_CELLS", 0):
        _check(candidate)


@settings(max_examples=examples(60), deadline=None)
@given(candidate=st.one_of(candidates(), candidates(max_layers=12, max_pp=12)),
       chunk=st.sampled_from([1, 7, 2**18]), cap=st.booleans())
def test_lean_tables_equal_brute_force(candidate, chunk, cap):
    """Tables never held whole (as beyond MAX_TABLE_CELLS), computed a chunk of cells at a time
    in every DP, one or two stages included: the brute-force optimum."""
    with (mock.patch.object(tables, "MAX_TABLE_CELLS", 0), mock.patch.object(segment_dp, "LEAN_CHUNK_CELLS", chunk),
          mock.patch.object(partition, "CAP_MIN_CELLS", 0 if cap else partition.CAP_MIN_CELLS)):
        _check(candidate)


@settings(max_examples=examples(25), deadline=None)
@given(candidate=candidates(max_layers=12, max_pp=12), bound_scale=st.sampled_from([0.5, 1.0, 1.5]),
       lean=st.booleans())
def test_deep_and_lean_upper_bounds_only_prune_what_cannot_beat_them(candidate, bound_scale, lean):
    """With a finite bound, deep pipelines (lean tables or not): the exact best when it beats
    the bound, else nothing."""
    check_upper_bound(candidate, bound_scale, lean)


def test_a_cap_below_a_stages_overhead_and_sends_leaves_no_band():
    """With tau_cap below some stage's overhead plus its cheapest sends, no partition is under the
    cap: the tables are empty (the bands' backward walk ran past the last layer, IndexError)."""
    spec = load_scenario("paper-homogeneous").to_dict()
    scn = parse_scenario({**spec, "cluster": {"preset": "2x-p4d+4x-g5.12xlarge"}})
    key = max(enumerate_candidates(scn), key=lambda k: k[1])          # the deepest pipeline
    candidate = CostModel(scn).candidate(*key)
    assert candidate.pp > 2
    tables = SegmentTables(candidate)
    tables.tau_cap = candidate.micro_batch_overhead + cheapest_sends(candidate).max() / 2
    assert tables.cells == 0 and tables.empty


def test_a_stage_with_no_rows_in_small_whole_tables_is_skipped():
    """The small whole tables start at the first row a later stage reads: here stage 1 has no row
    left in the band (the bound cuts it), and taking stage 1's first row for that start indexed
    stage 2 out of the tables (found by hypothesis in the idle-nodes tests)."""
    profile = {"profile": {"T4": {1: 1e-05}}}
    layers = [layer(params=p, flops=f, output_bytes=1e5, name=f"l{i}", width=64.0, tokens=t, **(profile if i < 2 else {}))
              for i, (p, f, t) in enumerate([(0.0, 1e10, 1.0), (0.0, 1.7e11, 1.0), (1.175e8, 1e10, 1.0),
                                             (0.0, 1e10, 128.0), (0.0, 1e10, 1.0)])]
    spec = {"name": "empty band", "cluster": {"nodes": [
                node(count=2, gpu="V100", intra=1.0, inter=1.0),
                node(count=1, gpu={"base": "T4", "fp16_tflops": 20.0, "memory": "2 GiB"}, intra=1.0, inter=1.0)]},
            "model": {"name": "five layers", "sequence_length": 1, "layers": layers},
            "training": {"global_batch_size": 12, "precision": "fp16", "optimizer": "adam", "recompute": "none",
                         "zero_stage": 0, "runtime_reserve": "256 MiB"},
            "search": {"reorder_nodes": False}}
    candidate = CostModel(parse_scenario(spec)).candidate(1, 3, 1, 4, (0, 1))
    best, _ = brute_force(candidate)
    for bound in (2.269213888888889, math.inf):
        result = partition.solve(SegmentTables(candidate), bound)
        assert (result.partition is None and best >= bound) or close(result.iteration_time_s, best)


def test_even_split_memory_in_chunks_equals_all_at_once():
    """Chunks of candidates of different depths, padded to the deepest (no need, infinite room),
    give what one pass gives, and the cancellation check is polled between chunks."""
    scn = load_scenario("paper-het-cluster")
    cost = CostModel(scn)
    candidates = [cost.candidate(*key[:5]) for key in enumerate_candidates(scn)]
    candidates = (candidates * (600 // len(candidates) + 1))[:600]
    with mock.patch.object(segment_memory, "EVEN_SPLIT_CHUNK", 10**6):
        need, capacity = segment_memory.even_split_memory(candidates)
    polls = []
    chunked_need, chunked_capacity = segment_memory.even_split_memory(candidates, lambda: polls.append(1) or False)
    assert len(polls) == 3
    assert np.array_equal(chunked_need, need) and np.array_equal(chunked_capacity, capacity)
    depth = np.array([c.pp for c in candidates])
    beyond = np.arange(need.shape[1])[None, :] >= depth[:, None]
    assert beyond.any() and not need[beyond].any() and np.isinf(capacity[beyond]).all()
