"""torchrun launch lines, one per node, with node ranks in the order the plan's placement needs.

torchrun's static rendezvous (`--rdzv-backend static`, its default) gives node rank k to the
launcher started with `--node-rank k` and hands out global ranks node by node in that order, each
node taking as many ranks as its `--nproc-per-node`. The dynamic `c10d` backend ignores
`--node-rank` and orders nodes by host name, which could put the plan's stages on the wrong GPUs,
so the lines use the static backend.
"""

from __future__ import annotations

from amp_tui.core.plans.exports.common import Export, nodes, summary
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.plans.runnable import custom_note

MASTER_PORT = 29500


def launch_command(plan: Plan, node_rank: int, nproc_per_node: int, num_nodes: int,
                   script: str = '"$TRAIN_SCRIPT"') -> str:
    """The torchrun command for one node (shell text: `script` is inserted as written)."""
    return (f"torchrun --nnodes {num_nodes} --nproc-per-node {nproc_per_node} --node-rank {node_rank} "
            f'--rdzv-backend static --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" {script} "$@"')


def export(plan: Plan) -> Export:
    slots = nodes(plan)
    count = len(slots)
    lines = [
        "#!/usr/bin/env bash",
        f"# {summary(plan)}",
        f"# torchrun on {count} node{'s' if count > 1 else ''}: run this script on every node with NODE_RANK set to",
        "# that node's rank below and MASTER_ADDR set to the address of node rank 0; arguments after the",
        "# script name go to the training script (TRAIN_SCRIPT, default train.py).",
        "# Node ranks follow the plan's placement: node rank k must be a node of the kind named on its line,",
        "# because global ranks (and so pipeline stages) are handed out node by node in this order.",
        "set -euo pipefail",
        ': "${MASTER_ADDR:?set MASTER_ADDR to the address of node rank 0}"',
        f': "${{NODE_RANK:?set NODE_RANK to the rank of this node, 0-{count - 1}}}"',
        f'MASTER_PORT="${{MASTER_PORT:-{MASTER_PORT}}}"',
        'TRAIN_SCRIPT="${TRAIN_SCRIPT:-train.py}"',
        "",
        'case "$NODE_RANK" in',
    ]
    for slot in slots:
        lines.append(f"  # {slot.describe()}")
        lines.append(f"  {slot.index}) exec {launch_command(plan, slot.index, slot.gpus, count)} ;;")
    lines += [
        f'  *) echo "NODE_RANK must be 0-{count - 1}, got $NODE_RANK" >&2; exit 2 ;;',
        "esac",
        "",
    ]
    per_node = sorted({slot.gpus for slot in slots})
    notes = [
        f"launch.sh has one torchrun line per node ({count} nodes); start it on each node with NODE_RANK and "
        "MASTER_ADDR set (MASTER_ADDR = the address of node rank 0).",
        "Node rank k must run on the kind of node named in its comment: the plan's stages depend on the order "
        "in which nodes take global ranks.",
        "The lines use torchrun's static rendezvous because the c10d backend ignores --node-rank and would order "
        "nodes by host name.",
    ]
    if len(per_node) > 1:
        notes.append(f"Nodes run different numbers of processes ({', '.join(map(str, per_node))}); torchrun "
                     "hands out global ranks by node rank, each node taking its own --nproc-per-node.")
    notes.append("The training script reads RANK, LOCAL_RANK and WORLD_SIZE from the environment torchrun sets; "
                 "for example: NODE_RANK=0 MASTER_ADDR=<node 0's address> bash launch.sh --your-args")
    custom = custom_note(plan.strategy)
    if custom:
        notes.insert(0, custom + ": the rankmap export lists each rank's stage, replica and batch share.")
    return Export(files={"launch.sh": "\n".join(lines)}, notes=notes)
