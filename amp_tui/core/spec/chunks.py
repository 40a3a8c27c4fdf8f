"""Interleaved pipelines (Megatron's interleaved 1F1B): the model is cut into pp x v chunks in model
order, and chunk i runs on pipeline rank i mod pp, as its (i // pp)-th virtual stage (Megatron-Core's
pipeline_model_parallel_layout numbers them so: layout[a * pp + b] is virtual stage a of rank b).

The cost model and the partition search price a rank by the layers it holds, as one run of layers
per rank (`Strategy.partition`, pp entries): its compute, memory and sends per micro-batch, the fill
and drain divided by v. The chunk partition a plan runs splits each rank's layer count evenly over
its v chunks (`interleaved_chunks`). Both hold the same number of layers per rank; the prediction is
exact for the chunk partition when a rank's chunks hold the same kinds of layers as its run does
(identical transformer blocks, the embedding in the first chunk and the head in the last), and an
approximation otherwise. A strategy may give its partition as pp x v chunks; it is read as the
layers each rank holds (`rank_partition`).
"""

from __future__ import annotations


def interleaved_chunks(partition: tuple[int, ...], v: int) -> tuple[int, ...]:
    """Layers per chunk in model order for `partition` (layers per rank): rank s's count split into
    v parts, larger parts first, part a becoming chunk a * pp + s."""
    pp = len(partition)
    chunks = [0] * (pp * v)
    for s, count in enumerate(partition):
        base, extra = divmod(count, v)
        for a in range(v):
            chunks[a * pp + s] = base + (1 if a < extra else 0)
    return tuple(chunks)


def rank_partition(chunks: tuple[int, ...], pp: int) -> tuple[int, ...]:
    """Layers per rank of a chunk partition (pp x v entries in model order)."""
    return tuple(sum(chunks[s::pp]) for s in range(pp))
