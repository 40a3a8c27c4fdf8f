"""Rank map: for every global rank, where it runs and what it does (rankmap.csv, rankmap.json).

It also carries what no stock engine runs (runnable.py): per-stage tensor- and data-parallel degrees
(each rank's stage, replica and tensor rank under its stage's own degrees) and uneven batch shares
(each rank's `batch_share`: the samples its replica trains on per iteration), for a training script
of your own to read."""

from __future__ import annotations

import csv
import io
import json

from amp_tui.core.plans.exports.common import (
    Export,
    nodes,
    num_micro_batches,
    rank_coordinates,
    ranks_on_nodes,
    stage_bounds,
    summary,
)
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.plans.runnable import custom_note, uneven_shares

COLUMNS = ("rank", "node", "hostname", "node_group", "instance", "gpu", "local_gpu", "stage", "dp_replica",
           "tp_rank", "first_layer", "last_layer", "first_layer_name", "last_layer_name", "batch_share")


def rank_rows(plan: Plan) -> list[dict]:
    """One mapping per global rank, in rank order, with the COLUMNS keys."""
    on = ranks_on_nodes(plan)
    groups = plan.scenario.cluster.nodes
    bounds = stage_bounds(plan)
    layers = plan.scenario.model.layers
    s = plan.strategy
    rows = []
    for rank in range(len(on.rank_node)):
        node = int(on.rank_node[rank])
        group = int(on.node_group[node])
        stage, replica, tp_rank = rank_coordinates(plan, rank)
        if s.batch_shares:
            share = s.batch_shares[replica]
        else:       # the pipeline's micro-batch split evenly over the stage's own replicas
            share = plan.scenario.training.global_batch_size // s.dps[stage]
        first, last = bounds[stage], bounds[stage + 1] - 1
        rows.append({
            "rank": rank, "node": node, "hostname": f"node-{node}", "node_group": group,
            "instance": groups[group].instance or "", "gpu": groups[group].gpu.name,
            "local_gpu": int(on.rank_local_gpu[rank]), "stage": stage, "dp_replica": replica, "tp_rank": tp_rank,
            "first_layer": first, "last_layer": last,
            "first_layer_name": layers[first].name, "last_layer_name": layers[last].name,
            "batch_share": share,
        })
    return rows


def export(plan: Plan) -> Export:
    rows = rank_rows(plan)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    s = plan.strategy
    per_stage = s.per_stage
    document = {
        "plan": summary(plan),
        "scenario": plan.scenario.name,
        "world_size": len(rows), "tp": list(s.tps) if per_stage else s.tp, "pp": s.pp,
        "dp": list(s.dps) if per_stage else s.dp,
        "placement": list(s.placement),
        "rank_formula": ("rank = first rank of the stage + tp_rank + tp of the stage * dp_replica" if per_stage
                         else "rank = tp_rank + tp * (dp_replica + dp * stage)"),
        "num_micro_batches": num_micro_batches(plan), "micro_batch_size": s.micro_batch_size,
        "batch_shares": list(s.batch_shares) if s.batch_shares else None,
        "stages": [{"stage": k, "first_layer": b, "last_layer": e - 1, "tp": s.tps[k], "dp": s.dps[k]}
                   for k, (b, e) in enumerate(zip(stage_bounds(plan), stage_bounds(plan)[1:]))],
        "nodes": [{"node": n.index, "hostname": n.hostname, "node_group": n.group, "label": n.label,
                   "gpu": n.gpu, "gpus": n.gpus, "first_rank": n.first_rank, "stages": list(n.stages)}
                  for n in nodes(plan)],
        "ranks": rows,
    }
    if per_stage:
        order = (f"stage s holds the next tp_s x dp_s ranks (tp {'/'.join(map(str, s.tps))}, dp "
                 f"{'/'.join(map(str, s.dps))}), replica by replica")
    else:
        order = f"global rank = tp_rank + {s.tp} x (dp_replica + {s.dp} x stage)"
    notes = [
        f"{len(rows)} ranks on {len(document['nodes'])} nodes; {order}, handed out node by node in the plan's "
        "placement order.",
        "Layer numbers index the model's expanded layer list (the plan's partition counts these layers).",
        "Hostnames node-0, node-1, ... are placeholders: node-k is the k-th node to take ranks "
        "(the node whose launcher gets node rank k).",
    ]
    if uneven_shares(s):
        notes.append("batch_share is the samples each replica trains on per iteration (uneven: faster GPUs take "
                     "more); your training script has to split the global batch so.")
    custom = custom_note(s)
    if custom:
        notes.insert(0, custom + ".")
    return Export(files={"rankmap.csv": text.getvalue(), "rankmap.json": json.dumps(document, indent=2) + "\n"},
                  notes=notes)
