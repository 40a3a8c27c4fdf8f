"""The partition walk's tighter bounds (partition.solve) change how many DPs it runs, never its
answer: it equals the walk as it was before them (kept here as the reference) on candidates too
large for brute force, with uneven layers, heterogeneous stages and binding memory."""

import math

import pytest
from core_builders import close, compositions, examples, scenario_dicts
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.search.partition.dp import INF
from amp_tui.core.search.partition.tables import SegmentTables
from amp_tui.core.search.partition.walk import _bottleneck_exceeds, _solve_by_enumeration, _sum_and_tail_floors, solve
from amp_tui.core.search.search import enumerate_candidates
from amp_tui.core.spec.scenario import load_scenario, parse_scenario


def reference_solve(tables: SegmentTables, upper_bound: float = INF) -> tuple[float, tuple[int, ...] | None]:
    """partition.solve before the walk bounded max E and max tau over what is left (commit
    b19cd28): the E walk outside, the tau walk inside, each pruned with the global t* and e*."""
    B = tables.candidate.num_micro_batches
    if not tables.feasible.any():
        return INF, None
    if tables.pp <= 2:
        result = _solve_by_enumeration(tables, upper_bound)
        return result.iteration_time_s, result.partition
    t_star, start = tables.minmax("tau")
    if start is None:
        return INF, None
    g_floor, e_floor = _sum_and_tail_floors(tables.candidate)
    if (B - 1) * t_star + g_floor + e_floor >= upper_bound:
        return INF, None
    e_star, _ = tables.minmax("e")
    if (B - 1) * t_star + g_floor + e_star >= upper_bound:
        return INF, None
    g_min, part = tables.minsum()
    best_j, best_p = upper_bound, None
    for p in (start, part):
        tau, g_sum, e_max = tables.measures(p)
        if (B - 1) * tau + g_sum + e_max < best_j:
            best_j, best_p = (B - 1) * tau + g_sum + e_max, p
    e_limit = best_j - (B - 1) * t_star - g_min
    while e_limit > e_star:
        inner_best, inner_e = INF, None
        t_limit = INF if B == 1 else (best_j - g_min - e_star) / (B - 1)
        while t_limit > t_star:
            sigma, p = tables.minsum(e_limit, t_limit)
            if (p is None or (B - 1) * t_star + sigma + e_star >= best_j
                    or (B - 1) * t_star + sigma >= inner_best):
                break
            tau, g_sum, e_max = tables.measures(p)
            if (B - 1) * tau + g_sum < inner_best:
                inner_best, inner_e = (B - 1) * tau + g_sum, e_max
            if (B - 1) * tau + g_sum + e_max < best_j:
                best_j, best_p = (B - 1) * tau + g_sum + e_max, p
            if B == 1:
                break
            t_limit = min(tau, (best_j - e_star - sigma) / (B - 1))
        if inner_e is None or inner_best + e_star >= best_j:
            break
        e_limit = min(inner_e, best_j - (B - 1) * t_star - g_min)
    return (best_j if best_p is not None else INF), best_p


@st.composite
def deep_candidates(draw):
    """A candidate with 3 to 8 stages over up to 40 uneven layers (too many partitions to list)."""
    spec = draw(scenario_dicts(max_layers=40, max_gpus=8, max_groups=3, binding_memory=draw(st.booleans())))
    scn = parse_scenario(spec)
    keys = [k for k in enumerate_candidates(scn) if k[1] >= 3]
    assume(keys)
    key = draw(st.sampled_from(keys))
    event(f"pp={key[1]}")
    return CostModel(scn).candidate(*key)


@pytest.mark.slow          # the reference on deep pipelines, 60 cases; CI runs it
@settings(max_examples=examples(60), deadline=None)
@given(candidate=deep_candidates(), bound_scale=st.sampled_from([INF, 1.0, 1.02]))
def test_walk_equals_the_reference(candidate, bound_scale):
    expected_time, expected_partition = reference_solve(SegmentTables(candidate))
    bound = bound_scale if bound_scale == INF else expected_time * bound_scale
    result = solve(SegmentTables(candidate), bound)
    if expected_time == INF:
        event("nothing fits")
        assert result.partition is None and result.iteration_time_s == math.inf
        return
    if bound < INF and not expected_time < bound * (1 - 1e-9):
        assert result.partition is None       # nothing beats the bound
        return
    assert result.partition is not None, expected_partition
    assert close(result.iteration_time_s, expected_time)
    assert close(candidate.predict(result.partition).iteration_time_s, expected_time)
    assert candidate.predict(result.partition).fits_memory


@pytest.mark.parametrize("name", ["paper-het-model", "paper-het-cluster"])
def test_walk_equals_the_reference_on_the_paper_settings(name):
    """Every candidate of three stages or more (56 uneven layers; 30 on mixed GPUs)."""
    scn = load_scenario(name)
    cost = CostModel(scn)
    walked = 0
    for key in enumerate_candidates(scn):
        if key[1] < 3:
            continue
        candidate = cost.candidate(*key)
        expected_time, _ = reference_solve(SegmentTables(candidate))
        result = solve(SegmentTables(candidate))
        assert (result.iteration_time_s == expected_time == INF) or close(result.iteration_time_s, expected_time), key
        walked += result.solves > 3
    assert walked >= 5      # the walk itself ran, not only its first DPs


@st.composite
def small_pipelines(draw):
    spec = draw(scenario_dicts(max_layers=9, max_gpus=8, max_groups=3, binding_memory=False))
    scn = parse_scenario(spec)
    keys = [k for k in enumerate_candidates(scn) if 2 <= k[1] <= 4]
    assume(keys)
    return CostModel(scn).candidate(*draw(st.sampled_from(keys)))


@settings(max_examples=examples(60), deadline=None)
@given(candidate=small_pipelines(), scale=st.sampled_from([0.5, 0.9, 1.0, 1.0, 1.5]))
def test_bottleneck_bound_never_rules_out_a_reachable_limit(candidate, scale):
    """_bottleneck_exceeds(limit) only when every partition (memory aside) has a stage busier
    than limit per micro-batch; at the least max busy time itself it never does."""
    least = min(max(stage.stage_time_s for stage in candidate.predict(p).stages)
                for p in compositions(candidate.num_layers, candidate.pp))
    exceeds = _bottleneck_exceeds(candidate, least * scale)
    event(f"exceeds={exceeds}")
    if scale >= 1.0:
        assert not exceeds
