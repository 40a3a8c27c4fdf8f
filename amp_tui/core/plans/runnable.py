"""Which engines run a strategy as planned.

Stock Megatron-LM, DeepSpeed's pipeline engine and torchtitan give every data-parallel replica the
same share of the batch and every pipeline stage the same tensor- and data-parallel degrees. Plans
with uneven batch shares or per-stage degrees (found by plan's post-pass, core/search/uneven.py)
are ranked with the rest, because they are faster, but only the torchrun and rank-map exports
carry them: the training script has to give each replica its share and build each stage's groups.
"""

from __future__ import annotations

from amp_tui.core.spec.strategy import Strategy

STOCK_ENGINES = "Megatron-LM, DeepSpeed and torchtitan"
CUSTOM_FORMATS = ("torchrun", "rankmap")     # the exports that carry what no stock engine runs


def uneven_shares(strategy: Strategy) -> bool:
    return bool(strategy.batch_shares) and len(set(strategy.batch_shares)) > 1


def custom_only(strategy: Strategy) -> str | None:
    """What in `strategy` no stock engine runs ('uneven batch shares', 'per-stage tp/dp'), or None."""
    what = [name for name, present in (("per-stage tp/dp", strategy.per_stage),
                                       ("uneven batch shares", uneven_shares(strategy))) if present]
    return " and ".join(what) or None


def custom_note(strategy: Strategy) -> str | None:
    """One sentence for a strategy no stock engine runs; None for one they do."""
    what = custom_only(strategy)
    if what is None:
        return None
    return (f"{strategy.label} micro-batch {strategy.micro_batch_size} has {what}: {STOCK_ENGINES} do not run "
            f"that; only the torchrun and rankmap exports carry it, for a training script of your own")


def best_stock(predictions) -> tuple[int, object] | None:
    """(rank from 1, prediction) of the best-ranked strategy a stock engine runs, or None."""
    return next(((i + 1, p) for i, p in enumerate(predictions) if custom_only(p.strategy) is None), None)
