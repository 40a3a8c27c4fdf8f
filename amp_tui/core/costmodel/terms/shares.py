"""Uneven data-parallel shares (HetPipe, Whale, Cephalo): replicas on faster GPUs take more samples.

Replica r takes n_r micro-batches of the strategy's micro-batch size (its share is n_r x b samples,
the shares summing to the global batch). Each replica runs its own pipeline, so with M_r its
bottleneck stage's busy time per micro-batch and F_r its fill and drain (one micro-batch through
every stage and boundary), replica r finishes after

    P_r(n_r) = (n_r - 1) M_r + F_r

and the gradient all-reduce starts when the slowest replica is done:

    iteration = max_r P_r(n_r) + all-reduce and optimizer tail + the iteration's fixed cost.

`best_counts` chooses the n_r that minimise max_r P_r exactly: giving the next micro-batch to the
replica that would finish earliest with it is optimal for a max of increasing functions (each
step keeps the smallest possible maximum; exchange argument), and it starts from one micro-batch
per replica, since every replica must take part in the all-reduce.
"""

from __future__ import annotations

import heapq


def replica_time(n: int, bottleneck: float, fill: float) -> float:
    """P_r: (n - 1) micro-batches at the bottleneck's pace after one through the whole pipeline."""
    return (n - 1) * bottleneck + fill


def best_counts(total: int, bottleneck: list[float], fill: list[float]) -> tuple[int, ...]:
    """Micro-batches per replica, at least one each and `total` in all, minimising the slowest
    replica's time; ties go to the lower replica index."""
    replicas = len(bottleneck)
    if total < replicas:
        raise ValueError(f"{total} micro-batches cannot feed {replicas} replicas")
    counts = [1] * replicas
    heap = [(replica_time(2, bottleneck[r], fill[r]), r) for r in range(replicas)]
    heapq.heapify(heap)
    for _ in range(total - replicas):
        _, r = heapq.heappop(heap)
        counts[r] += 1
        heapq.heappush(heap, (replica_time(counts[r] + 1, bottleneck[r], fill[r]), r))
    return tuple(counts)


def proportional_counts(total: int, speed: list[float]) -> tuple[int, ...]:
    """Micro-batches proportional to each replica's throughput (largest remainders, at least one
    each): the first guess before `best_counts` refines it with fill and drain."""
    whole = sum(speed)
    raw = [max(total * s / whole, 1.0) for s in speed]
    counts = [max(int(x), 1) for x in raw]
    order = sorted(range(len(speed)), key=lambda r: counts[r] - raw[r])
    i = 0
    while sum(counts) < total:
        counts[order[i % len(order)]] += 1
        i += 1
    while sum(counts) > total:
        r = max(range(len(counts)), key=lambda k: counts[k] - raw[k])
        counts[r] -= 1
    return tuple(counts)


def slowest(counts: tuple[int, ...], bottleneck: list[float], fill: list[float]) -> tuple[int, float]:
    """(the replica that finishes last, its time)."""
    times = [replica_time(n, m, f) for n, m, f in zip(counts, bottleneck, fill)]
    r = max(range(len(times)), key=lambda k: (times[k], -k))
    return r, times[r]
