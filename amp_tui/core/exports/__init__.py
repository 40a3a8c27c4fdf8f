"""Turn a plan into what a training engine reads: Megatron-LM arguments, a DeepSpeed config,
a torchtitan job config, torchrun launch lines, or a rank map. Each format lives in its own module;
`export_plan` picks one.

An export is text only (file name -> content) plus plain sentences for the user; writing the files
is the caller's job (the CLI writes each one atomically).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from amp_tui.core.errors import SpecError
from amp_tui.core.evaluate import evaluate
from amp_tui.core.planfile import Plan, prediction_changes

EXPORT_FORMATS = ("megatron", "deepspeed", "torchrun", "rankmap", "torchtitan")


@dataclass(frozen=True)
class Export:
    files: dict[str, str] = field(hash=False)   # file name -> text
    notes: list[str] = field(hash=False)        # sentences for the user, in reading order


def export_plan(plan: Plan, fmt: str) -> Export:
    """The files and notes of one export format for `plan`."""
    # Imported here: the format modules import Export from this package.
    from amp_tui.core.exports import deepspeed, megatron, rankmap, torchrun, torchtitan

    exporters = {"megatron": megatron.export, "deepspeed": deepspeed.export, "torchtitan": torchtitan.export,
                 "torchrun": torchrun.export, "rankmap": rankmap.export}
    if not isinstance(fmt, str) or fmt not in exporters:
        raise SpecError("format", fmt, f"expected one of {', '.join(EXPORT_FORMATS)}")
    # The saved prediction is a record, not trusted: the files carry today's figures, and the notes
    # say when they differ from the saved ones.
    fresh = evaluate(plan.scenario, plan.strategy)
    changes = prediction_changes(plan.saved_prediction, fresh)
    export = exporters[fmt](dataclasses.replace(plan, saved_prediction=fresh.to_dict()))
    if changes:
        export.notes.insert(0, "the plan's saved prediction differs from a re-evaluation (" + "; ".join(changes)
                            + "); the files use the re-evaluated figures")
    return export
