"""What every export needs to know about a plan: stage boundaries, nodes in rank order, who runs where.

Rank order is Megatron-LM / DeepSpeed's, the one the cost model assumed: global rank
r = tp_rank + tp * (dp_rank + dp * stage), ranks handed out node by node in the plan's placement
order (costmodel/placement.py's Nodes, which every layout of the prediction shares, so an export
cannot disagree with it). Per-stage degrees (stagewise.py) give stage s the next tp_s x dp_s ranks.

Names (scenario, model, GPU, instance) reach the generated files only through `summary`,
`NodeSlot.describe` and `comment`, which keep them on one line: scenario validation refuses line
breaks in names, and these escape any that get past it, so that no name can end a comment line.
Values in shell commands are quoted with shlex.quote; JSON and CSV are written by their modules.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from amp_tui import __version__
from amp_tui.core.base.errors import one_line
from amp_tui.core.costmodel.placement import Nodes
from amp_tui.core.plans.planfile import Plan


@dataclass(frozen=True)
class NodeSlot:
    """One node of the cluster, in the order it takes global ranks."""

    index: int          # node rank for the launcher: 0 .. num_nodes - 1
    group: int          # index of its node group in the scenario's cluster
    label: str          # instance name, or "8xA100-80GB"
    gpu: str
    gpus: int
    first_rank: int
    stages: tuple[int, ...]   # pipeline stages with at least one rank on this node

    @property
    def hostname(self) -> str:
        """Placeholder name shared by every export (hostfile, launch lines, rank map)."""
        return f"node-{self.index}"

    def describe(self) -> str:
        stages = ", ".join(str(s) for s in self.stages)
        return comment(f"{self.hostname}: node group {self.group}, {self.label}, {self.gpus} x {self.gpu}, "
                f"ranks {self.first_rank}-{self.first_rank + self.gpus - 1}, "
                f"stage{'s' if len(self.stages) > 1 else ''} {stages}")


def ranks_on_nodes(plan: Plan) -> Nodes:
    """Every GPU of the plan's cluster in rank order: ranks are handed out node by node in the plan's
    placement order, whatever the degrees (rank_node, node_group, rank_local_gpu)."""
    return Nodes(plan.scenario.cluster, plan.strategy.placement or tuple(range(len(plan.scenario.cluster.nodes))))


def stage_bounds(plan: Plan) -> list[int]:
    """[0, b1, ..., L]: stage s holds expanded layers bounds[s] .. bounds[s + 1] - 1."""
    bounds = [0]
    for count in plan.strategy.partition:
        bounds.append(bounds[-1] + count)
    return bounds


def stage_first_ranks(plan: Plan) -> list[int]:
    """[r0, r1, ..., world]: stage s holds global ranks r_s .. r_(s+1) - 1 (tp_s x cp x dp_s of them:
    per-stage degrees as core/costmodel/stagewise.py places them, or the same for every stage)."""
    from amp_tui.core.spec.knobs import resolve

    cp = resolve(plan.strategy, plan.scenario.training).cp
    firsts = [0]
    for tp, dp in zip(plan.strategy.tps, plan.strategy.dps):
        firsts.append(firsts[-1] + tp * cp * dp)
    return firsts


def rank_coordinates(plan: Plan, rank: int) -> tuple[int, int, int]:
    """(stage, data-parallel replica, tensor rank) of a global rank: inside a stage, rank =
    first rank of the stage + tensor rank + tp x replica (Megatron's order, so with one tp and dp for
    all stages r = tp_rank + tp * (dp_rank + dp * stage)); with context parallelism the tensor rank
    counts tp x cp ranks (tensor rank fastest, then context rank)."""
    from amp_tui.core.spec.knobs import resolve

    firsts = stage_first_ranks(plan)
    stage = bisect.bisect_right(firsts, rank) - 1
    block = plan.strategy.tps[stage] * resolve(plan.strategy, plan.scenario.training).cp
    inner = rank - firsts[stage]
    return stage, inner // block, inner % block


def nodes(plan: Plan) -> list[NodeSlot]:
    on = ranks_on_nodes(plan)
    groups = plan.scenario.cluster.nodes
    slots = []
    for index, group in enumerate(int(g) for g in on.node_group):
        ranks = [int(r) for r in np.flatnonzero(on.rank_node == index)]
        stages = tuple(sorted({rank_coordinates(plan, r)[0] for r in ranks}))
        node_group = groups[group]
        slots.append(NodeSlot(index=index, group=group, label=node_group.label, gpu=node_group.gpu.name,
                              gpus=node_group.gpus_per_node, first_rank=ranks[0], stages=stages))
    return slots


def summary(plan: Plan) -> str:
    """One line naming the plan, for file headers."""
    s = plan.strategy
    seconds = plan.saved_prediction.get("iteration_time_s")
    predicted = f", predicted {seconds:.4g} s per iteration" if isinstance(seconds, (int, float)) else ""
    tp = "/".join(map(str, s.tps)) if s.stage_tp else s.tp
    dp = "/".join(map(str, s.dps)) if s.stage_dp else s.dp
    return comment(f"amp-tui {__version__} plan for {plan.scenario.name}: tp={tp} pp={s.pp} dp={dp}, "
            f"micro-batch {s.micro_batch_size}, global batch {plan.scenario.training.global_batch_size}"
            f"{predicted}")


def comment(text: str) -> str:
    """`text` safe to follow a `#` in a shell, Python or hostfile comment: one line, no control characters."""
    return one_line(text, limit=1000)


def python_string_text(text: str) -> str:
    """`text` safe inside a Python triple-quoted string: one line, quotes and backslashes escaped."""
    return comment(text).replace("\\", "\\\\").replace('"', '\\"')


def num_micro_batches(plan: Plan) -> int:
    return plan.strategy.num_micro_batches(plan.scenario.training.global_batch_size)


@dataclass(frozen=True)
class Export:
    files: dict[str, str] = field(hash=False)   # file name -> text
    notes: list[str] = field(hash=False)        # sentences for the user, in reading order
    # What the user must hear before running the files (e.g. "does not fit: ..."): printed first,
    # shown in the export dialog's header, and written at the top of the files too.
    warnings: list[str] = field(default_factory=list, hash=False)
