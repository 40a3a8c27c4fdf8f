"""The training techniques a strategy uses beyond its parallel degrees: recomputation, ZeRO stage,
sequence parallelism, context parallelism, interleaved pipeline stages, expert parallelism (MoE
models) and hybrid sharding (HSDP: ZeRO-3 over groups of data-parallel ranks).

The scenario's training section fixes each one or leaves it to the search (`auto`); a strategy
states them or inherits the training section's. `Knobs` is the resolved set the cost model uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from amp_tui.core.spec.model import Model
from amp_tui.core.spec.scenario import AUTO, FULL_SHARD, RECOMPUTE, Training
from amp_tui.core.spec.strategy import KNOB_FIELDS, Strategy


@dataclass(frozen=True)
class Knobs:
    recompute: str = "none"
    zero_stage: int = 0
    sequence_parallel: bool = False
    cp: int = 1
    virtual_stages: int = 1
    ep: int = 1          # expert parallelism: experts of each MoE layer over ep of the dp x cp ranks
    hsdp_shard: int = 0  # ZeRO-3 sharding group in data-parallel ranks; 0: all of them (plain FSDP)

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in KNOB_FIELDS}

    @property
    def forward_passes(self) -> float:
        """Forward passes per micro-batch: 2 under full recomputation (the forward runs again just
        before the backward), else 1. Every pass that communicates counts them."""
        return 2.0 if self.recompute == "full" else 1.0

    @property
    def short_label(self) -> str:
        """'full-recompute ZeRO-3 SP cp2 v2'; '-' for none of them."""
        parts = []
        if self.recompute != "none":
            parts.append(f"{self.recompute}-recompute")
        if self.zero_stage:
            parts.append(f"ZeRO-{self.zero_stage}")
        if self.sequence_parallel:
            parts.append("SP")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.virtual_stages > 1:
            parts.append(f"v{self.virtual_stages}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.hsdp_shard:
            parts.append(f"HSDP{self.hsdp_shard}")
        return " ".join(parts) or "-"


# Training field for each knob; values the search tries when the field is `auto`.
_TRAINING_FIELD = {"recompute": "recompute", "zero_stage": "zero_stage", "sequence_parallel": "sequence_parallel",
                   "cp": "context_parallel", "virtual_stages": "virtual_stages"}
# The two beyond KNOB_FIELDS: a strategy states them only where they differ from the default.
_EXTRA_FIELD = {"ep": "expert_parallel", "hsdp_shard": "data_parallel_shard"}
_AUTO_CHOICES = {"recompute": RECOMPUTE, "zero_stage": (0, 1, 3), "sequence_parallel": (False, True),
                 "cp": (1, 2, 4, 8), "virtual_stages": (1, 2, 4),
                 # sharding groups of 2 to 16 data-parallel ranks: a node or a few (0: every rank)
                 "hsdp_shard": (0, 2, 4, 8, 16)}
MAX_AUTO_EP = 64       # the search tries ep up to this (and up to the experts per layer)
_DEFAULT = Knobs()


def fixed_knobs(training: Training) -> dict[str, object]:
    """The knobs the user fixed in the training section (the rest are the search's to choose)."""
    fixed = {key: getattr(training, field) for key, field in _TRAINING_FIELD.items()
             if getattr(training, field) != AUTO}
    for key, field in _EXTRA_FIELD.items():
        value = getattr(training, field)
        if value != AUTO:
            fixed[key] = 0 if value == FULL_SHARD else value
    return fixed


def resolve(strategy: Strategy, training: Training) -> Knobs:
    """The strategy's knobs, the training section's where the strategy is silent, the defaults
    where the training section says `auto`."""
    fixed = fixed_knobs(training)
    values = {}
    for key in (*KNOB_FIELDS, *_EXTRA_FIELD):
        own = getattr(strategy, key)
        values[key] = own if own is not None else fixed.get(key, getattr(_DEFAULT, key))
    return Knobs(**values)


def describe(training: Training, model: Model | None = None) -> str:
    """Which techniques the user fixed and which the search chooses, for plan output. Expert
    parallelism is named for a mixture-of-experts model only, hybrid sharding when it is not
    the default (ZeRO over every data-parallel rank)."""
    fixed = fixed_knobs(training)
    moe = model is not None and _expert_counts(model)
    if not moe:
        fixed.pop("ep", None)
    if training.data_parallel_shard == FULL_SHARD:
        fixed.pop("hsdp_shard", None)
    given = ", ".join(f"{key} {_word(value)}" for key, value in fixed.items())
    searched = [key for key, field in _TRAINING_FIELD.items() if getattr(training, field) == AUTO]
    searched += [key for key, field in _EXTRA_FIELD.items()
                 if getattr(training, field) == AUTO and (key != "ep" or moe)]
    return f"fixed: {given or 'none'}; chosen by the search: {', '.join(searched) or 'none'}"


def _expert_counts(model: Model) -> list[int]:
    return sorted({int(layer.experts) for layer in model.groups if layer.experts})


def expert_choices(model: Model | None) -> tuple[int, ...]:
    """The ep degrees the search tries: divisors of every MoE layer's expert count, up to
    MAX_AUTO_EP; just 1 for a dense model."""
    counts = _expert_counts(model) if model is not None else []
    if not counts:
        return (1,)
    common = math.gcd(*counts)
    return tuple(d for d in range(1, min(common, MAX_AUTO_EP) + 1) if common % d == 0)


def _word(value: object) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def default_knobs(training: Training) -> Knobs:
    """The knobs of a strategy that states none: the training section's, defaults for `auto`."""
    return resolve(Strategy(1, 1, 1, 1), training)


def knob_choices(training: Training, model: Model | None = None) -> list[Knobs]:
    """Every combination the search tries: fixed knobs as given, `auto` ones over their choices
    (ep over `model`'s expert counts). Hybrid sharding goes with ZeRO-3 only."""
    fixed = fixed_knobs(training)
    choices = {**_AUTO_CHOICES, "ep": expert_choices(model)}
    axes = [(fixed[key],) if key in fixed else choices[key] for key in (*KNOB_FIELDS, *_EXTRA_FIELD)]
    return [Knobs(*combo) for combo in product(*axes) if not (combo[-1] and combo[1] != 3)]
