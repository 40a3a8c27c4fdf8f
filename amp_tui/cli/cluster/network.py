"""`amp-tui profile --network`: every process measures its part (amp_tui.profiling.network); process
0 writes the network profile and says what it measured and which of a scenario's groups it covers."""

from __future__ import annotations

import sys
from pathlib import Path

from amp_tui.core.base.errors import SpecError


def run_network(args) -> int:
    from amp_tui import __version__
    from amp_tui.core.base.atomic import atomic_write
    from amp_tui.core.spec.hardware import gpu_catalog
    from amp_tui.profiling.network import NetworkOptions, environment, measure_network

    for flag, given in (("--iterations", args.iterations), ("--hf", args.hf), ("--measurements", args.measurements)):
        if given:
            raise SpecError(flag, True, "not used with --network (it measures links, not layers)")
    if args.gpu is not None and args.gpu not in gpu_catalog():
        raise SpecError("--gpu", args.gpu, "not a catalog GPU (see presets/gpus.yaml: e.g. H100, H200, A100-80GB)")
    rank = environment()[0]
    scenario, named = _scenario(args.scenario) if args.scenario else (None, None)
    output = Path(args.output) if args.output else (named or Path("network.yaml"))
    if output.is_dir():
        raise SpecError("-o", output, "is a folder; give a file name")
    cpu = args.device == "cpu"
    options = NetworkOptions(device="cpu" if cpu else "cuda", timeout_s=float(args.timeout), gpu=args.gpu,
                             warmups=args.warmups if args.warmups is not None else (1 if cpu else 2),
                             repeats=args.repeats if args.repeats is not None else (3 if cpu else 5),
                             ranks_per_node=args.ranks_per_node)
    if rank == 0:
        print(f"measuring the network ({'gloo on the CPU' if cpu else 'NCCL'}; median of {options.repeats} after "
              f"{options.warmups} warm-ups)", file=sys.stderr, flush=True)
    profile = measure_network(options, __version__, on_row=_show_row)
    if profile is None:          # not process 0: it measured its part
        return 0
    written = atomic_write(output, profile.to_yaml(), field="-o")
    print(f"wrote {written}: {profile.summary().split(': ', 1)[1]}")
    for i, group in enumerate(profile.groups):
        measured = profile.links(i).measured
        print(f"  {group.name} on {', '.join(group.nodes[:3])}{' ...' if len(group.nodes) > 3 else ''}: "
              + ("; ".join(measured) if measured else "nothing measured"))
    print(f"  use it: cluster: {{nodes: [...], network: {written.name}}} (a path relative to the scenario file)")
    if cpu:
        print("  measured on the CPU with gloo: it proves the code path; measure on the GPUs for real figures")
    if scenario is not None:
        for i, group in enumerate(scenario.cluster.nodes):
            kind = profile.match(group.gpu.name, group.gpus_per_node)
            print(f"  {scenario.name} group {i} ({group.count} x {group.label}): "
                  + (f"measured as {profile.groups[kind].name}" if kind is not None else
                     "not measured: no node with its GPU and GPUs per node took part"))
    return 0


def _scenario(name: str):
    """(the scenario, the path its cluster.network names, if any), without reading that profile."""
    from amp_tui.core.base.yamlio import load_yaml_file, path_exists
    from amp_tui.core.spec.scenario import load_scenario, scenario_from_file

    path = Path(name)
    if not (path.suffix in (".yaml", ".yml") or path_exists(path)):
        return load_scenario(name), None
    data = load_yaml_file(path)
    nested = isinstance(data, dict) and isinstance(data.get("scenario"), dict)
    section = data["scenario"] if nested else data
    cluster = section.get("cluster") if isinstance(section, dict) else None
    named = cluster.get("network") if isinstance(cluster, dict) else None
    if isinstance(named, str):     # measured again: the old file is not read (it may not exist yet)
        section = {**section, "cluster": {k: v for k, v in cluster.items() if k != "network"}}
        data = {**data, "scenario": section} if nested else section
        where = Path(named) if Path(named).is_absolute() else path.parent / named
        return scenario_from_file(data, path.parent), where
    return scenario_from_file(data, path.parent), None


def _show_row(row, where: str) -> None:
    from amp_tui.core.base.units import format_seconds
    from amp_tui.core.spec.network import rate_text, size_text

    what = {"allreduce": "all-reduce", "p2p": "p2p", "p2p_all": "p2p, every GPU"}[row.test]
    figure = "bus bandwidth" if row.test == "allreduce" else "one way"
    print(f"  {what} {row.scope} {where}: {size_text(row.bytes)} x {row.ranks} ranks in {format_seconds(row.seconds)}, "
          f"{figure} {rate_text(row.bandwidth)}", file=sys.stderr, flush=True)
