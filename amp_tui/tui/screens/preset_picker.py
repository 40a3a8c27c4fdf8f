"""ctrl+o: every scenario, cluster and model preset in one filterable list."""

from __future__ import annotations

from amp_tui.core.spec.presets import describe_preset, preset_names
from amp_tui.tui.screens.picker import PickerScreen, PickItem

KIND_LABELS = {"scenarios": "scenario", "clusters": "cluster", "models": "model"}


def preset_items() -> list[PickItem]:
    items = []
    for kind, label in KIND_LABELS.items():
        for name in preset_names(kind):
            items.append(PickItem((kind, name), f"{label:<8} {name}", describe_preset(kind, name)))
    return items


class PresetPickerScreen(PickerScreen):
    """Returns (kind, name): a scenario replaces everything, a cluster or a model just that part."""

    def __init__(self) -> None:
        super().__init__("Open preset: a scenario, or a cluster / model to swap in", preset_items())
