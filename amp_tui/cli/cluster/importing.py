"""`amp-tui import`: a scenario from SLURM's and nvidia-smi's output (amp_tui.importers)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path

from amp_tui.cli.parser import whole_number
from amp_tui.core.base.errors import SpecError

HELP = "turn scontrol/sinfo and nvidia-smi output into a scenario (node groups, GPUs, links)"
EPILOG = """\
inputs (any order; which is which is read from the text):
  scontrol show node > nodes.txt                         node groups: gres, features, partitions
  sinfo -N -o "%N %P %G %f" > nodes.txt                   the same, shorter
  nvidia-smi topo -m > topo.txt                          a node's GPU links (NVLink, PCIe, NICs)
  nvidia-smi --query-gpu=name,memory.total --format=csv > gpus.csv    its GPU and memory
nvidia-smi names no host: give KEY=FILE (KEY a node, gres type, partition or feature) where a
file could fit more than one node group.

examples:
  amp-tui import nodes.txt -o cluster.yaml
  amp-tui import nodes.txt gpu-a100-01=topo-a100.txt a10g=topo-a10g.txt gpus-a100.csv -o cluster.yaml
  amp-tui import topo.txt gpus.csv --nodes 4 -o cluster.yaml      four nodes like this one
then: amp-tui plan cluster.yaml
"""
DEFAULT_MODEL = "llama2-7b"
DEFAULT_BATCH = 128


def add_parser(sub) -> None:
    im = sub.add_parser("import", help=HELP, description=HELP + ".", epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    im.add_argument("inputs", nargs="+", metavar="[KEY=]FILE", help="saved output of scontrol, sinfo or nvidia-smi")
    im.add_argument("-o", "--output", metavar="SCENARIO.yaml", help="write the scenario here (else to stdout)")
    im.add_argument("--force", action="store_true", help="overwrite an existing output file")
    im.add_argument("--model", default=DEFAULT_MODEL, metavar="PRESET",
                    help=f"the model to plan (a model preset; default {DEFAULT_MODEL})")
    im.add_argument("--global-batch", type=whole_number, default=DEFAULT_BATCH, metavar="N",
                    help=f"global batch size (default {DEFAULT_BATCH})")
    im.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default=None,
                    help="training precision (default bf16, or fp16 where a GPU has no bf16)")
    im.add_argument("--network", metavar="BANDWIDTH",
                    help="bandwidth between nodes, e.g. '200 Gbps' (scontrol and nvidia-smi do not say it)")
    im.add_argument("--gpu", action="append", default=[], metavar="KEY=NAME",
                    help="the catalog GPU of a gres type, partition, feature or node, e.g. a100=A100-80GB")
    im.add_argument("--nodes", type=whole_number, default=1, metavar="N",
                    help="without SLURM output: how many nodes like the one nvidia-smi describes (default 1)")
    im.add_argument("--partition", metavar="NAME", help="only the nodes in this partition")
    im.add_argument("--all-nodes", action="store_true", help="keep nodes that are down or drained")
    im.add_argument("--name", default="imported", metavar="NAME", help="the scenario's and cluster's name")


def _inputs(values: list[str]) -> list[tuple[str | None, str, str]]:
    from amp_tui.core.base.yamlio import path_exists
    from amp_tui.importers.text import read_input

    out = []
    for value in values:
        key, sep, path = value.partition("=")
        if path_exists(value) or not sep:
            key, path = None, value
        elif not key:
            raise SpecError("inputs", value, "expected FILE or KEY=FILE")
        out.append((key, read_input(path), Path(path).name))
    return out


def run(args) -> int:
    from amp_tui.core.base.units import parse_bandwidth
    from amp_tui.core.base.yamlio import dump_yaml
    from amp_tui.core.spec.scenario import parse_scenario
    from amp_tui.importers.cluster import Options, import_cluster
    from amp_tui.importers.gpus import parse_overrides

    output = Path(args.output) if args.output else None
    if output is not None:
        from amp_tui.cli.calibrate import check_output

        check_output(output, args.force)
    if args.nodes < 1:
        raise SpecError("--nodes", args.nodes, "must be at least 1")
    options = Options(gpu_overrides=parse_overrides(args.gpu), nodes=args.nodes, partition=args.partition,
                      network=parse_bandwidth(args.network, "--network") if args.network is not None else None,
                      all_nodes=args.all_nodes)
    imported = import_cluster(_inputs(args.inputs), options)
    from amp_tui.core.spec.hardware import gpu_catalog

    precision = args.precision or ("bf16" if all("bf16" in gpu_catalog()[g.gpu].precisions for g in imported.groups)
                                   else "fp16")
    data = {"name": args.name, "cluster": imported.cluster_dict(args.name), "model": {"preset": args.model},
            "training": {"global_batch_size": args.global_batch, "precision": precision, "recompute": "full",
                         "zero_stage": 1}}
    parse_scenario(data)          # what is written reads back: a bad --model or precision is said here
    text = _header(imported, args) + dump_yaml(data)
    summary = _summary(imported)
    if output is None:
        print(summary, file=sys.stderr)
        print(text, end="")
        return 0
    from amp_tui.core.base.atomic import atomic_write

    written = atomic_write(output, text, overwrite=args.force, field="-o")
    print(summary)
    print(f"\nwrote {written}: `amp-tui plan {written}`; measure the links with `amp-tui profile --network` "
          "(docs/cluster.md)")
    return 0


def _summary(imported) -> str:
    total = sum(g.count * g.gpus_per_node for g in imported.groups)
    lines = [f"imported {len(imported.groups)} node groups, {sum(g.count for g in imported.groups)} nodes, "
             f"{total} GPUs from {', '.join(imported.sources)}:"]
    for i, group in enumerate(imported.groups):
        described = group.describe()
        lines += [f"  {i}: {described[0]}", *(f"  {line}" for line in described[1:])]
    lines += [f"note: {note}" for note in imported.notes]
    lines += [f"not known: {line}" for line in imported.unknowns]
    return "\n".join(lines)


def _header(imported, args) -> str:
    day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    lines = [f"Imported by `amp-tui import` from {', '.join(imported.sources)} on {day}.",
             "Node groups (cluster.nodes, in this order):"]
    for i, group in enumerate(imported.groups):
        described = group.describe()
        lines += [f"  {i}: {described[0]}", *(f"  {line}" for line in described[1:])]
    lines += [f"Note: {note}" for note in imported.notes]
    lines.append("Not known from these inputs (set it here, or measure the links: amp-tui profile --network):")
    lines += [f"  - {line}" for line in imported.unknowns]
    if args.model == DEFAULT_MODEL and args.global_batch == DEFAULT_BATCH:
        lines.append(f"The model and training are defaults ({DEFAULT_MODEL}, global batch {DEFAULT_BATCH}, full "
                     "recomputation, ZeRO-1): set yours (--model, --global-batch; docs/scenarios.md).")
    from amp_tui.core.base.errors import one_line

    return "".join(f"# {one_line(line, 2000)}\n" for line in lines)
