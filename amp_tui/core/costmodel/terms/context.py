"""Context parallelism: ring attention's communication.

Each of the cp ranks of a context-parallel ring holds its c-th of the sequence's tokens. The keys
and values travel round the ring: in cp - 1 steps every rank passes on the chunk it holds and
receives the next, each step's send overlapped with the attention of the chunk in hand (Liu et al.,
Ring Attention; Transformer Engine's and torchtitan's point-to-point context parallelism). The
backward pass sends the keys and values and their gradients, twice the bytes, beside flash
attention's backward of the chunk (2.5 forwards: scores computed again). A step waits for what
its compute does not hide, so per layer and micro-batch

    forward   (cp - 1) max(0, kv spb + latency - a)           once more under full recomputation
    backward  (cp - 1) max(0, 2 kv spb + latency - 2.5 a)

with kv the bytes of one rank's key and value chunk (its tokens x 2 x the key-value width over tp,
at least one head; 16-bit under fp8 or fp4 training), a one step's forward attention (the rank's
attention core over cp steps) and spb, latency the ring's slowest link (placement.Nodes.block_links:
the cp ranks tp apart). Over NVLink with long sequences the sends are hidden; across nodes, or with
short chunks, they are not.
"""

from __future__ import annotations

import numpy as np

from amp_tui.core.costmodel.terms.compute import attention_forward_time, core_precision
from amp_tui.core.spec.hardware import GPU
from amp_tui.core.spec.model import Model
from amp_tui.core.spec.params import ModelParams

BACKWARD_WORK = 2.5     # flash attention's backward over its forward (compute.flash_backward_time)


def ring_steps(model: Model, gpu: GPU, precision: str, params: ModelParams, tp: int, cp: int, mbs,
               attention_kernel: str = "fused") -> tuple[np.ndarray, np.ndarray]:
    """Per layer, for a micro-batch of `mbs` on one rank: (bytes of the key and value chunk one
    ring step sends, seconds of one step's forward attention). Zeros for layers without an
    attention core, or without context parallelism."""
    attention = attention_forward_time(model, gpu, precision, params, tp, cp, mbs, attention_kernel)
    shape = model.shape
    if cp == 1 or not attention.any():
        zeros = np.zeros(model.num_layers) * mbs
        return zeros, zeros
    h, heads = shape["hidden_size"], shape["num_heads"]
    kv_width = max(h * shape.get("num_kv_heads", heads) // heads / tp, h / heads)
    element = 4 if core_precision(precision) in ("fp32", "tf32") else 2
    tokens = model.columns["tokens"] * mbs / cp
    kv = np.where(attention > 0, tokens * 2.0 * kv_width * element, 0.0)
    return kv, attention / cp


def exposed_ring_time(kv: np.ndarray, step: np.ndarray, cp: int, seconds_per_byte: float, latency: float,
                      forward_passes: float) -> np.ndarray:
    """Per layer: the seconds of ring attention's sends no attention step hides, forward
    (`forward_passes`: 2 under full recomputation) and backward, for `ring_steps`' figures over a
    ring link of `seconds_per_byte` and `latency`."""
    if cp == 1:
        return np.zeros_like(kv)
    send = np.where(kv > 0, kv * seconds_per_byte + latency, 0.0)
    forward = np.maximum(send - step, 0.0)
    backward = np.maximum(np.where(kv > 0, 2.0 * kv * seconds_per_byte + latency, 0.0) - BACKWARD_WORK * step, 0.0)
    return (cp - 1) * (forward_passes * forward + backward)
