"""What if the labels are wrong? Scale one quantity of the scenario at a time and search again.

The knobs: each node group's intra-node and network bandwidth, each GPU type's speed (peak FLOP/s,
memory bandwidth and measured layer times together) by -50/-20/-10/+10/+20/+50 %, and the global
batch size by x1/2 and x2. For every scaled scenario the search that `plan` runs (find_plans: idle
nodes, then batch shares and per-stage degrees, ranked by the same objective) runs again, so a
what-if's top pick is comparable with the base ranking; the top pick may change. The base search's
top few strategies are also re-predicted in each (their best partition for the new figures, on the
nodes they use), which gives the chart of time against the factor and the most robust choice: the
one whose worst slowdown against the best strategy of any what-if is smallest, among those that are
a sound pick at all. A pick predicted within the memory model's error of a GPU's capacity (it may
not fit), or with a stage whose GPUs do almost nothing (under WASTED_SHARE of the busiest stage's
compute: 16 A10Gs holding the embedding alone), is not the most robust, however it charts; where
the top few hold no sound pick, the best sound one in the ranking is watched as well.

The what-ifs together stop at a deadline (TIME_LIMIT_S by default): those not reached, and the one
running when it passed, are listed as not run, never guessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from amp_tui.core.base.errors import Cancelled, SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.search.deadline import now
from amp_tui.core.search.evaluate import evaluate
from amp_tui.core.search.objective import Objective
from amp_tui.core.search.planner import find_plans
from amp_tui.core.search.search import SearchResult
from amp_tui.core.spec.scenario import Scenario
from amp_tui.core.spec.strategy import Strategy

SPEED_FACTORS = (0.5, 0.8, 0.9, 1.1, 1.2, 1.5)
BATCH_FACTORS = (0.5, 2.0)
WATCHED = 3  # the base search's top strategies followed through every what-if
WASTED_SHARE = 0.1  # a stage with less compute than this share of the busiest stage's wastes its GPUs
TIME_LIMIT_S = 60.0   # all the what-ifs together; those not reached by then are listed as not run


@dataclass(frozen=True)
class Knob:
    name: str                     # 'network p3.8xlarge': that group's inter-node bandwidth
    factors: tuple[float, ...]
    scale: Callable[[Scenario, float], Scenario]


def _scale_group(scenario: Scenario, index: int, field: str, factor: float) -> Scenario:
    """A group's intra- or inter-node bandwidth scaled: the catalog figure and, where the cluster's
    network profile measured that link, the measured one (which the cost model prefers)."""
    nodes = list(scenario.cluster.nodes)
    changes = {field: getattr(nodes[index], field) * factor}
    measured = nodes[index].measured
    if measured is not None:
        keys = ("intra_bandwidth",) if field == "intra_node_bandwidth" else ("inter_bandwidth", "inter_flow_bandwidth")
        changes["measured"] = replace(measured, **{k: getattr(measured, k) * factor for k in keys
                                                   if getattr(measured, k) is not None})
    nodes[index] = replace(nodes[index], **changes)
    return replace(scenario, cluster=replace(scenario.cluster, nodes=tuple(nodes)))


def _scale_gpu(scenario: Scenario, name: str, factor: float) -> Scenario:
    """Every GPU of type `name` `factor` times as fast: peak FLOP/s, memory bandwidth and measured
    layer times (the cost model prefers those where they exist)."""
    nodes = []
    for group in scenario.cluster.nodes:
        if group.gpu.name == name:
            gpu = replace(group.gpu, peak_flops_16=group.gpu.peak_flops_16 * factor,
                          peak_flops_32=group.gpu.peak_flops_32 * factor,
                          memory_bandwidth=group.gpu.memory_bandwidth * factor)
            group = replace(group, gpu=gpu)
        nodes.append(group)
    model = scenario.model
    layers = []
    for layer in model.groups:
        if name in layer.profile:
            by_tp = {tp: (tuple(t / factor for t in times) if isinstance(times, tuple) else times / factor)
                     for tp, times in layer.profile[name].items()}
            layer = replace(layer, profile={**layer.profile, name: by_tp})
        layers.append(layer)
    return replace(scenario, cluster=replace(scenario.cluster, nodes=tuple(nodes)),
                   model=replace(model, groups=tuple(layers)))


def _scale_batch(scenario: Scenario, factor: float) -> Scenario:
    batch = scenario.training.global_batch_size * factor
    if batch < 1 or batch != int(batch):
        raise SpecError("training.global_batch_size", scenario.training.global_batch_size,
                        f"cannot be scaled by {factor:g} to a whole number")
    return replace(scenario, training=replace(scenario.training, global_batch_size=int(batch)))


def knobs(scenario: Scenario) -> list[Knob]:
    out = []
    labels = [group.label for group in scenario.cluster.nodes]
    for index, group in enumerate(scenario.cluster.nodes):
        where = group.label if labels.count(group.label) == 1 else f"{group.label} (group {index})"
        if group.gpus_per_node > 1:
            out.append(Knob(f"intra-node {where}", SPEED_FACTORS,
                            lambda s, f, i=index: _scale_group(s, i, "intra_node_bandwidth", f)))
        if scenario.cluster.num_nodes > 1:
            out.append(Knob(f"network {where}", SPEED_FACTORS,
                            lambda s, f, i=index: _scale_group(s, i, "inter_node_bandwidth", f)))
    for name in dict.fromkeys(group.gpu.name for group in scenario.cluster.nodes):
        out.append(Knob(f"{name} speed", SPEED_FACTORS, lambda s, f, n=name: _scale_gpu(s, n, f)))
    out.append(Knob("global batch size", BATCH_FACTORS, _scale_batch))
    return out


def pick_key(strategy: Strategy) -> tuple:
    """What 'the same pick' means: degrees (per stage where they differ), micro-batch size, the nodes
    left idle and whether the batch is shared unevenly (the partition follows the figures)."""
    return (strategy.label, strategy.micro_batch_size, strategy.idle or (), _uneven(strategy))


def pick_label(strategy: Strategy) -> str:
    """'1x6x2 mbs 1', with ', 1 node idle' and ', shares' where the pick has them."""
    idle = sum(nodes for _, nodes in strategy.idle or ())
    return (f"{strategy.label} mbs {strategy.micro_batch_size}" + (", shares" if _uneven(strategy) else "")
            + (f", {idle} node{'s' if idle > 1 else ''} idle" if idle else ""))


def _uneven(strategy: Strategy) -> bool:
    return bool(strategy.batch_shares) and len(set(strategy.batch_shares)) > 1


@dataclass(frozen=True)
class Case:
    knob: str
    factor: float
    top: Prediction | None              # the search's best in the scaled scenario (None: nothing fits)
    watched_s: tuple[float | None, ...]  # each watched strategy's time there (None: cannot run or fit)
    error: str = ""                     # why this what-if could not be built

    @property
    def best_s(self) -> float | None:
        return self.top.iteration_time_s if self.top is not None else None


@dataclass(frozen=True)
class Sensitivity:
    base: SearchResult
    watched: tuple[Prediction, ...]     # the base search's top strategies
    cases: tuple[Case, ...]

    def changed(self, case: Case) -> bool:
        """Whether the top pick differs from the base search's."""
        if case.top is None or not self.watched:
            return case.top is not None or bool(self.watched)
        return pick_key(case.top.strategy) != pick_key(self.watched[0].strategy)

    def worst_slowdowns(self) -> list[float | None]:
        """Per watched strategy: the largest time / best time over every what-if (None if it cannot
        run in one of them)."""
        out: list[float | None] = []
        for i in range(len(self.watched)):
            ratios = []
            for case in self.cases:
                if case.best_s is None:
                    continue
                t = case.watched_s[i]
                ratios.append(None if t is None else t / case.best_s)
            out.append(None if any(r is None for r in ratios) else max(ratios, default=1.0))
        return out

    @property
    def robust_index(self) -> int | None:
        """The sound watched strategy (unsound() is None) with the best worst case (smallest worst
        slowdown), if any runs in all."""
        slowdowns = self.worst_slowdowns()
        usable = [i for i, s in enumerate(slowdowns) if s is not None and unsound(self.watched[i]) is None]
        return min(usable, key=lambda i: (slowdowns[i], i)) if usable else None

    def passed_over(self) -> list[str]:
        """'2x2x8 mbs 2: it may not fit; ...' for each watched pick with a smaller worst slowdown
        than the most robust one that is left out as unsound."""
        slowdowns, index = self.worst_slowdowns(), self.robust_index
        bar = slowdowns[index] if index is not None else float("inf")
        return [f"{pick_label(p.strategy)}: {unsound(p)}" for p, s in zip(self.watched, slowdowns)
                if s is not None and s < bar and unsound(p) is not None]

    def verdict(self) -> str:
        changes = sum(self.changed(case) for case in self.cases if not case.error)
        total = sum(1 for case in self.cases if not case.error)
        head = (f"the top pick changes in {changes} of {total} what-ifs" if changes
                else f"the top pick holds in all {total} what-ifs")
        late = sum(1 for case in self.cases if case.error.startswith("not run"))
        if late:
            head += f" ({late} not run: out of time)"
        index = self.robust_index
        left_out = "; not " + "; nor ".join(self.passed_over()) if self.passed_over() else ""
        if index is None:
            return head + "; none of the top strategies is a sound pick that runs in every what-if" + left_out
        worst = self.worst_slowdowns()[index]
        return (head + f"; most robust: {pick_label(self.watched[index].strategy)} "
                f"(at worst {(worst - 1) * 100:.1f}% slower than the best of any what-if)" + left_out)

    def to_dict(self) -> dict:
        """For `plan --sensitivity --json`: the watched strategies, every what-if and the verdict."""
        slowdowns = self.worst_slowdowns()
        return {
            "watched": [{"pick": pick_label(p.strategy), "strategy": p.strategy.to_dict(),
                         "iteration_time_s": p.iteration_time_s, "worst_slowdown": slowdown}
                        for p, slowdown in zip(self.watched, slowdowns)],
            "cases": [{"knob": case.knob, "factor": case.factor,
                       "top_pick": pick_label(case.top.strategy) if case.top else None,
                       "top_strategy": case.top.strategy.to_dict() if case.top else None,
                       "best_s": case.best_s, "changed": (not case.error) and self.changed(case),
                       "watched_s": list(case.watched_s), "error": case.error or None}
                      for case in self.cases],
            "most_robust": pick_label(self.watched[self.robust_index].strategy) if self.robust_index is not None else None,
            "verdict": self.verdict(),
        }

    def series(self, knob: str) -> tuple[list[float], list[list[float | None]]]:
        """For the chart: the factors (1 included) and each watched strategy's time at each."""
        cases = sorted([c for c in self.cases if c.knob == knob and not c.error] +
                       [Case(knob, 1.0, None, tuple(p.iteration_time_s for p in self.watched))],
                       key=lambda c: c.factor)
        return [c.factor for c in cases], [[c.watched_s[i] for c in cases] for i in range(len(self.watched))]


