#!/usr/bin/env python3
"""Issue 38's check against Helix's simulator: amp-tui's placements as the simulator's input, and back.

Helix's simulator (artifact Thesys-lab/Helix-ASPLOS25, commit 148b733) is not part of amp-tui and is
not needed to run this script: it writes and reads the simulator's files (docs/serving.md, "Check
against Helix's simulator", gives the commands that run it).

  layout     `amp-tui serve --json` -> the simulator's input for that placement, in a folder:
             ilp_sol.ini (Helix's solution format: compute_node_<i + 2> = [layers]),
             cluster.ini (Helix's cluster file with the machines that hold no layers left out, the
             rest renumbered in order) and simulator_cluster.ini (what Helix's layout writer,
             ILPLayout.generate_simulator_cluster, makes of them with partial inference allowed: each
             machine's KV-cache capacity, kv_tokens_per_layer x layers from the scenario's serving
             profiles, and every link a request may take: j after i when j starts at or before i's
             end and ends after it).
  placement  Helix's solution file -> an amp-tui saved placement (`amp-tui serve FILE --json` predicts it).

amp-tui's machines map to Helix's nodes of the same kind (GPU and GPUs per machine) in order: the
Helix presets list each region's machines in Helix's order, so the i-th L4 is Helix's i-th L4.

  python3 docs/serving_check.py layout pick.json --scenario helix-single24-llama2-70b \\
      --helix-cluster $HELIX/artifact_evaluation/single_cluster/config/cluster24.ini --out pick/
  python3 docs/serving_check.py placement $HELIX/.../layout_llama70b/ilp/ilp_sol.ini \\
      --scenario helix-single24-llama2-70b --helix-cluster .../cluster24.ini --out helix.yaml
"""

from __future__ import annotations

import argparse
import configparser
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OFFSET = 2     # Helix numbers compute nodes from 2 (0 and 1 are the coordinator's source and sink)


def helix_kind(group) -> str:
    """Helix's machine type for an amp-tui node group: A100-40GB x 1 -> A100, T4 x 2 -> T4x2."""
    base = group.gpu.name.split("-")[0]
    return base + (f"x{group.gpus_per_node}" if group.gpus_per_node > 1 else "")


def read_cluster(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.optionxform = str
    if not parser.read(path):
        raise SystemExit(f"serving_check: --helix-cluster {path}: cannot read it")
    return parser


def node_kinds(cluster: configparser.ConfigParser) -> list[str]:
    total = int(cluster["NodeNames"]["total_compute_nodes"])
    return [cluster[f"ComputeNode-{i}"]["type"] for i in range(total)]


def machine_map(scenario, kinds: list[str]) -> list[int]:
    """Helix's node index of each amp-tui machine (cluster order): same kind, in order."""
    free: dict[str, list[int]] = {}
    for i, kind in enumerate(kinds):
        free.setdefault(kind, []).append(i)
    out = []
    for group in scenario.groups:
        kind = helix_kind(group)
        for _ in range(group.count):
            if not free.get(kind):
                raise SystemExit(f"serving_check: the Helix cluster has fewer {kind} machines than {scenario.name}")
            out.append(free[kind].pop(0))
    if any(free.values()):
        raise SystemExit(f"serving_check: the Helix cluster has machines {scenario.name} lacks: "
                         + ", ".join(f"{len(v)} x {k}" for k, v in free.items() if v))
    return out


def _write(path: Path, parser: configparser.ConfigParser) -> None:
    with open(path, "w") as f:
        parser.write(f)


def subcluster(cluster: configparser.ConfigParser, keep: list[int]) -> configparser.ConfigParser:
    """Helix's cluster file with only the nodes in `keep` (Helix indices), renumbered in that order."""
    new = {old: i for i, old in enumerate(keep)}
    out = configparser.ConfigParser()
    out.optionxform = str
    out["NodeNames"] = {"total_compute_nodes": str(len(keep))}
    out["SourceNode"] = {"connected_nodes": str(list(range(len(keep))))}
    out["SinkNode"] = {"connected_nodes": str(list(range(len(keep))))}
    for old in keep:
        section = cluster[f"ComputeNode-{old}"]
        others = [new[o] for o in _ints(section["connected_nodes"]) if o in new]
        out[f"ComputeNode-{new[old]}"] = {"type": section["type"],
                                          "connected_nodes": str(["source", *others, "sink"])}
    for name in cluster.sections():
        if name.startswith("Link-"):
            _, a, b = name.split("-")
            a2 = "source" if a == "source" else new.get(int(a))
            b2 = "sink" if b == "sink" else new.get(int(b))
            if a2 is not None and b2 is not None:
                out[f"Link-{a2}-{b2}"] = dict(cluster[name])
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.strip("[]").replace("'", "").split(",") if x.strip().isdigit()]


