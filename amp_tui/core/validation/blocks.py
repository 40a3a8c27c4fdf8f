"""One transformer block measured on an H200 (amp_tui/data/h200_measurements.yaml) as fit targets.

Each row is a block at tensor-parallel shard shapes (heads, kv heads and FFN width over tp; no
all-reduces), eager PyTorch under bf16 autocast, forward + backward of one micro-batch. The cost
model's prediction for it is the block's layer time at that tp and micro-batch size on an H200,
without the tensor-parallel collectives: the longer of its GPU time and the host's time to issue
it (terms/host.py), under the plain-torch eager profile (`fsdp`: torchtitan's kind of model code).

They join the published runs in `validate --fit` as one more source (`h200-blocks`): the large
shapes inform the H200's efficiency, the small ones the matrix-multiply shape term. The rows whose
GPU time is far below their measurement set the eager host floor (`floor_from_measurements`): the
profiles in spec/frameworks.py are checked against it, not fitted.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_RUNS_FILE_BYTES
from amp_tui.core.base.yamlio import read_text_file
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.terms import host as host_terms
from amp_tui.core.spec.params import Calibration
from amp_tui.core.spec.scenario import Scenario, parse_scenario

MEASUREMENTS_FILE = Path(__file__).resolve().parent.parent.parent / "data" / "h200_measurements.yaml"
SOURCE = "h200-blocks"
PROFILE = "fsdp"        # plain-torch eager blocks: the execution profile these were measured under
# A row is floor-bound when the FLOPs at the H200's best large-shape rate (h200_measurements.yaml:
# ~580 TFLOP/s forward + backward) would take under a third of its measured time.
_LARGE_SHAPE_FLOPS = 580e12
_FLOOR_SHARE = 1 / 3


@dataclass(frozen=True)
class BlockCase:
    id: str
    scenario: Scenario          # one block of the row's full shape on one H200
    tp: int
    micro_batch: int
    forward_s: float
    forward_backward_s: float
    flops: float                # forward + backward FLOPs of the shard

    source: str = SOURCE

    def predict_s(self, calibration: Calibration | None = None, cost: CostModel | None = None) -> float:
        """The block's forward + backward seconds under the cost model (the longer of GPU and host),
        with `calibration`, or under `cost` (a cost model of this scenario)."""
        if cost is None:
            cost = CostModel(self.scenario if calibration is None else _with(self.scenario, calibration))
        scenario = cost.scenario
        block = [layer.kind for layer in scenario.model.layers].index("block")
        compute, _ = cost.layer_times(0, self.tp, self.micro_batch)
        host = host_terms.host_issue_time(scenario.model, scenario.params, PROFILE, 1.0, 0.0)
        return float(max(compute[block], host[block]))


def _with(scenario: Scenario, calibration: Calibration) -> Scenario:
    from dataclasses import replace

    return replace(scenario, calibration=calibration)


@cache
def load_blocks(path: Path = MEASUREMENTS_FILE) -> tuple[BlockCase, ...]:
    import yaml

    data = yaml.safe_load(read_text_file(Path(path), "H200 measurements", MAX_RUNS_FILE_BYTES))
    if not isinstance(data, dict) or not isinstance(data.get("blocks"), list):
        raise SpecError("H200 measurements", Path(path), "expected a mapping with a `blocks` list")
    scenarios: dict[tuple, Scenario] = {}
    out = []
    for row in data["blocks"]:
        key = (row["family"], row["hidden"], row["heads"], row["kv_heads"], row["ffn"], row["seq"])
        if key not in scenarios:
            scenarios[key] = _block_scenario(*key)
        h, f, s, a = row["hidden"], row["ffn"], row["seq"], row["heads"]
        hkv = h * row["kv_heads"] // a
        tokens = s * row["micro_batch"]
        matmul = 2 * h * h + 2 * h * hkv + (3 if row["family"] == "llama" else 2) * h * f
        flops = 3 * (2 * tokens * matmul + 4 * s * s * h * row["micro_batch"]) / row["tp"]
        out.append(BlockCase(id=f"{row['shape']}-tp{row['tp']}-mbs{row['micro_batch']}", scenario=scenarios[key],
                             tp=int(row["tp"]), micro_batch=int(row["micro_batch"]),
                             forward_s=float(row["forward_s"]), forward_backward_s=float(row["forward_backward_s"]),
                             flops=float(flops)))
    return tuple(out)


def _block_scenario(family: str, hidden: int, heads: int, kv_heads: int, ffn: int, seq: int) -> Scenario:
    model = {"family": family, "name": f"{family} h{hidden} block", "hidden_size": hidden, "num_layers": 1,
             "num_heads": heads, "num_kv_heads": kv_heads, "ffn_hidden_size": ffn, "sequence_length": seq,
             "vocab_size": 32000, "flash_attention": True}
    if family != "llama":
        model.pop("num_kv_heads")
    return parse_scenario({
        "name": f"one {family} block on an H200",
        "cluster": {"nodes": [{"count": 1, "gpu": "H200", "gpus_per_node": 8, "intra_node_bandwidth": "450 GB/s",
                               "inter_node_bandwidth": "400 Gbps"}]},
        "model": model,
        "training": {"global_batch_size": 8, "precision": "bf16", "framework": PROFILE},
    })


def floor_bound(block: BlockCase) -> bool:
    """Whether the row's FLOPs at the H200's large-shape rate take under a third of its time."""
    return block.flops / _LARGE_SHAPE_FLOPS < _FLOOR_SHARE * block.forward_backward_s


def floor_from_measurements(blocks: tuple[BlockCase, ...] | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of the eager host floor per block: the medians over the
    floor-bound rows of their forward and of their forward + backward less forward."""
    rows = [b for b in (blocks or load_blocks()) if floor_bound(b)]
    forward = statistics.median(b.forward_s for b in rows)
    return forward, statistics.median(b.forward_backward_s for b in rows) - forward