def sensitivity(scenario: Scenario, base: SearchResult | None = None, objective: Objective | None = None, *,
                watched: int = WATCHED, time_limit_s: float = TIME_LIMIT_S,
                should_cancel: Callable[[], bool] | None = None,
                progress: Callable[[float], None] | None = None) -> Sensitivity:
    """Every what-if of `knobs(scenario)`, each searched as `plan` searches (find_plans, by
    `objective`); `base` is that search's result on `scenario` when the caller has it. Raises
    Cancelled when `should_cancel` says so; what-ifs past `time_limit_s` are listed as not run."""
    cancel = should_cancel or (lambda: False)
    deadline = now() + time_limit_s
    late = f"not run: past the {time_limit_s:g} s limit for the what-ifs"
    base = base or find_plans(scenario, objective, should_cancel=cancel).result
    # Distinct picks: the same degrees on another node order would chart as a near-copy.
    firsts: dict[tuple, Prediction] = {}
    for prediction in base.strategies:
        firsts.setdefault(pick_key(prediction.strategy), prediction)
    top = tuple(firsts.values())[:watched]
    if top and all(unsound(p) is not None for p in top):     # follow the best sound pick too
        top += tuple(p for p in firsts.values() if unsound(p) is None)[:1]
    plan = [(knob, factor) for knob in knobs(scenario) for factor in knob.factors]
    cases = []
    for done, (knob, factor) in enumerate(plan):
        if cancel():
            raise Cancelled()
        not_run = tuple(None for _ in top)
        if now() > deadline:
            cases.append(Case(knob.name, factor, None, not_run, error=late))
            continue
        try:
            scaled = knob.scale(scenario, factor)
        except SpecError as error:
            cases.append(Case(knob.name, factor, None, not_run, error=error.reason
                              if hasattr(error, "reason") else str(error)))
            continue
        try:
            result = find_plans(scaled, objective, top=1,
                                should_cancel=lambda: cancel() or now() > deadline).result
        except Cancelled:
            if cancel():
                raise
            cases.append(Case(knob.name, factor, None, not_run, error=late))
            continue
        cost = CostModel(scaled)
        times = tuple(_time_in(scaled, prediction.strategy, cost, factor if knob.scale is _scale_batch else 1.0)
                      for prediction in top)
        cases.append(Case(knob.name, factor, result.strategies[0] if result.strategies else None, times))
        if progress is not None:
            progress((done + 1) / len(plan))
    return Sensitivity(base, tuple(top), tuple(cases))