def _number(text: str) -> float:
    """A Helix quantity such as '16 * GB', '14.2 * mbps' or '55 * MilliSec' in bytes, bytes/s or seconds."""
    units = {"GB": 1e9, "MB": 1e6, "KB": 1e3, "gbps": 1e9, "mbps": 1e6, "kbps": 1e3, "MilliSec": 1e-3, "Sec": 1.0}
    value, _, unit = text.partition("*")
    return float(value) * (units[unit.strip()] if unit.strip() else 1.0)


def simulator_cluster(sub: configparser.ConfigParser, held: list[tuple[int, int]], kinds: list[str],
                      capacity: list[int], num_layers: int, machines: configparser.ConfigParser) -> str:
    """The simulator's cluster file for the kept nodes: held[i] = (first, count) of kept node i; `machines`:
    Helix's machine_profiles.ini (memory and NIC speeds by kind)."""
    names = [f"compute_node_{OFFSET + i}" for i in range(len(held))]
    def field(kind: str, key: str, unit: float) -> float:
        return _number(machines[kind][key]) / unit

    lines = ["# Simulator cluster file written by amp-tui's docs/serving_check.py (Helix's format).", "",
             "[Coordinator]", f"inbound_nic_speed={field('SinkNode', 'inbound_nic_speed', 1e6)} * mbps",
             f"outbound_nic_speed={field('SourceNode', 'outbound_nic_speed', 1e6)} * mbps", "",
             "[MachineTypes]", f"types={[k for k in machines.sections() if not k.endswith('Node')]}", "",
             "[ComputeNodes]", f"names={names}", ""]
    for i, name in enumerate(names):
        kind = kinds[i]
        lines += [f"[{name}]", f"vram_size={field(kind, 'vram_size', 1e6)} * MB",
                  f"inbound_nic_speed={field(kind, 'inbound_nic_speed', 1e6)} * mbps",
                  f"outbound_nic_speed={field(kind, 'outbound_nic_speed', 1e6)} * mbps",
                  f"disk_speed={field(kind, 'disk_speed', 1e6)} * mbps", f'machine_type="{kind}"',
                  f"kv_cache_capacity={capacity[i]}", "activation_backup_capacity=0", ""]

    def valid(a, b) -> bool:
        if a == "source":
            return held[b][0] == 0
        if b == "sink":
            return held[a][0] + held[a][1] == num_layers
        end_a, start_b, end_b = held[a][0] + held[a][1], held[b][0], held[b][0] + held[b][1]
        return start_b <= end_a < end_b

    links = {}
    for section in sub.sections():
        if not section.startswith("Link-"):
            continue
        _, a, b = section.split("-")
        a = a if a == "source" else int(a)
        b = b if b == "sink" else int(b)
        for x, y in ((a, b), (b, a)):
            if x != "sink" and y != "source" and not (x == "source" and y == "sink") and valid(x, y):
                links[(x, y)] = sub[section]
    # a machine no request can leave (or reach) is cut off, as Helix's writer does
    sending = {x for x, _ in links}
    links = {(x, y): s for (x, y), s in links.items() if y == "sink" or y in sending}
    receiving = {y for _, y in links}
    links = {(x, y): s for (x, y), s in links.items() if x == "source" or x in receiving}

    def label(x) -> str:
        return x if x in ("source", "sink") else names[x]
    lines += ["[Links]", f"names={[f'link_{label(x)}_{label(y)}' for x, y in links]}", ""]
    for (x, y), s in links.items():
        latency, bandwidth = _number(s["latency"]) * 1000, _number(s["bandwidth"]) / 1e6
        lines += [f"[link_{label(x)}_{label(y)}]", f"in={label(x)}", f"out={label(y)}",
                  f"latency={latency} * MilliSec", f"bandwidth={bandwidth} * mbps", ""]
    return "\n".join(lines)


