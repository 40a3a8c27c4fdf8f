"""Builders and hypothesis strategies shared by the core tests.

Scenarios are generated as plain dicts (the form a user writes) and parsed with `parse_scenario`, so a
test can change one field of the dict (a bandwidth, a GPU's peak) and parse again.
"""

from __future__ import annotations

import copy
import itertools
import math
import os

from hypothesis import strategies as st

from amp_tui.core.spec.frameworks import ENGINES, PROFILES
from amp_tui.core.spec.params import LINK_CLASSES
from amp_tui.core.spec.scenario import Scenario, parse_scenario

GBPS = 1e9 / 8  # bytes per second in one Gbps
GIB = 2**30

CATALOG_GPUS = ("T4", "V100", "A10G", "A100-40GB")


def examples(n: int) -> int:
    """Hypothesis example count: `n`, times AMP_HYPOTHESIS_SCALE for a longer hunt (default 1)."""
    return n * int(os.environ.get("AMP_HYPOTHESIS_SCALE", "1"))


def node(count=1, gpu="V100", gpus_per_node=1, intra=100.0, inter=10.0) -> dict:
    """A node group; bandwidths are bare numbers, i.e. Gbps."""
    return {"count": count, "gpu": gpu, "gpus_per_node": gpus_per_node,
            "intra_node_bandwidth": intra, "inter_node_bandwidth": inter}


def layer(params=0.0, flops=0.0, activation_bytes=0.0, output_bytes=0.0, **extra) -> dict:
    return {"params": params, "flops": flops, "activation_bytes": activation_bytes,
            "output_bytes": output_bytes, **extra}


# AMP's model with none of the terms its successors add: links at their label, no latency, no
# fixed costs, no allocator slack. Tests of the formula's structure by hand use it; the added
# terms have their own tests.
IDEAL = {"parameters": {
    **{f"link_efficiency.{c}": 1.0 for c in LINK_CLASSES},
    **{f"link_latency_s.{c}": 0.0 for c in LINK_CLASSES},
    **{f"link_flow_share.{c}": 1.0 for c in LINK_CLASSES},
    **{f"dp_overlap.{f}": 0.0 for f in ENGINES},
    # no fixed costs: no host issue time (terms/host.py), no collective base latency
    **{f"{family}.{key}": 0.0 for family in ("host_forward_s", "host_backward_s", "collective_host_s",
                                             "pipeline_engine_s") for key in PROFILES},
    "collective_base_s": 0.0, "layer_floor_s": 0.0, "micro_batch_overhead_s": 0.0, "iteration_overhead_s": 0.0,
    "memory_fragmentation": 0.0, "backward_ratio": 2.0,
}}


def scenario_dict(nodes: list[dict], layers: list[dict], global_batch_size: int, *,
                  sequence_length: int = 1, search: dict | None = None, calibration: dict | None = None,
                  **training) -> dict:
    out = {
        "name": "test",
        "cluster": {"nodes": nodes},
        "model": {"name": "test-model", "sequence_length": sequence_length, "layers": layers},
        "training": {"global_batch_size": global_batch_size, **training},
    }
    if search is not None:
        out["search"] = search
    if calibration is not None:
        out["calibration"] = calibration
    return out


def build(nodes, layers, global_batch_size, **kw) -> Scenario:
    return parse_scenario(scenario_dict(nodes, layers, global_batch_size, **kw))


