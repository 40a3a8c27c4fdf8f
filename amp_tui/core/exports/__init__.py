"""Turn a plan into what a training engine reads: Megatron-LM arguments, a DeepSpeed config,
torchrun launch lines, or a rank map. Each format lives in its own module; `export_plan` picks one.

An export is text only (file name -> content) plus plain sentences for the user; writing the files
is the caller's job (the CLI writes each one atomically).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amp_tui.core.errors import SpecError
from amp_tui.core.planfile import Plan

EXPORT_FORMATS = ("megatron", "deepspeed", "torchrun", "rankmap")


@dataclass(frozen=True)
class Export:
    files: dict[str, str] = field(hash=False)   # file name -> text
    notes: list[str] = field(hash=False)        # sentences for the user, in reading order


def export_plan(plan: Plan, fmt: str) -> Export:
    """The files and notes of one export format for `plan`."""
    # Imported here: the format modules import Export from this package.
    from amp_tui.core.exports import deepspeed, megatron, rankmap, torchrun

    exporters = {"megatron": megatron.export, "deepspeed": deepspeed.export,
                 "torchrun": torchrun.export, "rankmap": rankmap.export}
    if fmt not in exporters:
        raise SpecError("format", fmt, f"expected one of {', '.join(EXPORT_FORMATS)}")
    if not plan.strategy.idle:
        return exporters[fmt](plan)
    part, note = _used_nodes_only(plan)
    export = exporters[fmt](part)
    return Export(export.files, [note, *export.notes])


def _used_nodes_only(plan: Plan) -> tuple[Plan, str]:
    """The plan on the nodes it uses (idle ones are in no hostfile, rank map or launch line), and a
    note saying so and how node groups are numbered in the files."""
    from dataclasses import replace

    from amp_tui.core.pricing import used_nodes
    from amp_tui.core.subclusters import part_scenario, to_part

    counts = used_nodes(plan.scenario, plan.strategy)
    scenario, kept = part_scenario(plan.scenario, counts)
    groups = plan.scenario.cluster.nodes
    idle = ", ".join(f"{n} x {groups[g].label} (group {g})" for g, n in plan.strategy.idle)
    numbering = ", ".join(f"{i} = cluster group {g} ({groups[g].label})" for i, g in enumerate(kept))
    note = (f"the plan leaves {idle} idle: these files cover only the {scenario.cluster.num_nodes} nodes it uses, "
            f"with node groups numbered among them: {numbering}")
    return replace(plan, scenario=scenario, strategy=to_part(plan.strategy, kept)), note
