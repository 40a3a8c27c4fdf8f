"""The anytime search over parts (subclusters.py, work.py): its first answers come from the
cluster's natural sub-clusters, a work budget cuts it at the same step on any machine, and adding a
node group never makes `plan`'s best slower, whatever the budget. No test here reads a clock: the
budgets are work, and the wall-clock safety net is off (time_limit_s=None)."""

from __future__ import annotations

import math

import pytest

from amp_tui.core.search.part_rows import natural_parts, part_rows
from amp_tui.core.search.planner import POST_PASS_SHARE, find_plans
from amp_tui.core.search.subclusters import search_parts
from amp_tui.core.search.work import DEFAULT_WORK, work_for
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.scenario import load_scenario, parse_scenario


def _scenario(name: str, precision: str | None = None, extra: dict | None = None):
    """A preset scenario, in another precision (V100 and T4 have no bf16), with a node group more."""
    data = load_scenario(name).to_dict()
    if precision:
        data["training"]["precision"] = precision
    if extra:
        data["cluster"]["nodes"].append(extra)
    return parse_scenario(data)


# The four clusters of issue 36's heterogeneity checks: each, and each with a node group more.
CLUSTERS = [
    ("paper-het-cluster", None, {"instance": "p3.2xlarge", "count": 1}),
    ("mixed-a100-a10g-llama2-13b", "fp16", {"instance": "p3.8xlarge", "count": 1}),
    ("bench-1024-gpus", "fp16", {"instance": "p5.48xlarge", "count": 1}),       # 64 p5 + 32 p4de + 32 p4d
    ("dgx-a100-gpt3-13b", "fp16", {"instance": "g4dn.12xlarge", "count": 1}),
]
BUDGETS = {"seeds only": 0.0, "0.2 s": work_for(0.2), "default": DEFAULT_WORK}


def _best(scenario, work: float) -> float:
    plans = find_plans(scenario, time_limit_s=None, work=work)
    return plans.result.strategies[0].iteration_time_s if plans.result.strategies else math.inf


@pytest.mark.parametrize("budget", list(BUDGETS))
@pytest.mark.parametrize("name, precision, extra", CLUSTERS, ids=[c[0] for c in CLUSTERS])
def test_adding_a_node_group_never_makes_the_best_slower(name, precision, extra, budget):
    """With a work budget of zero (only the natural sub-clusters are searched), of `plan
    --time-limit 0.2`'s and of the default, the cluster with a group more gives a best at least as
    fast: the cluster without it is one of its natural sub-clusters, searched as that cluster's
    own search searches it, whatever the budget."""
    work = BUDGETS[budget]
    before = _best(_scenario(name, precision), work)
    after = _best(_scenario(name, precision, extra), work)
    assert before < math.inf
    assert after <= before * (1 + 1e-12), (before, after)


def test_seeds_only_is_what_the_natural_sub_clusters_give():
    """With no budget past the seeds, no part but the natural sub-clusters is searched, and the
    answer says so with a proven gap."""
    scenario = load_scenario("bench-128-gpus")
    result, info = search_parts(scenario, work=0.0)
    natural = natural_parts(scenario)
    assert info.searched <= len(natural) and info.seeds >= 1 and result.strategies
    counts = {tuple(g.count - dict(p.strategy.idle or ()).get(i, 0) for i, g in enumerate(scenario.cluster.nodes))
              for p in result.strategies}
    assert counts <= set(natural)
    exact, _ = search_parts(scenario)
    if not info.exact:
        assert info.cut_by == "work" and info.gap is not None
        assert result.strategies[0].iteration_time_s / (1 + info.gap) <= exact.strategies[0].iteration_time_s * (1 + 1e-12)


@pytest.mark.parametrize("name", ["paper-het-cluster", "bench-128-gpus"])
def test_a_work_budget_gives_the_same_answer_every_time(name):
    """The same input and budget, the same ranking and the same work, run after run (the
    budget cuts at the same step: nothing depends on the clock)."""
    scenario = load_scenario(name)
    runs = [search_parts(scenario, work=30_000.0) for _ in range(2)]
    (first, info), (second, again) = runs
    assert info.work == again.work and info.exact == again.exact and info.gap == again.gap
    assert [(p.strategy, p.iteration_time_s) for p in first.strategies] == \
        [(p.strategy, p.iteration_time_s) for p in second.strategies]


def test_a_larger_budget_never_gives_a_worse_best_and_its_gap_holds():
    """On bench-128-gpus: budgets cut the search at successive steps; each best lies within its
    stated gap of the exact optimum, and a larger budget's best is no slower."""
    scenario = load_scenario("bench-128-gpus")
    exact, info = search_parts(scenario)
    assert info.exact and info.cut_by is None
    optimum = exact.strategies[0].iteration_time_s
    previous = math.inf
    for work in (0.0, 5_000.0, 20_000.0, 60_000.0, 200_000.0):
        result, info = search_parts(scenario, work=work)
        best = result.strategies[0].iteration_time_s
        assert best <= previous * (1 + 1e-12)
        previous = best
        assert optimum <= best * (1 + 1e-12)
        if not info.exact:
            assert info.cut_by == "work" and best / (1 + info.gap) <= optimum * (1 + 1e-12)


def test_the_default_budget_is_the_time_limits_share():
    assert DEFAULT_WORK == work_for(1.5) and 0 < POST_PASS_SHARE < 1


@pytest.mark.parametrize("groups, kinds", [(200, 1), (40, 6)])
def test_many_node_groups_are_planned_without_an_array_per_group(groups, kinds):
    """Issue 34: 200 node groups (an array of one dimension per group: 'maximum supported dimension
    for an ndarray is currently 64') and 40 groups of 6 GPU types (240 GiB) now plan, the parts
    enumerated class by class within MAX_PARTS and MAX_CELLS."""
    types = ["p5.48xlarge", "p4de.24xlarge", "p4d.24xlarge", "g5.48xlarge", "a2-highgpu-8g", "ND96asr_v4"][:kinds]
    nodes = [{"instance": types[i % kinds], "count": 1 + i % 3, "price_per_hour": 30.0 + i} for i in range(groups)]
    scenario = parse_scenario({"name": "many groups", "cluster": {"nodes": nodes},
                               "model": load_preset("models", "gpt3-1.3b"),
                               "training": {"global_batch_size": 512, "precision": "bf16"}})
    rows, left_out = part_rows(scenario)
    assert left_out and rows.shape[1] == groups and rows.size <= 4_000_000
    plans = find_plans(scenario, time_limit_s=None, work=0.0, top=3)
    assert plans.result.strategies and plans.idle_search.note
