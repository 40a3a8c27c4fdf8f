"""SLURM's view of the nodes: `scontrol show node` and `sinfo -N -o "%N %P %G %f"`.

`scontrol show node` prints one record per node (slurm's src/api/node_info.c,
slurm_sprint_node_table): `NodeName=gpu-a100-01 Arch=x86_64 ...` then indented `Key=Value` lines,
among them `AvailableFeatures=a100,ib`, `Gres=gpu:a100:8(S:0-1)`, `State=IDLE ...` and
`Partitions=gpu,a100`; with `-o` (one-liner) all on one line. `sinfo` prints a header of column
names (NODELIST, PARTITION, GRES, AVAIL_FEATURES, STATE, NODES: src/sinfo/print.c) and one row
per node with `-N` (a node in two partitions twice, the default partition starred), or per set of
nodes without it (a hostlist such as `gpu-[01-04]`). A width in the format (`%20G`) cuts values:
give none.

A node's GPUs are its `gpu` gres: `gpu:a100:8` is eight GPUs of type a100, `gpu:8` eight of a type
the gres does not name; a socket or index suffix `(S:0-1)` is left aside.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_GPUS

MAX_NODES = 100_000
# State words of a node that cannot take jobs now (`scontrol`'s DOWN, DRAINED, ... joined by '+';
# sinfo's compact forms; a trailing '*' is a node not responding). POWERED_DOWN (a cloud node
# that resumes on demand) is not among them.
UNAVAILABLE = {"down", "drain", "drained", "draining", "drng", "fail", "failing", "fail*", "not_responding"}


@dataclass(frozen=True)
class SlurmNode:
    name: str
    gpu_type: str | None            # the gres type ('a100'), None where the gres names none
    gpus: int                       # 0: a node without GPUs
    gres: str                       # as printed
    features: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    state: str = ""

    @property
    def available(self) -> bool:
        words = {w for w in re.split(r"[+\s]", self.state.lower()) if w}
        return not (words & UNAVAILABLE or self.state.endswith("*"))


def parse_gres(text: str, where: str) -> tuple[str | None, int]:
    """(GPU type, count) of a gres string: `gpu:a100:8(S:0-1),shard:a100:32` -> ('a100', 8)."""
    text = text.strip()
    if text in ("", "(null)", "N/A"):
        return None, 0
    types: dict[str | None, int] = {}
    for entry in _split_outside(text, ",", "()"):
        parts = entry.split("(", 1)[0].strip().split(":")
        if parts[0] != "gpu":
            continue
        if len(parts) == 2 and parts[1].isdigit():
            kind, count = None, parts[1]
        elif len(parts) == 2:
            kind, count = parts[1], "1"
        elif len(parts) == 3 and parts[2].isdigit():
            kind, count = parts[1], parts[2]
        else:
            raise SpecError(where, text, "not a gres such as gpu:a100:8 (is the output cut short? give "
                                         "sinfo's format without widths: %G, not %20G)")
        number = int(count)
        if not 0 < number <= MAX_GPUS:
            raise SpecError(where, text, f"{number} GPUs in one node")
        types[kind] = types.get(kind, 0) + number
    if len(types) > 1:
        raise SpecError(where, text, f"GPUs of {len(types)} types in one node ({', '.join(map(str, types))}); "
                                     "a node group holds one GPU type")
    return next(iter(types.items()), (None, 0))


def _split_outside(text: str, separator: str, brackets: str) -> list[str]:
    """`text` split at `separator` where it is not inside `brackets` ('()' or '[]')."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == brackets[0]:
            depth += 1
        elif char == brackets[1]:
            depth = max(depth - 1, 0)
        elif char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part for part in parts if part.strip()]


def expand_hostlist(text: str, where: str) -> list[str]:
    """SLURM's hostlist: `gpu-[01-03,07],cpu1` -> gpu-01, gpu-02, gpu-03, gpu-07, cpu1."""
    names: list[str] = []
    for part in _split_outside(text.strip(), ",", "[]"):
        expanded = [""]
        for piece in re.split(r"(\[[^\]]*\])", part):
            if piece.startswith("["):
                choices = []
                for span in piece[1:-1].split(","):
                    match = re.fullmatch(r"(\d+)(?:-(\d+))?", span.strip())
                    if not match:
                        raise SpecError(where, text, f"not a hostlist range: [{piece[1:-1]}]")
                    low, high = match.group(1), match.group(2) or match.group(1)
                    if int(high) < int(low) or int(high) - int(low) > MAX_NODES:
                        raise SpecError(where, text, f"not a hostlist range: [{piece[1:-1]}]")
                    choices += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
                expanded = [head + tail for head in expanded for tail in choices]
            else:
                expanded = [head + piece for head in expanded]
            if len(expanded) + len(names) > MAX_NODES:
                raise SpecError(where, text, f"more than {MAX_NODES:,} nodes")
        names += expanded
    return names


def _features(text: str) -> tuple[str, ...]:
    text = text.strip()
    return () if text in ("", "(null)", "N/A") else tuple(f for f in text.split(",") if f)