def layout(args) -> None:
    from amp_tui.serving.planfile import open_serving

    scenario, _ = open_serving(args.scenario)
    served = json.loads(Path(args.serve_json).read_text())
    rows = served["placement"]
    cluster = read_cluster(Path(args.helix_cluster))
    kinds = node_kinds(cluster)
    to_helix = machine_map(scenario, kinds)
    if len(rows) != len(to_helix):
        raise SystemExit(f"serving_check: {args.serve_json} places {len(rows)} machines; {scenario.name} has "
                         f"{len(to_helix)}: was it solved for another scenario?")
    order = [(g.index, n) for g in scenario.groups for n in range(g.count)]
    by_machine = {(r["group"], r["node"]): (r["first_layer"], r["num_layers"]) for r in rows}
    held_by_node = {to_helix[m]: by_machine[key] for m, key in enumerate(order)}
    keep = sorted(node for node, (_, k) in held_by_node.items() if k > 0)
    profiles = {helix_kind(g): g.profile for g in scenario.groups}
    if any(p is None for p in profiles.values()):
        raise SystemExit("serving_check: every node group needs a serving_profile (the KV capacity comes from it)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sub = subcluster(cluster, keep)
    _write(out / "cluster.ini", sub)
    held = [held_by_node[node] for node in keep]
    kept_kinds = [kinds[node] for node in keep]
    capacity = [int(round(profiles[kind].kv_tokens(k) * k)) for kind, (_, k) in zip(kept_kinds, held)]
    machines = read_cluster(Path(args.helix_cluster).parent / "machine_profiles.ini")
    (out / "simulator_cluster.ini").write_text(
        simulator_cluster(sub, held, kept_kinds, capacity, scenario.serving_model.num_layers, machines))
    solution = ["[Settings]", f"offset={OFFSET}", "", "[Solution]"]
    solution += [f"compute_node_{OFFSET + i}={list(range(a, a + k))}" for i, (a, k) in enumerate(held)]
    (out / "ilp_sol.ini").write_text("\n".join(solution) + "\n")
    (out / "nodes.json").write_text(json.dumps({"helix_nodes_kept": keep}) + "\n")
    print(f"wrote {out}/ilp_sol.ini, cluster.ini, simulator_cluster.ini ({len(keep)} of {len(kinds)} machines hold "
          "layers)", file=sys.stderr)


def placement(args) -> None:
    from amp_tui.core.base.yamlio import atomic_write, dump_yaml
    from amp_tui.serving.planfile import FORMAT, open_serving

    scenario, _ = open_serving(args.scenario)
    cluster = read_cluster(Path(args.helix_cluster))
    to_helix = machine_map(scenario, node_kinds(cluster))
    parser = configparser.ConfigParser()
    if not parser.read(args.solution):
        raise SystemExit(f"serving_check: {args.solution}: cannot read it")
    layers = {int(name.split("_")[2]) - OFFSET: _ints(value) for name, value in parser["Solution"].items()}
    order = [(g.index, n) for g in scenario.groups for n in range(g.count)]
    rows = []
    for m, (group, node) in enumerate(order):
        held = layers.get(to_helix[m], [])
        rows.append({"group": group, "node": node, "first_layer": held[0] if held else 0, "num_layers": len(held)})
    data = {"format": FORMAT, "scenario": scenario.to_dict(), "placement": rows}
    atomic_write(args.out, f"# Helix's placement from {args.solution}\n" + dump_yaml(data))
    print(f"wrote {args.out}", file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lay = sub.add_parser("layout", help="serve --json -> the simulator's input files")
    lay.add_argument("serve_json")
    pla = sub.add_parser("placement", help="Helix's solution file -> an amp-tui saved placement")
    pla.add_argument("solution")
    for p in (lay, pla):
        p.add_argument("--scenario", required=True, help="the serving scenario serve solved (preset or file)")
        p.add_argument("--helix-cluster", required=True, help="Helix's cluster file (config/cluster24.ini ...)")
        p.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    (layout if args.command == "layout" else placement)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
