"""Why a search found nothing, in one line the CLI and the dashboard both print.

In the order a user should hear them:
  - the model's weights, gradients and optimizer state do not fit in all of the cluster's GPU memory
    together, even sharded over every GPU (ZeRO-3): no split, batch or technique can help (the search
    drops such a cluster, and every part of it, before it builds a candidate);
  - a fixed context-parallel degree that divides no GPU count the search can use, or whose double
    does not divide the sequence length: that, and the degrees that would do;
  - no (tp, pp, dp) splits the GPUs with dp dividing the global batch, pp at most the layers and tp
    dividing the GPUs per node: the nearest global batch and GPU count that have one;
  - every candidate runs out of memory: the closest one and by how much;
  - a budget leaves every part of the cluster out.
"""

from __future__ import annotations

import math

from amp_tui.core.base.units import format_bytes
from amp_tui.core.costmodel.memory import least_reserve
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.search import SearchResult, divisors, tp_degrees
from amp_tui.core.spec.scenario import Scenario


def state_shortfall(scenario: Scenario) -> str | None:
    """The one-line reason when the model's training state cannot fit in the whole cluster's GPU
    memory (the test part_bounds applies to every part); None when it can."""
    training, model = scenario.training, scenario.model
    room_bytes = sum(group.count * group.gpus_per_node * max(group.gpu.usable_memory_bytes
                                                              - least_reserve(training, group.gpu), 0.0)
                     for group in scenario.cluster.nodes)
    needed_bytes = model.total_params * training.state_bytes_per_param
    if needed_bytes <= room_bytes:
        return None
    gpus = scenario.cluster.num_gpus
    per_gpu = {format_bytes(max(g.gpu.usable_memory_bytes - least_reserve(training, g.gpu), 0.0))
               for g in scenario.cluster.nodes}
    held = "runtime reserve" if training.runtime_reserve_bytes is not None else "CUDA context"
    return (f"{model.name} is too big for this cluster: its weights, gradients and optimizer state need about "
            f"{format_bytes(needed_bytes)} ({model.total_params / 1e9:.3g} B parameters x "
            f"{training.state_bytes_per_param:g} bytes, {training.precision} with {training.optimizer}), and all "
            f"{gpus} GPUs together hold {format_bytes(room_bytes)} ({' or '.join(sorted(per_gpu))} each after the "
            f"{held}). Use more or larger GPUs, or a smaller model.")


