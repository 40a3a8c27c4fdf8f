"""Two predictions side by side, term by term, and one sentence saying where the difference comes from.

The iteration time splits exactly into named terms along the bottleneck stage b (B micro-batches,
C_b its compute per micro-batch with tp_b the tensor-parallel part of it, c_b its pipeline sends,
t* the stage with the slowest all-reduce + optimizer tail):

  compute         B x (C_b - tp_b - z_b)
  tp comm         B x tp_b
  ZeRO-3 comm     B x z_b                (per-layer parameter all-gathers and reduce-scatters compute
                                          does not hide, on the FSDP or HSDP shard ring; listed
                                          only where it is not 0)
  pipeline sends  B x c_b
  bubble          fill/drain - tau_b     (the pipeline time the bottleneck GPUs spend waiting)
  dp all-reduce   all-reduce of t* (under HSDP: of the gradient shard across replicas)
  optimizer       optimizer step of t*

Their sum is (B - 1) tau_b + fill/drain + tail = the iteration time. `time_terms` is the one place that
lists them: a cost model that grows new named terms (a `terms` mapping on the Prediction) is picked
up there and flows through the comparison, the sentence and every front end unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from amp_tui.core.base.units import format_bandwidth, format_bytes, format_seconds
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.spec.scenario import Scenario

# A contributor is named in the sentence when it is at least this share of the largest difference.
NAMED_SHARE = 0.25
MAX_NAMED = 3


def time_terms(prediction: Prediction) -> dict[str, float]:
    """Named seconds per iteration that sum to the iteration time (see the module docstring)."""
    terms = getattr(prediction, "terms", None)
    if isinstance(terms, Mapping) and terms:  # a cost model that names its own terms
        return {str(name): float(seconds) for name, seconds in terms.items()}
    B = prediction.num_micro_batches
    bottleneck = prediction.stages[prediction.bottleneck_stage]
    tail = max(prediction.stages, key=lambda st: st.dp_allreduce_s + st.optimizer_step_s)
    zero3 = {"ZeRO-3 comm": B * bottleneck.shard_comm_s} if bottleneck.shard_comm_s else {}
    return {
        "compute": B * (bottleneck.compute_s - bottleneck.tp_comm_s - bottleneck.shard_comm_s),
        "tp comm": B * bottleneck.tp_comm_s,
        **zero3,
        "pipeline sends": B * bottleneck.comm_s,
        "engine overhead": B * bottleneck.overhead_s,
        # what filling and draining the pipeline adds beyond one more micro-batch on the bottleneck
        # (below zero only when interleaving drains faster than that)
        "bubble": prediction.fill_drain_s - bottleneck.stage_time_s,
        "dp all-reduce": tail.dp_allreduce_s,
        "optimizer": tail.optimizer_step_s,
        "fixed per iteration": prediction.iteration_overhead_s,
    }


# Terms listed only where a strategy has them; the other side of a comparison reads 0.
_OPTIONAL_TERMS = ("ZeRO-3 comm",)


def _absent(name: str) -> float | None:
    return 0.0 if name in _OPTIONAL_TERMS else None


def term_links(scenario: Scenario, prediction: Prediction) -> dict[str, str]:
    """The effective per-flow bandwidth of the link each communication term runs over, for the
    sentence ('at 2.5 Gbps'); only terms that use a link are listed."""
    s = prediction.strategy
    if s.per_stage:          # no one layout: each stage has its own links (stagewise.py)
        return {}
    if s.idle:               # laid out on the nodes it uses, as it was predicted
        from amp_tui.core.costmodel.parts import part_scenario, to_part
        from amp_tui.core.costmodel.pricing import used_nodes

        scenario, kept = part_scenario(scenario, used_nodes(scenario, s))
        s = to_part(s, kept)
    order = s.placement or tuple(range(len(scenario.cluster.nodes)))
    layout = CostModel(scenario).layout(s.tp, s.pp, s.dp, order)
    bottleneck = prediction.bottleneck_stage
    tail = max(range(len(prediction.stages)),
               key=lambda i: prediction.stages[i].dp_allreduce_s + prediction.stages[i].optimizer_step_s)
    neighbours = [k for k in (bottleneck - 1, bottleneck) if 0 <= k < len(layout.boundary_seconds_per_byte)]
    seconds_per_byte = {
        "tp comm": float(layout.stage_tp_seconds_per_byte[bottleneck]),
        "pipeline sends": max((float(layout.boundary_seconds_per_byte[k]) for k in neighbours), default=0.0),
        "dp all-reduce": float(layout.dp_seconds_per_byte[tail]),
    }
    return {name: f"at {format_bandwidth(1.0 / spb)}" for name, spb in seconds_per_byte.items() if spb > 0}


def model_flops_per_iteration(scenario: Scenario) -> float:
    """Forward + backward FLOPs of the model for one global batch (3 x forward; recomputation is
    not useful work, so it does not count)."""
    return 3.0 * float(scenario.model.columns["flops"].sum()) * scenario.training.global_batch_size


def tokens_per_s(scenario: Scenario, prediction: Prediction) -> float:
    return prediction.samples_per_s * scenario.model.sequence_length


def mfu(scenario: Scenario, prediction: Prediction) -> float:
    """Model FLOPs utilisation: model FLOPs per iteration / (iteration time x the peak of every
    GPU the strategy uses; the nodes it leaves idle do not count)."""
    from amp_tui.core.costmodel.pricing import used_nodes

    precision = scenario.training.precision
    peak = sum(nodes * group.gpus_per_node * group.gpu.peak_flops(precision)
               for group, nodes in zip(scenario.cluster.nodes, used_nodes(scenario, prediction.strategy)))
    return model_flops_per_iteration(scenario) / (prediction.iteration_time_s * peak) if peak > 0 else 0.0


@dataclass(frozen=True)
class Row:
    """One term of both predictions; None where a prediction has no such term (e.g. a stage it lacks)."""

    name: str
    a: float | None
    b: float | None
    unit: str  # "s" or "B"

    @property
    def difference(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    def format(self, value: float | None, signed: bool = False) -> str:
        if value is None:
            return "–"
        sign = ("+" if value > 0 else "−" if value < 0 else "±") if signed else ""
        magnitude = abs(value) if signed else value
        return sign + (format_seconds(magnitude) if self.unit == "s" else format_bytes(magnitude))


@dataclass(frozen=True)
class Comparison:
    a_name: str
    b_name: str
    a: Prediction
    b: Prediction
    terms: tuple[Row, ...]     # time terms (they sum to each iteration time), then the total
    stages: tuple[Row, ...]    # compute per iteration and memory per GPU, stage by stage
    sentence: str
    notes: tuple[str, ...] = ()     # a strategy that does not fit, or may not: said before the sentence

    def lines(self) -> list[str]:
        """The comparison as plain text columns (the CLI prints these)."""
        width = max(len(row.name) for row in (*self.terms, *self.stages))
        cols = [f"{'':<{width}}  {self.a_name:>14}  {self.b_name:>14}  {'difference':>11}"]
        for row in (*self.terms, *self.stages):
            a, b = row.format(row.a), row.format(row.b)
            if row.name.endswith(" memory"):
                stage = int(row.name.split()[1])
                a, b = a + memory_mark(self.a, stage), b + memory_mark(self.b, stage)
            cols.append(f"{row.name:<{width}}  {a:>14}  {b:>14}  {row.format(row.difference, signed=True):>11}")
        return [*(f"note: {note}" for note in self.notes), self.sentence, "", *cols]


def memory_mark(prediction: Prediction, stage: int) -> str:
    """' OVER' where the stage does not fit, ' !' where it fits within the memory model's error."""
    from amp_tui.core.plans.confidence import MEMORY_BAND

    if stage >= len(prediction.stages):
        return ""
    st = prediction.stages[stage]
    return " OVER" if not st.fits else " !" if st.memory.total_bytes * (1 + MEMORY_BAND) > st.capacity_bytes else ""


