"""Rank map: for every global rank, where it runs and what it does (rankmap.csv, rankmap.json)."""

from __future__ import annotations

import csv
import io
import json

from amp_tui.core.plans.exports.common import Export, layout, nodes, rank_coordinates, stage_bounds, summary
from amp_tui.core.plans.planfile import Plan

COLUMNS = ("rank", "node", "hostname", "node_group", "instance", "gpu", "local_gpu", "stage", "dp_replica",
           "tp_rank", "first_layer", "last_layer", "first_layer_name", "last_layer_name")


def rank_rows(plan: Plan) -> list[dict]:
    """One mapping per global rank, in rank order, with the COLUMNS keys."""
    lay = layout(plan)
    groups = plan.scenario.cluster.nodes
    bounds = stage_bounds(plan)
    layers = plan.scenario.model.layers
    rows = []
    for rank in range(len(lay.rank_node)):
        node = int(lay.rank_node[rank])
        group = int(lay.node_group[node])
        stage, replica, tp_rank = rank_coordinates(plan, rank)
        first, last = bounds[stage], bounds[stage + 1] - 1
        rows.append({
            "rank": rank, "node": node, "hostname": f"node-{node}", "node_group": group,
            "instance": groups[group].instance or "", "gpu": groups[group].gpu.name,
            "local_gpu": int(lay.rank_local_gpu[rank]), "stage": stage, "dp_replica": replica, "tp_rank": tp_rank,
            "first_layer": first, "last_layer": last,
            "first_layer_name": layers[first].name, "last_layer_name": layers[last].name,
        })
    return rows


def export(plan: Plan) -> Export:
    rows = rank_rows(plan)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    s = plan.strategy
    document = {
        "plan": summary(plan),
        "scenario": plan.scenario.name,
        "world_size": len(rows), "tp": s.tp, "pp": s.pp, "dp": s.dp,
        "placement": list(s.placement),
        "rank_formula": "rank = tp_rank + tp * (dp_replica + dp * stage)",
        "stages": [{"stage": k, "first_layer": b, "last_layer": e - 1}
                   for k, (b, e) in enumerate(zip(stage_bounds(plan), stage_bounds(plan)[1:]))],
        "nodes": [{"node": n.index, "hostname": n.hostname, "node_group": n.group, "label": n.label,
                   "gpu": n.gpu, "gpus": n.gpus, "first_rank": n.first_rank, "stages": list(n.stages)}
                  for n in nodes(plan)],
        "ranks": rows,
    }
    notes = [
        f"{len(rows)} ranks on {len(document['nodes'])} nodes; global rank = tp_rank + {s.tp} x "
        f"(dp_replica + {s.dp} x stage), handed out node by node in the plan's placement order.",
        "Layer numbers index the model's expanded layer list (the plan's partition counts these layers).",
        "Hostnames node-0, node-1, ... are placeholders: node-k is the k-th node to take ranks "
        "(the node whose launcher gets node rank k).",
    ]
    return Export(files={"rankmap.csv": text.getvalue(), "rankmap.json": json.dumps(document, indent=2) + "\n"},
                  notes=notes)
