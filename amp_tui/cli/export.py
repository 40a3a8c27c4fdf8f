"""`amp-tui export`: turn a plan into Megatron-LM, DeepSpeed, torchrun, rank-map or torchtitan files."""

from __future__ import annotations

import sys
from pathlib import Path

from amp_tui.core.base.errors import SpecError


def add_parser(sub) -> None:
    ex = sub.add_parser("export", help="turn a plan into Megatron-LM, DeepSpeed, torchrun, rank-map or torchtitan files")
    ex.add_argument("plan", metavar="PLAN.yaml")
    ex.add_argument("--format", required=True, metavar="FORMAT", help="megatron, deepspeed, torchrun, rankmap or torchtitan")
    ex.add_argument("-o", "--output", metavar="DIR", help="write the files into DIR (default: print them)")
    ex.add_argument("--force", action="store_true", help="overwrite existing files in DIR")


def run(args) -> int:
    from amp_tui.core.base.atomic import write_files
    from amp_tui.core.plans.exports import export_plan
    from amp_tui.core.plans.planfile import load_plan

    plan = load_plan(args.plan)
    export = export_plan(plan, args.format)
    for warning in export.warnings:         # before the files, not lost among the notes after them
        print(f"warning: {warning}", file=sys.stderr)
    if args.output:
        folder = Path(args.output)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError("-o", args.output, f"cannot create the folder ({exc.strerror})") from None
        for path in write_files(folder, export.files, overwrite=args.force, field="-o"):
            print(f"wrote {path}")
    else:
        for name, text in export.files.items():
            print(f"# ---- {name} ----")
            print(text.rstrip("\n"))
    for note in export.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