def parse_scontrol(text: str, source: str) -> list[SlurmNode]:
    """Every node record of `scontrol show node` (multi-line or one-liner, -o)."""
    records = re.split(r"(?m)^\s*(?=NodeName=)", text)
    nodes = []
    for record in records:
        if not record.strip().startswith("NodeName="):
            continue                      # a preamble ("Node data as of ...") or blank space
        fields = _fields(record)
        name = fields.get("NodeName", "").strip()
        where = f"{source}: node {name or '?'}"
        if not name or " " in name:
            raise SpecError(f"{source}", record.strip()[:60], "a node record without a name")
        gres = fields.get("Gres", "")
        gpu_type, gpus = parse_gres(gres, f"{where} Gres")
        if gpus == 0:      # some sites configure GPUs as TRES only: CfgTRES=...,gres/gpu:a100=8
            tres = re.findall(r"gres/gpu(?::([^=,]+))?=(\d+)", fields.get("CfgTRES", ""))
            typed = [(kind, int(count)) for kind, count in tres if kind]
            if typed or tres:
                gpu_type, gpus = typed[0] if typed else (None, int(tres[0][1]))
        nodes.append(SlurmNode(name=name, gpu_type=gpu_type, gpus=gpus, gres=gres.strip(),
                               features=_features(fields.get("AvailableFeatures", fields.get("Features", ""))),
                               partitions=_features(fields.get("Partitions", "")),
                               state=fields.get("State", "").strip()))
        if len(nodes) > MAX_NODES:
            raise SpecError(source, f"{len(nodes):,} nodes", f"more than {MAX_NODES:,} nodes")
    if not nodes:
        raise SpecError(source, text.strip()[:60], "no NodeName= record: not `scontrol show node` output")
    return _unique(nodes, source)


# Fields whose value is free text to the end of its line (scontrol prints them after every field
# read here, in one-liner output too); other values run to the next `Key=`.
_FREE_TEXT = ("Reason", "Comment", "Extra")


def _fields(record: str) -> dict[str, str]:
    """Key=Value pairs of one record; a value runs to the next key (OS=Linux 5.15 #64-Ubuntu SMP ...)."""
    out: dict[str, str] = {}
    for line in record.splitlines():
        free = re.search(r"(?:^|\s)(" + "|".join(_FREE_TEXT) + r")=", line)
        head = line[:free.start(1)] if free else line
        keys = list(re.finditer(r"(?:^|(?<=\s))([A-Za-z_][A-Za-z0-9_]*)=", head))
        for key, following in zip(keys, keys[1:] + [None]):
            end = following.start() if following else len(head)
            out.setdefault(key.group(1), head[key.end():end].strip())
        if free:
            out.setdefault(free.group(1), line[free.end():].strip())
    return out


def parse_sinfo(text: str, source: str) -> list[SlurmNode]:
    """`sinfo [-N] -o "%N %P %G %f ..."` with its header: one node per row (or a hostlist per row)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines[:5]) if "GRES" in line.split()), None)
    if header_at is None:
        raise SpecError(source, lines[0][:60] if lines else "empty",
                        'no header naming GRES: give sinfo -N -o "%N %P %G %f" without -h/--noheader')
    header = lines[header_at].split()
    column = {name: i for i, name in enumerate(header)}
    names = column.get("NODELIST", column.get("HOSTNAMES"))
    if names is None:
        raise SpecError(source, " ".join(header)[:60], "no NODELIST column (%N)")
    features = column.get("AVAIL_FEATURES", column.get("ACTIVE_FEATURES"))
    found: dict[str, SlurmNode] = {}
    for number, line in enumerate(lines[header_at + 1:], start=header_at + 2):
        cells = line.split()
        if len(cells) != len(header):
            raise SpecError(f"{source}: line {number}", line.strip()[:60],
                            f"{len(cells)} values under {len(header)} columns (is the line cut short?)")
        gpu_type, gpus = parse_gres(cells[column["GRES"]], f"{source}: line {number} GRES")
        partition = cells[column["PARTITION"]].rstrip("*") if "PARTITION" in column else None
        for name in expand_hostlist(cells[names], f"{source}: line {number} {header[names]}"):
            node = found.get(name)
            partitions = (*(node.partitions if node else ()), *([partition] if partition else []))
            found[name] = SlurmNode(
                name=name, gpu_type=gpu_type, gpus=gpus, gres=cells[column["GRES"]],
                features=_features(cells[features]) if features is not None else (),
                partitions=tuple(dict.fromkeys(partitions)),
                state=cells[column["STATE"]] if "STATE" in column else "")
            if len(found) > MAX_NODES:
                raise SpecError(source, f"{len(found):,} nodes", f"more than {MAX_NODES:,} nodes")
    if not found:
        raise SpecError(source, " ".join(header)[:60], "a header and no node rows")
    return list(found.values())


def _unique(nodes: list[SlurmNode], source: str) -> list[SlurmNode]:
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise SpecError(source, node.name, "this node is listed twice")
        seen.add(node.name)
    return nodes