def compositions(total: int, parts: int):
    """Every tuple of `parts` positive integers summing to `total` (all partitions into stages)."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def brute_force(candidate):
    """(best iteration time, its partition) over every partition that fits in memory, or (None, None)."""
    best_time, best_partition = None, None
    for partition in compositions(candidate.num_layers, candidate.pp):
        prediction = candidate.predict(partition)
        if prediction.fits_memory and (best_time is None or prediction.iteration_time_s < best_time):
            best_time, best_partition = prediction.iteration_time_s, partition
    return best_time, best_partition


def brute_force_over_knobs(scn) -> dict:
    """{(tp, pp, dp, mbs, order, knobs): best time} over every technique combination the search
    tries, every candidate and every partition that fits."""
    from amp_tui.core.costmodel.cost import CostModel
    from amp_tui.core.search.search import enumerate_candidates
    from amp_tui.core.spec.knobs import knob_choices

    best = {}
    for knobs in knob_choices(scn.training, scn.model):
        cost = CostModel(scn, knobs)
        for key in enumerate_candidates(scn, knobs=knobs):
            time, _ = brute_force(cost.candidate(*key))
            if time is not None:
                best[(*key, knobs)] = time
    return best


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


# -- hypothesis strategies ------------------------------------------------------------------------

_bandwidth_gbps = st.sampled_from([1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 170.0, 400.0, 2400.0])


@st.composite
def gpus(draw, binding_memory: bool = True):
    """A catalog GPU name or an inline mapping with `base:` and overrides (smaller memory binds)."""
    name = draw(st.sampled_from(CATALOG_GPUS))
    if not draw(st.booleans()):
        return name
    spec: dict = {"base": name, "fp16_tflops": draw(st.sampled_from([20.0, 65.0, 125.0, 312.0]))}
    if binding_memory and draw(st.booleans()):
        spec["memory"] = f"{draw(st.sampled_from([2, 3, 4, 6, 8]))} GiB"
    return spec


@st.composite
def node_groups(draw, max_gpus: int = 8, max_groups: int = 3, binding_memory: bool = True):
    """1 to `max_groups` node groups with at most `max_gpus` GPUs in all."""
    groups, remaining = [], max_gpus
    for i in range(draw(st.integers(1, max_groups))):
        if remaining < 1:
            break
        per_node = draw(st.sampled_from([n for n in (1, 2, 4) if n <= remaining]))
        count = draw(st.integers(1, max(1, min(2, remaining // per_node))))
        remaining -= per_node * count
        groups.append(node(count=count, gpu=draw(gpus(binding_memory)), gpus_per_node=per_node,
                           intra=draw(_bandwidth_gbps), inter=draw(_bandwidth_gbps)))
    return groups


@st.composite
def profiles(draw):
    """Measured forward seconds per sample for one or two catalog GPUs at some tp degrees."""
    names = draw(st.lists(st.sampled_from(CATALOG_GPUS), min_size=1, max_size=2, unique=True))
    out = {}
    for name in names:
        degrees = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3, unique=True))
        out[name] = {tp: float(draw(st.integers(1, 1000))) * 1e-5 for tp in degrees}
    return out


@st.composite
def explicit_layers(draw, min_layers: int = 2, max_layers: int = 8, heavy: bool = True,
                    measured: bool = False):
    """Uneven explicit layers with random sizes, every one with a width so FLOPs cost time; with
    `measured`, some layers carry measured times (profiles) that override the analytic estimate."""
    count = draw(st.integers(min_layers, max_layers))
    scale = 5e8 if heavy else 5e7
    out = []
    for i in range(count):
        activation = float(draw(st.integers(0, 2000))) * 1e6 * (scale / 5e8)
        entry = layer(
            params=float(draw(st.integers(0, 1000))) * scale / 1000,
            flops=float(draw(st.integers(1, 1000))) * 1e10,  # no layer is free
            activation_bytes=activation,
            output_bytes=float(draw(st.integers(1, 1000))) * 1e5,
            name=f"l{i}",
            width=float(draw(st.sampled_from([64, 512, 1024, 4096]))),
            tokens=float(draw(st.sampled_from([1, 128, 1024, 2048]))),
        )
        if draw(st.booleans()):
            entry["tp_comm_bytes"] = float(draw(st.integers(0, 1000))) * 1e5
        if draw(st.booleans()):
            entry["activation_replicated_bytes"] = activation * draw(st.sampled_from([0.0, 0.25, 1.0]))
        if draw(st.booleans()):
            entry["workspace_bytes"] = float(draw(st.integers(0, 1000))) * 1e6
        if measured and draw(st.booleans()):
            entry["profile"] = draw(profiles())
        out.append(entry)
    return out


@st.composite
def trainings(draw):
    return {
        "global_batch_size": draw(st.sampled_from([1, 2, 4, 6, 8, 12, 16])),
        "precision": draw(st.sampled_from(["fp16", "bf16", "fp32"])),
        "optimizer": draw(st.sampled_from(["adam", "sgd"])),
        "schedule": draw(st.sampled_from(["1f1b", "gpipe"])),
        "recompute": draw(st.sampled_from(["none", "full"])),
        "zero_stage": draw(st.sampled_from([0, 1, 2])),
        "runtime_reserve": draw(st.sampled_from(["256 MiB", "1 GiB", "2 GiB"])),
    }


@st.composite
def scenario_dicts(draw, max_layers: int = 8, max_gpus: int = 8, max_groups: int = 3,
                   binding_memory: bool = True, measured: bool = True):
    """A small random scenario as a dict (parse it with `parse_scenario`)."""
    nodes = draw(node_groups(max_gpus, max_groups, binding_memory))
    layers = draw(explicit_layers(max_layers=max_layers, heavy=binding_memory, measured=measured))
    training = draw(trainings())
    # Only precisions every drawn GPU supports (bf16 on a T4 is refused at parse time).
    supported = set.intersection(*(set(_gpu_precisions(node["gpu"])) for node in nodes))
    if training["precision"] not in supported:
        training["precision"] = draw(st.sampled_from(sorted(supported)))
    search = {"max_micro_batch_size": draw(st.sampled_from([64, 64, 2, 1])),
              "reorder_nodes": draw(st.booleans()),
              "allow_cross_node_tp": draw(st.booleans())}
    return {
        "name": "generated",
        "cluster": {"nodes": nodes},
        "model": {"name": "generated", "sequence_length": 1, "layers": layers},
        "training": training,
        "search": search,
    }


def with_change(data: dict, path: tuple, value) -> dict:
    """A deep copy of `data` with the item at `path` (keys and list indices) set to `value`."""
    out = copy.deepcopy(data)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def _gpu_precisions(gpu: object) -> list[str]:
    from amp_tui.core.spec.hardware import gpu_catalog

    if isinstance(gpu, str):
        return list(gpu_catalog()[gpu].precisions)
    if isinstance(gpu, dict) and "precisions" in gpu:
        return list(gpu["precisions"])
    if isinstance(gpu, dict) and isinstance(gpu.get("base"), str):
        return list(gpu_catalog()[gpu["base"]].precisions)
    return ["fp16", "bf16", "fp32"]


def adapter_scenario(heavy_params: float = 1e6) -> Scenario:
    """A toy model Megatron's GPT cannot name every layer of: an embedding, 4 blocks, an adapter
    layer, 4 more blocks, a head, on one node of 2 T4s. Megatron keeps the adapter with the block
    before it, so it runs [6, 5] for a plan's [5, 6]; `heavy_params` on the embedding and the adapter
    makes that stage run out of memory (6e8) while the plan's fits."""
    layer = {"params": 1e6, "flops": 1e9, "activation_bytes": 1e6, "output_bytes": 1e5}
    heavy = {**layer, "params": heavy_params}
    return parse_scenario({
        "name": "mid-layer",
        "cluster": {"nodes": [{"count": 1, "gpu": "T4", "gpus_per_node": 2, "intra_node_bandwidth": "50 Gbps",
                               "inter_node_bandwidth": "50 Gbps"}]},
        "model": {"name": "toy", "hidden_size": 64, "num_heads": 4, "sequence_length": 16, "layers": [
            {"name": "embed", "kind": "embedding", **heavy}, {"name": "block", "kind": "block", "repeat": 4, **layer},
            {"name": "adapter", "kind": "other", **heavy}, {"name": "block", "kind": "block", "repeat": 4, **layer},
            {"name": "head", "kind": "head", **layer}]},
        "training": {"global_batch_size": 8}})
