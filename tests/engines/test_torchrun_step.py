"""One real training step on CPU, as the torchrun and rank-map exports lay it out: paper-het-cluster's
best plan (1 x 6 x 2, 12 ranks on three of its four nodes) run by launch.sh's own torchrun lines,
one per node, all on this machine with gloo (gloo_step.py is the training script).

The checks compare what each rank did with the plan itself (its partition, and the cost model's
rank order from build_layout), not with the files: every rank holds the layers of its stage, sits on
the node and GPU the plan placed it on, passes activations to the next stage of its replica, and
averages gradients with the other replica; the step finishes with a loss on every last-stage rank.
The same run on a rank map changed by hand fails those checks. Both rank maps go through one
torchrun start (gloo_step.py runs the step once per map, in the same processes): a start imports
torch in each of the 12 ranks and 3 agents, most of the test's time on 2 cores.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from amp_tui.core.costmodel.placement import build_layout
from amp_tui.core.plans.exports.common import stage_bounds
from tests.engines.conftest import need

CASE = "paper-het-cluster"
STEP = Path(__file__).with_name("gloo_step.py")
pytestmark = pytest.mark.xdist_group("torchrun-step")     # one worker, so one torchrun start for both tests


def run_step(launch: Path, rankmaps: list[Path], outs: list[Path], nodes: int) -> list[dict[int, dict]]:
    """Every node's launch line at once (node ranks 0 .. nodes-1 on this machine), the step run once
    per rank map; for each, rank -> report."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TRAIN_SCRIPT=str(STEP),
               AMP_RANKMAP=os.pathsep.join(map(str, rankmaps)), AMP_OUT=os.pathsep.join(map(str, outs)),
               OMP_NUM_THREADS="1",
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    starts = [subprocess.Popen(["bash", str(launch)], env={**env, "NODE_RANK": str(k)}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True) for k in range(nodes)]
    logs = [start.communicate(timeout=540)[0] for start in starts]
    assert all(start.returncode == 0 for start in starts), "\n".join(log[-2000:] for log in logs)
    return [{int(path.stem.split("-")[1]): json.loads(path.read_text()) for path in out.glob("rank-*.json")}
            for out in outs]


def check_step(plan, reports: dict[int, dict]) -> None:
    """What the ranks did against the plan: layers, placement, pipeline peers, data-parallel groups."""
    s = plan.strategy
    world = s.tp * s.pp * s.dp
    assert sorted(reports) == list(range(world))
    bounds = stage_bounds(plan)
    layout = build_layout(plan.scenario.cluster, s.tp, s.pp, s.dp, s.placement)
    for rank, report in reports.items():
        tp_rank, rest = rank % s.tp, rank // s.tp           # the cost model's order: tp, then dp, then stage
        replica, stage = rest % s.dp, rest // s.dp
        assert report["layers"] == list(range(bounds[stage], bounds[stage + 1])), (rank, report["layers"])
        assert (report["node"], report["local_gpu"]) == (int(layout.rank_node[rank]), int(layout.rank_local_gpu[rank]))
        peer = lambda k: None if not 0 <= k < s.pp else tp_rank + s.tp * (replica + s.dp * k)  # noqa: E731
        assert (report["before"], report["after"]) == (peer(stage - 1), peer(stage + 1)), rank
        assert report["dp_group"] == [tp_rank + s.tp * (r + s.dp * stage) for r in range(s.dp)]
        assert report["micro_batches"] == s.num_micro_batches(plan.scenario.training.global_batch_size)
        assert (report["loss"] is not None) == (stage == s.pp - 1)


@pytest.fixture(scope="module")
def het(plans, exported, tmp_path_factory):
    """The plan and the reports of one torchrun start: the step as the exports lay it out, then as a
    rank map changed by hand does (stage 0 hands its last layer to stage 1: the step runs, the layers
    still meet in order)."""
    need("torch.distributed.run")
    plan = plans(CASE)
    s = plan.strategy
    assert (s.tp, s.pp, s.dp) == (1, 6, 2) and s.idle      # pp > 1 and dp > 1, one node left idle
    launch, rankmap = exported(CASE, "torchrun") / "launch.sh", exported(CASE, "rankmap") / "rankmap.json"
    document = json.loads(rankmap.read_text())
    for row in document["ranks"]:
        if row["stage"] == 0:
            row["last_layer"] -= 1
        elif row["stage"] == 1:
            row["first_layer"] -= 1
    folder = tmp_path_factory.mktemp("step")
    changed = folder / "rankmap.json"
    changed.write_text(json.dumps(document))
    outs = [folder / "as-exported", folder / "changed"]
    for out in outs:
        out.mkdir()
    as_exported, by_hand = run_step(launch, [rankmap, changed], outs, len(document["nodes"]))
    return plan, as_exported, by_hand


def test_one_step_as_the_exports_lay_it_out(het):
    plan, as_exported, _ = het
    check_step(plan, as_exported)


def test_a_rank_map_changed_by_hand_fails(het):
    """Stage 0 hands its last layer to stage 1 in the rank map: the step runs, and the check against
    the plan's split fails."""
    plan, _, by_hand = het
    with pytest.raises(AssertionError, match=r"^\(0, \["):
        check_step(plan, by_hand)