def unsound(prediction: Prediction) -> str | None:
    """Why a pick is no robust choice whatever the what-ifs say (None: it is sound): it may not fit
    (within the memory model's error of a GPU's capacity), or one of its stages wastes its GPUs."""
    from amp_tui.core.plans.confidence import MEMORY_BAND, memory_at_risk

    reasons = [f"it may not fit (within {MEMORY_BAND:.0%} of a GPU's memory)"] if memory_at_risk(prediction) else []
    busiest = max(stage.compute_s for stage in prediction.stages)
    strategy = prediction.strategy
    for stage in prediction.stages:
        if stage.compute_s < WASTED_SHARE * busiest:
            gpus = strategy.tps[stage.index] * strategy.dps[stage.index] * (strategy.cp or 1)
            layers = (f"layer {stage.first_layer}" if stage.first_layer == stage.last_layer
                      else f"layers {stage.first_layer}-{stage.last_layer}")
            reasons.append(f"stage {stage.index}'s {gpus} x {'+'.join(stage.gpu_types)} hold {layers} alone, "
                           f"{stage.compute_s / busiest:.0%} of the busiest stage's compute")
            break
    return " and ".join(reasons) or None


def _time_in(scaled: Scenario, strategy: Strategy, cost: CostModel, batch_factor: float) -> float | None:
    """A watched strategy's time in a what-if (its best partition there), None where it cannot run
    or fit. Batch shares follow the global batch: each is scaled with it (None if not whole)."""
    strategy = replace(strategy, partition=None)
    if strategy.batch_shares and batch_factor != 1.0:
        shares = [share * batch_factor for share in strategy.batch_shares]
        if any(share != int(share) for share in shares):
            return None
        strategy = replace(strategy, batch_shares=tuple(int(share) for share in shares))
    try:
        again = evaluate(scaled, strategy, cost)
    except SpecError:
        return None         # e.g. its micro-batch no longer divides the batch
    return again.iteration_time_s if again.fits_memory else None


def render(result: Sensitivity) -> str:
    """Plain-text table of every what-if, then the verdict (for `amp-tui plan --sensitivity`)."""
    from amp_tui.core.base.units import format_seconds

    names = [pick_label(p.strategy) for p in result.watched]
    rows = [["what-if", "factor", "top pick", "best", *names]]
    base_top = result.watched[0] if result.watched else None
    rows.append(["as given", "x1", pick_label(base_top.strategy) if base_top else "nothing fits",
                 format_seconds(base_top.iteration_time_s) if base_top else "–",
                 *(format_seconds(p.iteration_time_s) for p in result.watched)])
    for case in result.cases:
        if case.error:
            rows.append([case.knob, f"x{case.factor:g}", f"(skipped: {case.error})", "", *("" for _ in names)])
            continue
        pick = pick_label(case.top.strategy) if case.top else "nothing fits"
        rows.append([case.knob, f"x{case.factor:g}", pick + (" *" if result.changed(case) else ""),
                     format_seconds(case.best_s) if case.best_s is not None else "–",
                     *(format_seconds(t) if t is not None else "–" for t in case.watched_s)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([*lines, "", "* the top pick changes. " + result.verdict()])