def _has_candidates(scenario: Scenario, gpus: int, batch: int, cp: int = 1) -> bool:
    layers = scenario.model.num_layers
    return gpus % cp == 0 and any((gpus // cp) % tp == 0 and pp <= layers and batch % (gpus // cp // tp // pp) == 0
                                  for tp in tp_degrees(scenario) for pp in divisors(gpus // cp // tp)
                                  if (gpus // cp) % tp == 0)


def _gpu_count_divisible(scenario: Scenario, cp: int) -> bool:
    """Whether cp divides the GPU count of some part of the cluster the search can use (the whole
    cluster's alone with search.use_all_gpus): by the counts' residues mod cp, not the counts."""
    groups = scenario.cluster.nodes
    if scenario.search.use_all_gpus:
        return scenario.cluster.num_gpus % cp == 0
    reachable = {0: False}          # residue -> reached with at least one node
    for group in groups:
        steps = {(k * group.gpus_per_node) % cp for k in range(1, min(group.count, cp) + 1)}
        reachable = {**reachable, **{(r + step) % cp: True for r in reachable for step in steps}}
    return reachable.get(0, False)


def _context_parallel_cause(scenario: Scenario) -> str | None:
    """Why a fixed context-parallel degree leaves no candidate, and which degrees would not; None
    when cp is 1, searched, or not the cause."""
    cp = scenario.training.context_parallel
    if not isinstance(cp, int) or cp <= 1:
        return None
    sequence = scenario.model.sequence_length
    node = math.gcd(*(group.gpus_per_node for group in scenario.cluster.nodes))
    causes = []
    if not _gpu_count_divisible(scenario, cp):
        sizes = " or ".join(str(n) for n in sorted({g.gpus_per_node for g in scenario.cluster.nodes}))
        causes.append(f"context_parallel {cp} divides no GPU count the search can use here (nodes of {sizes} GPUs, "
                      f"{scenario.cluster.num_gpus} in all)")
    if sequence % (2 * cp):
        causes.append(f"2 x context_parallel ({2 * cp}) does not divide the sequence length ({sequence})")
    if cp > node and not scenario.search.allow_cross_node_tp:
        causes.append(f"context_parallel {cp} is more GPUs than a node holds ({node}): its rings stay in a node")
    if not causes:
        return None
    works = [c for c in range(2, node + 1) if _gpu_count_divisible(scenario, c) and sequence % (2 * c) == 0]
    advice = (f"; try context_parallel {', '.join(map(str, works[:-1]))} or {works[-1]}" if len(works) > 1
              else f"; try context_parallel {works[0]}" if works else "; try context_parallel 1")
    return "No candidates at all: " + ", and ".join(causes) + advice + "."


def no_candidates(scenario: Scenario) -> str:
    """Why no (tp, pp, dp) exists at all, and the nearest global batch and GPU count that have one
    (or, where a fixed context-parallel degree is the cause, that, and the degrees that would do)."""
    cp_cause = _context_parallel_cause(scenario)
    if cp_cause:
        return cp_cause
    cp = scenario.training.context_parallel if isinstance(scenario.training.context_parallel, int) else 1
    gpus, batch = scenario.cluster.num_gpus, scenario.training.global_batch_size
    layers = scenario.model.num_layers
    batches = [b for b in range(batch + 1, 4 * batch + 1) if _has_candidates(scenario, gpus, b, cp)][:1]
    counts = [n for n in range(gpus - 1, 0, -1) if _has_candidates(scenario, n, batch, cp)][:1]
    advice = []
    if batches:
        advice.append(f"a global batch of {batches[0]}")
    if counts:
        advice.append(f"{counts[0]} GPUs")
    split = "tp x pp x dp" if cp == 1 else f"tp x cp ({cp}) x pp x dp"
    return (f"No candidates at all: {gpus} GPUs cannot be split as {split} with dp dividing the global batch "
            f"({batch}), pp at most the {layers} layers and tp dividing the GPUs per node. "
            + (f"Try {' or '.join(advice)}." if advice else "Change the GPU count or the global batch."))


def nothing_found(result: SearchResult, objective: Objective | None = None) -> str:
    """One line: why `result` ranks no strategy (see the module docstring for the order)."""
    scenario = result.scenario
    too_big = state_shortfall(scenario)
    if too_big:
        return too_big
    budget = objective.budget_usd_per_hour if objective is not None else None
    if result.stats.candidates == 0 and budget is None:
        return no_candidates(scenario)
    if budget is not None and not result.infeasible:
        return f"No strategy fits in memory on nodes costing at most ${budget:,.2f}/hour: raise or remove the budget."
    if result.infeasible:
        closest = result.infeasible[0]
        return (f"No strategy fits in memory ({len(result.infeasible)} candidates tried); e.g. "
                f"{closest.strategy.label} micro-batch {closest.strategy.micro_batch_size}: {closest.reason}")
    return no_candidates(scenario)


def missing_baseline(result: SearchResult, objective: Objective | None = None) -> str | None:
    """Why `result` has no uniform baseline (the best even split in rank order on the whole
    cluster), in one line; None when it has one, or when nothing at all was found (see
    `nothing_found`)."""
    if result.baseline is not None or (not result.strategies and not result.infeasible):
        return None
    budget = objective.budget_usd_per_hour if objective is not None else None
    prices = [group.price_per_hour for group in result.scenario.cluster.nodes]
    if budget is not None and None not in prices:
        whole = sum(group.count * group.price_per_hour for group in result.scenario.cluster.nodes)
        if whole > budget:
            return (f"no uniform baseline: it runs on the whole cluster, whose ${whole:,.2f}/hour is over the "
                    f"${budget:,.2f}/hour budget")
    return "no uniform baseline: no even split of the layers, nodes in rank order, fits in memory on the whole cluster"