def fit_note(name: str, prediction: Prediction) -> str | None:
    """'1x1x32 does not fit in memory: ...', '2x1x8 may not fit: ...', or None."""
    from amp_tui.core.plans.confidence import MEMORY_BAND, memory_at_risk

    if not prediction.fits_memory:
        return f"{name} does not fit in memory: {prediction.reason}"
    if memory_at_risk(prediction):
        st = prediction.tightest_stage
        return (f"{name} may not fit: stage {st.index} needs {format_bytes(st.memory.total_bytes)} of "
                f"{format_bytes(st.capacity_bytes)}, within the memory model's error ({MEMORY_BAND:.0%})")
    return None


def names(a: Prediction, b: Prediction) -> tuple[str, str]:
    """Short names that tell the two apart: the degrees, then the micro-batch size if needed,
    then the partition."""
    sa, sb = a.strategy, b.strategy
    if sa.label != sb.label:
        return sa.label, sb.label
    if sa.micro_batch_size != sb.micro_batch_size:
        return f"{sa.label} mbs {sa.micro_batch_size}", f"{sb.label} mbs {sb.micro_batch_size}"
    if sa.partition != sb.partition:
        split = lambda s: "/".join(map(str, s.partition or ()))  # noqa: E731
        return f"{sa.label} ({split(sa)})", f"{sb.label} ({split(sb)})"
    return f"{sa.label} (pinned)", f"{sb.label}"


