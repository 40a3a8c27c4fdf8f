"""Write a placement where engines can run it.

- `layout.ini`: a Helix-style layout ([Solution] compute_node_<i + 2> = [layers], machines in the
  cluster's order, group by group) with `machines.txt` naming each index;
- `routes.json`: the routes and their shares, for a weighted round-robin front end;
- `vllm/pipeline-<n>.sh`, when the placement is disjoint pipelines (each machine in one chain that
  covers the model once): one vLLM instance per pipeline, pipeline parallel with an uneven split
  (VLLM_PP_LAYER_PARTITION, read by vllm/distributed/utils.py get_pp_indices: comma-separated layer
  counts, one per pipeline rank, summing to the model's layers). vLLM's tensor-parallel size is the
  same on every stage, so a pipeline mixing machines of different GPU counts runs one rank per GPU.
  Ray ranks the workers after the driver by GPUs per node, then by address
  (sort_by_driver_then_worker_ip), so the script lists the hosts in that order.
Everything a script takes from the scenario is quoted.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from amp_tui.core.base.atomic import write_files
from amp_tui.core.base.errors import SpecError


def pipelines_of(placement, num_layers: int) -> list[list[int]] | None:
    """Machine chains, each covering layers 0..num_layers once, or None if machines share layers."""
    used = [m for m, k in enumerate(placement.count) if k]
    starts: dict[int, list[int]] = {}
    for m in used:
        starts.setdefault(placement.first[m], []).append(m)
    chains = []
    for m in starts.get(0, []):
        chain, end = [m], placement.first[m] + placement.count[m]
        while end < num_layers:
            nxt = [j for j in starts.get(end, []) if all(j not in c for c in chains) and j not in chain]
            if not nxt:
                return None
            chain.append(nxt[0])
            end += placement.count[nxt[0]]
        chains.append(chain)
    if sorted(m for c in chains for m in c) != sorted(used):
        return None
    return chains


def _vllm_script(result, chain: list[int], index: int) -> str:
    sc, net = result.scenario, result.net
    groups = [sc.groups[int(net.machine_group[m])] for m in chain]
    gpus = {g.gpus_per_node for g in groups}
    tp = gpus.pop() if len(gpus) == 1 else 1
    ranks = []        # (host label, layers) per pipeline rank
    for m, g in zip(chain, groups):
        per = 1 if tp > 1 else g.gpus_per_node
        k = result.placement.count[m]
        base, extra = divmod(k, per)
        ranks += [(result.machine_label(m), base + (1 if r < extra else 0)) for r in range(per)]
    partition = ",".join(str(k) for _, k in ranks)
    hosts = "\n".join(f"#   rank {r}: {label} ({k} layers)" for r, (label, k) in enumerate(ranks))
    return f"""#!/usr/bin/env bash
# amp-tui serving plan for {sc.name}: pipeline {index + 1}, {len(chain)} machines, {len(ranks)} pipeline ranks.
# Ranks in vLLM's order (driver first, then by GPUs per node, then by address: give the hosts addresses in
# this order):
{hosts}
# On the first host: ray start --head --port=6379; on every other: ray start --address=HEAD:6379
set -euo pipefail
export VLLM_PP_LAYER_PARTITION={shlex.quote(partition)}
vllm serve {shlex.quote(sc.model.name)} --pipeline-parallel-size {len(ranks)} --tensor-parallel-size {tp} \\
    --distributed-executor-backend ray "$@"
"""


def export_placement(folder: str | Path, result) -> list[Path]:
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise SpecError("--export", folder, "is a file; give a folder")
    folder.mkdir(parents=True, exist_ok=True)
    placement, net = result.placement, result.net
    files: dict[str, str] = {}
    lines = ["[Settings]", "offset=2", "", "[Solution]"]
    names = []
    for m in range(net.num_machines):
        k, a = placement.count[m], placement.first[m]
        lines.append(f"compute_node_{m + 2}={list(range(a, a + k))}")
        names.append(f"compute_node_{m + 2}\t{result.machine_label(m)}")
    files["layout.ini"] = "\n".join(lines) + "\n"
    files["machines.txt"] = "\n".join(names) + "\n"
    files["routes.json"] = json.dumps([route.to_dict(net) for route in result.routes], indent=1) + "\n"
    written = write_files(folder, files, field="--export")
    chains = pipelines_of(placement, net.num_layers)
    if chains:
        (folder / "vllm").mkdir(exist_ok=True)
        written += write_files(folder / "vllm", {f"pipeline-{i + 1}.sh": _vllm_script(result, chain, i)
                                                 for i, chain in enumerate(chains)}, field="--export")
    return written
