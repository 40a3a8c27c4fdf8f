"""Which layers of a model `amp-tui profile` times, and at what shapes (pure: no torch).

Each distinct layer group (name, parameters, FLOPs) is timed once; its repeated copies share the
times. A family model (gpt, llama, bert; mixture of experts where it has num_experts) gives its
embedding, block and head; AMP's explicit lists (the gpt2-medium preset) are read by kind and size:
an embedding, GPT blocks, a norm (2 h parameters), a projection to the vocabulary, a loss (no
parameters). A layer that computes nothing (AMP's no-ops) is not timed; nor is one with no plain
PyTorch form here: the cost model keeps its analytic time and the command says which.
"""

from __future__ import annotations

from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.model import Model

STACKED_BLOCKS = 4   # as ../shared/reference/h200_measurements.yaml times its blocks


@dataclass(frozen=True)
class LayerShape:
    """One layer group to time: how to build it, and what it takes as input."""

    index: int              # the group's index in model.groups
    name: str
    kind: str
    params: float
    flops: float
    repeat: int             # copies of it in the model (repeated blocks are timed as a stack)
    build: str              # block | embedding | head | projection | loss | norm
    takes: str              # ids | hidden | logits
    family: str             # gpt | llama
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    sequence: int
    experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    theta: float = 10000.0
    stack: int = STACKED_BLOCKS     # 1 on the CPU: it is the device, there is no host to run ahead

    def tp_supported(self, tp: int) -> bool:
        """Tensor parallelism splits whole heads (and the vocabulary rows): tp must divide them."""
        if self.build == "block":
            return self.heads % tp == 0
        return True

    @property
    def copies(self) -> int:
        """Copies timed together: a repeated block runs as a stack of up to STACKED_BLOCKS, so that
        its time is what one copy adds inside a model (one backward call, the host running ahead),
        not a lone layer's with the fixed cost of a whole backward pass."""
        return min(self.repeat, self.stack) if self.build == "block" else 1

    def work(self, tp: int, micro_batch: int) -> float:
        """Relative work of one measurement, for the progress bar's time estimate: its FLOPs and a
        fixed part (building the layer, launching its kernels, a weight gradient's memory), as
        FLOPs of a GPT-2 medium block (3e10)."""
        return (self.flops * micro_batch / tp) * (self.copies * (2.0 if self.build == "block" else 1.0)) + 3e10


def layer_shapes(model: Model, sequence: int, stack: int = STACKED_BLOCKS
                 ) -> tuple[list[LayerShape], list[tuple[str, str]]]:
    """(layers to time, [(layer, why it is not timed)]) at `sequence` tokens per sample, repeated
    blocks timed `stack` copies at a time."""
    shape = model.shape
    family = model.family if model.family in ("gpt", "llama") else "gpt"   # BERT's blocks are GPT's, unmasked
    hidden = int(shape.get("hidden_size") or 0)
    heads = int(shape.get("num_heads") or 0)
    vocab = int(shape.get("vocab_size") or 0)
    if not (hidden and heads and vocab):
        raise SpecError("model", model.name, "profiling needs hidden_size, num_heads and vocab_size "
                                             "(a family model, or a layer list that states them)")
    common = dict(family=family, hidden=hidden, heads=heads, kv_heads=int(shape.get("num_kv_heads") or heads),
                  ffn=int(shape.get("ffn_hidden_size") or 4 * hidden), vocab=vocab, sequence=sequence,
                  experts=int(shape.get("num_experts") or 0), top_k=int(shape.get("top_k") or 0),
                  expert_ffn=int(shape.get("expert_ffn_hidden_size") or shape.get("ffn_hidden_size") or 4 * hidden),
                  theta=float(shape.get("rope_theta") or 10000.0), stack=stack)
    working = [i for i, group in enumerate(model.groups) if group.flops > 0]
    last = working[-1] if working else -1
    shapes: list[LayerShape] = []
    skipped: list[tuple[str, str]] = []
    seen: set[tuple] = set()
    for index, group in enumerate(model.groups):
        identity = (group.name, group.params, group.flops)
        if identity in seen:
            continue
        seen.add(identity)
        if group.flops <= 0:
            skipped.append((group.name, "computes nothing"))
            continue
        build, takes = _form(group, index == last, hidden)
        if build is None:
            skipped.append((group.name, "no plain-PyTorch form here: its time stays analytic"))
            continue
        shapes.append(LayerShape(index=index, name=group.name, kind=group.kind, params=group.params,
                                 flops=group.flops, repeat=group.repeat, build=build, takes=takes, **common))
    return shapes, skipped


def _form(group, is_last: bool, hidden: int) -> tuple[str | None, str]:
    if group.kind == "embedding":
        return "embedding", "ids"
    if group.kind == "block":
        return "block", "hidden"
    if group.kind == "head":
        if group.params == 0:
            return "loss", "logits"
        return ("head" if is_last else "projection"), "hidden"
    if abs(group.params - 2 * hidden) <= 1 or group.params == hidden:
        return "norm", "hidden"
    return None, ""