def compare(a: Prediction, b: Prediction, scenario: Scenario | None = None,
            a_name: str | None = None, b_name: str | None = None) -> Comparison:
    """`a` (e.g. the pinned strategy) against `b`; differences read b - a. With the scenario the
    sentence names the link a communication term runs over."""
    default_a, default_b = names(a, b)
    a_name, b_name = a_name or default_a, b_name or default_b
    ta, tb = time_terms(a), time_terms(b)
    terms = [Row(name, ta.get(name, _absent(name)), tb.get(name, _absent(name)), "s")
             for name in dict.fromkeys([*ta, *tb])]
    terms.append(Row("iteration", a.iteration_time_s, b.iteration_time_s, "s"))
    stages = []
    for i in range(max(len(a.stages), len(b.stages))):
        sa = a.stages[i] if i < len(a.stages) else None
        sb = b.stages[i] if i < len(b.stages) else None
        per_iteration = lambda p, st: None if st is None else p.num_micro_batches * st.compute_s  # noqa: E731
        stages.append(Row(f"stage {i} compute", per_iteration(a, sa), per_iteration(b, sb), "s"))
    for i in range(max(len(a.stages), len(b.stages))):
        memory = lambda p: p.stages[i].memory.total_bytes if i < len(p.stages) else None  # noqa: E731
        stages.append(Row(f"stage {i} memory", memory(a), memory(b), "B"))
    links: dict[str, str] = {}
    if scenario is not None:
        # Each term's link is that of the strategy spending more on it: the link the difference is about.
        links_a, links_b = term_links(scenario, a), term_links(scenario, b)
        for row in terms:
            if row.a is not None and row.b is not None:
                link = (links_a if row.a > row.b else links_b).get(row.name)
                if link:
                    links[row.name] = link
    sentence = explain(a_name, b_name, a.iteration_time_s, b.iteration_time_s, terms[:-1], links)
    notes = tuple(note for note in (fit_note(a_name, a), fit_note(b_name, b)) if note)
    return Comparison(a_name, b_name, a, b, tuple(terms), tuple(stages), sentence, notes)


def explain(a_name: str, b_name: str, a_s: float, b_s: float, terms: list[Row],
            links: Mapping[str, str] | None = None) -> str:
    """'1x8x2 is faster by 0.21 s: 0.35 s less dp all-reduce at 10 Gbps, 0.12 s more bubble'."""
    links = links or {}
    gap = b_s - a_s
    if abs(gap) <= 1e-12 * max(a_s, b_s, 1e-30):
        return f"{a_name} and {b_name} take the same time ({format_seconds(a_s)})"
    winner, sign = (a_name, -1.0) if gap > 0 else (b_name, 1.0)
    # Each term as the winner's value minus the loser's: negative means the winner spends less.
    deltas = [(name_, sign * row.difference) for row in terms
              if (name_ := row.name) and row.difference is not None and row.difference != 0]
    deltas.sort(key=lambda item: -abs(item[1]))
    largest = abs(deltas[0][1]) if deltas else 0.0
    named = [(n, d) for n, d in deltas if abs(d) >= NAMED_SHARE * largest][:MAX_NAMED]
    parts = []
    for name, delta in named:
        where = f" {links[name]}" if name in links else ""
        parts.append(f"{format_seconds(abs(delta))} {'less' if delta < 0 else 'more'} {name}{where}")
    return f"{winner} is faster by {format_seconds(abs(gap))}" + (": " + ", ".join(parts) if parts else "")
