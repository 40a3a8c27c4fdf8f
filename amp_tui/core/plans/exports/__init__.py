"""Turn a plan into what a training engine reads: Megatron-LM arguments, a DeepSpeed config,
a torchtitan job config, torchrun launch lines, or a rank map. Each format lives in its own module;
`export_plan` picks one.

An export is text only (file name -> content) plus plain sentences for the user; writing the files
is the caller's job (the CLI writes each one atomically).
"""

from __future__ import annotations

import dataclasses

from amp_tui.core.base.errors import SpecError
from amp_tui.core.plans.exports import deepspeed, megatron, rankmap, torchrun, torchtitan
from amp_tui.core.plans.exports.common import Export
from amp_tui.core.plans.planfile import Plan, prediction_changes
from amp_tui.core.plans.runnable import CUSTOM_FORMATS, uneven_shares
from amp_tui.core.search.evaluate import evaluate

EXPORT_FORMATS = ("megatron", "deepspeed", "torchrun", "rankmap", "torchtitan")


def export_plan(plan: Plan, fmt: str) -> Export:
    """The files and notes of one export format for `plan`."""
    exporters = {"megatron": megatron.export, "deepspeed": deepspeed.export, "torchtitan": torchtitan.export,
                 "torchrun": torchrun.export, "rankmap": rankmap.export}
    if not isinstance(fmt, str) or fmt not in exporters:
        raise SpecError("format", fmt, f"expected one of {', '.join(EXPORT_FORMATS)}")
    refuse_inexpressible(plan, fmt)
    # The saved prediction is a record, not trusted: the files carry today's figures, and the notes
    # say when they differ from the saved ones.
    fresh = evaluate(plan.scenario, plan.strategy)
    changes = prediction_changes(plan.saved_prediction, fresh)
    plan = dataclasses.replace(plan, saved_prediction=fresh.to_dict())
    notes = []
    if changes:
        notes.append("the plan's saved prediction differs from a re-evaluation (" + "; ".join(changes)
                     + "); the files use the re-evaluated figures")
    if plan.strategy.idle:
        plan, note = _used_nodes_only(plan)
        notes.append(note)
    export = exporters[fmt](plan)
    return Export(export.files, [*notes, *export.notes], export.warnings)


# What each format's engine is, for refusals.
ENGINES = {"megatron": "stock Megatron-LM", "deepspeed": "DeepSpeed's pipeline engine", "torchtitan": "torchtitan",
           "torchrun": "the torchrun launch", "rankmap": "the rank map"}


# Formats whose fp8 runs through Transformer Engine.
TRANSFORMER_ENGINE_FORMATS = ("megatron", "deepspeed")


def refuse_inexpressible(plan: Plan, fmt: str) -> None:
    """SpecError, one line naming what the engine cannot express: per-stage tp or dp (Metis-style
    plans) and uneven data-parallel batch shares for the stock engines (torchrun and the rank map
    carry them: runnable.py), and fp8 scaled per row through Transformer Engine."""
    engine, strategy = ENGINES[fmt], plan.strategy
    stock = fmt not in CUSTOM_FORMATS
    if stock and strategy.stage_tp:
        raise SpecError("strategy.tp", list(strategy.stage_tp),
                        f"cannot export to {fmt}: {engine} has one tensor-parallel degree for all stages "
                        f"(the {' and '.join(CUSTOM_FORMATS)} exports carry per-stage degrees)")
    if stock and strategy.stage_dp:
        raise SpecError("strategy.dp", list(strategy.stage_dp),
                        f"cannot export to {fmt}: {engine} has one data-parallel degree for all stages "
                        f"(the {' and '.join(CUSTOM_FORMATS)} exports carry per-stage degrees)")
    if stock and uneven_shares(strategy):
        raise SpecError("strategy.batch_shares", list(strategy.batch_shares),
                        f"cannot export to {fmt}: {engine} gives every data-parallel replica the same share of the "
                        f"batch (the {' and '.join(CUSTOM_FORMATS)} exports carry the shares)")
    if plan.scenario.training.fp8_scaling == "rowwise" and fmt in TRANSFORMER_ENGINE_FORMATS:
        raise SpecError("training.fp8_scaling", "rowwise", f"cannot export to {fmt}: Transformer Engine's fp8 recipes "
                        "scale per tensor or per block, not per row (torchao's rowwise: use --format torchtitan)")


def _used_nodes_only(plan: Plan) -> tuple[Plan, str]:
    """The plan on the nodes it uses (idle ones are in no hostfile, rank map or launch line), and a
    note saying so and how node groups are numbered in the files."""
    from dataclasses import replace

    from amp_tui.core.costmodel.parts import part_scenario, to_part
    from amp_tui.core.costmodel.pricing import used_nodes

    counts = used_nodes(plan.scenario, plan.strategy)
    scenario, kept = part_scenario(plan.scenario, counts)
    groups = plan.scenario.cluster.nodes
    idle = ", ".join(f"{n} x {groups[g].label} (group {g})" for g, n in plan.strategy.idle)
    numbering = ", ".join(f"{i} = cluster group {g} ({groups[g].label})" for i, g in enumerate(kept))
    note = (f"the plan leaves {idle} idle: these files cover only the {scenario.cluster.num_nodes} nodes it uses, "
            f"with node groups numbered among them: {numbering}")
    return replace(plan, scenario=scenario, strategy=to_part(plan.strategy, kept)), note
