"""The training techniques a strategy uses beyond its parallel degrees: recomputation, ZeRO stage,
sequence parallelism, context parallelism and interleaved pipeline stages.

The scenario's training section fixes each one or leaves it to the search (`auto`); a strategy
states them or inherits the training section's. `Knobs` is the resolved set the cost model uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from amp_tui.core.scenario import AUTO, RECOMPUTE, Training
from amp_tui.core.strategy import KNOB_FIELDS, Strategy


@dataclass(frozen=True)
class Knobs:
    recompute: str = "none"
    zero_stage: int = 0
    sequence_parallel: bool = False
    cp: int = 1
    virtual_stages: int = 1
    ep: int = 1          # expert parallelism: the strategy's own (the search does not choose it)

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in KNOB_FIELDS}

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
        return " ".join(parts) or "-"


# Training field for each knob; values the search tries when the field is `auto`.
_TRAINING_FIELD = {"recompute": "recompute", "zero_stage": "zero_stage", "sequence_parallel": "sequence_parallel",
                   "cp": "context_parallel", "virtual_stages": "virtual_stages"}
_AUTO_CHOICES = {"recompute": RECOMPUTE, "zero_stage": (0, 1, 3), "sequence_parallel": (False, True),
                 "cp": (1, 2, 4, 8), "virtual_stages": (1, 2, 4)}
_DEFAULT = Knobs()


def fixed_knobs(training: Training) -> dict[str, object]:
    """The knobs the user fixed in the training section (the rest are the search's to choose)."""
    return {key: getattr(training, field) for key, field in _TRAINING_FIELD.items()
            if getattr(training, field) != AUTO}


def resolve(strategy: Strategy, training: Training) -> Knobs:
    """The strategy's knobs, the training section's where the strategy is silent, the defaults
    where the training section says `auto`."""
    fixed = fixed_knobs(training)
    values = {}
    for key in KNOB_FIELDS:
        own = getattr(strategy, key)
        values[key] = own if own is not None else fixed.get(key, getattr(_DEFAULT, key))
    return Knobs(**values, ep=strategy.ep or 1)


def describe(training: Training) -> str:
    """Which techniques the user fixed and which the search chooses, for plan output."""
    fixed = fixed_knobs(training)
    names = {field: key for key, field in _TRAINING_FIELD.items()}
    given = ", ".join(f"{key} {_word(value)}" for key, value in fixed.items())
    searched = ", ".join(names[f] for f in _TRAINING_FIELD.values() if getattr(training, f) == AUTO)
    return f"fixed: {given or 'none'}; chosen by the search: {searched or 'none'}"


def _word(value: object) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def default_knobs(training: Training) -> Knobs:
    """The knobs of a strategy that states none: the training section's, defaults for `auto`."""
    return resolve(Strategy(1, 1, 1, 1), training)


def knob_choices(training: Training) -> list[Knobs]:
    """Every combination the search tries: fixed knobs as given, `auto` ones over their choices."""
    fixed = fixed_knobs(training)
    axes = [(fixed[key],) if key in fixed else _AUTO_CHOICES[key] for key in KNOB_FIELDS]
    return [Knobs(*combo) for combo in product(*axes)]
