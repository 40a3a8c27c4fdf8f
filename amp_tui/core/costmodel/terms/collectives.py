"""Small-message collectives: NCCL's per-call latency by protocol (NVIDIA/nccl src/graph/tuning.cc).

Tensor parallelism all-reduces a few MB per layer per micro-batch. NCCL sends such messages with
its low-latency protocols and picks, per call, the protocol its tuning model predicts fastest.
For a ring all-reduce over n ranks (2 (n - 1) steps):

  time(p) = base(p) + 2 (n - 1) x hop(p) + bytes x 2 (n - 1) / n / (bus bandwidth x share(p))
  time    = min over p of time(p),  p in LL, LL128, Simple

tuning.cc's defaults (ring algorithm):
  base latency      LL 6.6 us, LL128 14.0 us, Simple 8.4 us
  hop latency       NVLink LL 0.6, LL128 1.9, Simple 3.4 us; PCIe 1.0, 2.5, 5.7 us;
                    network 2.7, 4.0, 14 us
  bandwidth share   LL 0.5 of the bus bandwidth, at most llMaxBws (39 / 87.7 / 141 GB/s on Volta /
                    Ampere / Hopper nodes: Ampere's here); LL128 0.92; Simple 1

The base latency is params `collective_base_s` (Simple's, 8.4 us), LL's and LL128's in NCCL's
ratios to it. The hop latency of the link a ring runs over is the link class's own (params
`link_latency_s`, Simple's); LL and LL128 hops take NCCL's ratio to Simple's, the same on every
class to within a few percent (LL 0.18; LL128 0.29 to 0.56, 0.45 here). A calibrated latency so
carries over to the low-latency protocols. The latency part (base and hops) is what does not shrink with the
message: it is reported as its own term.
"""

from __future__ import annotations

import numpy as np

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_RATIO = {"LL": 6.6 / 8.4, "LL128": 14.0 / 8.4, "Simple": 1.0}     # of Simple's base latency
HOP_RATIO = {"LL": 0.18, "LL128": 0.45, "Simple": 1.0}     # of Simple's hop latency
BANDWIDTH_SHARE = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
LL_MAX_BUS_BYTES_PER_S = 87.7e9


def ring_allreduce_time(message_bytes: np.ndarray, ranks: int, seconds_per_byte: float,
                        hop_latency_s: float, base_latency_s: float = 8.4e-6) -> tuple[np.ndarray, np.ndarray]:
    """(latency, bandwidth) seconds of one ring all-reduce of `message_bytes` (per message, before
    the ring's 2 (n - 1) / n) over `ranks` ranks whose slowest link moves a byte in
    `seconds_per_byte` and whose hop and base latencies (Simple protocol) are `hop_latency_s`
    and `base_latency_s`, under the protocol NCCL would pick; zeros for one rank or an empty
    message."""
    message_bytes = np.asarray(message_bytes, dtype=np.float64)
    if ranks <= 1:
        zero = np.zeros_like(message_bytes)
        return zero, zero
    steps = 2.0 * (ranks - 1)
    wire = message_bytes * (steps / ranks)
    best = None
    for p in PROTOCOLS:
        latency = BASE_RATIO[p] * base_latency_s + steps * HOP_RATIO[p] * hop_latency_s
        bus = BANDWIDTH_SHARE[p] / seconds_per_byte if seconds_per_byte > 0 else np.inf
        if p == "LL":
            bus = min(bus, LL_MAX_BUS_BYTES_PER_S)
        bandwidth = wire / bus
        if best is None:
            best = (np.full_like(wire, latency), bandwidth)
            continue
        faster = latency + bandwidth < best[0] + best[1]
        best = (np.where(faster, latency, best[0]), np.where(faster, bandwidth, best[1]))
    empty = message_bytes <= 0
    return np.where(empty, 0.0, best[0]), np.where(empty, 0.0, best[1])


def tp_collective_time(tp_bytes: np.ndarray, messages: np.ndarray, tp: int, seconds_per_byte: float,
                       hop_latency_s: float, base_latency_s: float = 8.4e-6) -> tuple[np.ndarray, np.ndarray]:
    """Per layer per micro-batch: (latency, bandwidth) seconds of its tensor-parallel collectives.
    `tp_bytes` is each layer's ring traffic per micro-batch (every message's bytes times the
    ring's 2 (tp - 1) / tp, as LayerTimes.layer_times gives it) over `messages` calls."""
    calls = np.where(tp_bytes > 0, messages, 0.0)
    ring = 2.0 * (tp - 1) / tp if tp > 1 else 1.0
    per_message = np.where(calls > 0, tp_bytes / np.where(calls > 0, calls, 1.0) / ring, 0.0)
    latency, bandwidth = ring_allreduce_time(per_message, tp, seconds_per_byte, hop_latency_s, base_latency_s)
    return calls * latency, calls * bandwidth
