"""Tokens per second of one machine holding k consecutive layers: measured tables or an analytic model.

The analytic model, for a machine with memory M, memory bandwidth BW and peak FLOP/s P, holding k
layers of w weight bytes each, serving requests of p prompt and o output tokens on average:

- weights W = k w; the KV cache gets what is left of the usable memory: KV = M_usable - W;
- the batch B is the number of requests whose KV cache (k layers, p + o tokens each) fits in KV,
  capped at MAX_BATCH (servers cap it; Helix's profiles run batches of tens, not thousands);
- prefill is compute-bound: p tokens cost 2 k n p FLOPs (n parameters per layer) at
  COMPUTE_EFFICIENCY of peak;
- decode is memory-bound: each step reads the weights once and the KV cache of the batch (at its
  average length p + o/2), at MEMORY_EFFICIENCY of the bandwidth, or is compute-bound if that is slower;
- a cycle serves B requests: B prefills and o decode steps; tokens/s = B (p + o) / cycle time.

A machine may hold at most the layers whose weights fit in WEIGHT_FRACTION of its memory (Helix
keeps half for the KV cache). `compare_with_measured` checks the model against measured tables.
"""

from __future__ import annotations

import math

import numpy as np

from amp_tui.serving.spec import MachineGroup, Serving, ServingModel

WEIGHT_FRACTION = 0.5
COMPUTE_EFFICIENCY = 0.15   # of dense peak, for prefill and batched decode; fitted to Helix's LLaMA-2 70B tables
MEMORY_EFFICIENCY = 0.7
MAX_BATCH = 64


def max_layers(group: MachineGroup, model: ServingModel) -> int:
    """The most layers one machine of the group may hold (measured tables: their longest entry)."""
    if group.measured is not None:
        return len(group.measured)
    memory = group.gpu.usable_memory_bytes * group.gpus_per_node
    return min(model.num_layers, int(WEIGHT_FRACTION * memory // model.weight_bytes_per_layer))


def analytic_tokens_per_s(group: MachineGroup, model: ServingModel, serving: Serving, layers: int) -> float:
    """Tokens/s (prompt and decode together) of one machine of `group` holding `layers` layers."""
    gpus = group.gpus_per_node
    memory = group.gpu.usable_memory_bytes * gpus
    bandwidth = group.gpu.memory_bandwidth * gpus * MEMORY_EFFICIENCY
    flops = group.gpu.peak_flops(serving.precision) * gpus * COMPUTE_EFFICIENCY
    weights = layers * model.weight_bytes_per_layer
    p, o = serving.prompt_tokens, serving.output_tokens
    kv_per_request = layers * model.kv_bytes_per_token_layer * (p + o)
    batch = min(MAX_BATCH, math.floor((memory - weights) / kv_per_request)) if memory > weights else 0
    if batch < 1:
        return 0.0
    flops_per_token = 2 * model.params_per_layer * layers
    prefill_s = max(flops_per_token * p / flops, weights / bandwidth)
    kv_read = batch * layers * model.kv_bytes_per_token_layer * (p + o / 2)
    decode_step_s = max((weights + kv_read) / bandwidth, flops_per_token * batch / flops)
    return batch * (p + o) / (batch * prefill_s + o * decode_step_s)


def throughput_table(group: MachineGroup, model: ServingModel, serving: Serving) -> np.ndarray:
    """tokens/s indexed by layer count: entry 0 is 0 (idle), entries 1..max_layers as measured or modelled."""
    if group.measured is not None:
        most = min(len(group.measured), model.num_layers)
        return np.array([0.0, *group.measured[:most]])
    most = max_layers(group, model)
    return np.array([0.0] + [analytic_tokens_per_s(group, model, serving, k) for k in range(1, most + 1)])


def compare_with_measured(scenario) -> dict:
    """The analytic model against every measured table of a scenario's cluster: per (group, k) the
    ratio model / measured, their geometric mean and the share within 1.5x and 2x."""
    from dataclasses import replace

    model = scenario.serving_model
    ratios = []
    for group in scenario.groups:
        if group.measured is None:
            continue
        analytic = replace(group, measured=None)
        for k, measured in enumerate(group.measured[:model.num_layers], start=1):
            predicted = analytic_tokens_per_s(analytic, model, scenario.serving, k)
            ratios.append(predicted / measured if predicted > 0 else 0.0)
    ratios = np.array(ratios)
    logs = np.log(np.maximum(ratios, 1e-9))
    return {"entries": int(ratios.size), "geometric_mean_ratio": float(np.exp(logs.mean())) if ratios.size else 0.0,
            "within_1.5x": float(np.mean(np.abs(logs) <= math.log(1.5))) if ratios.size else 0.0,
            "within_2x": float(np.mean(np.abs(logs) <= math.log(2))) if ratios.size else 0.0}
