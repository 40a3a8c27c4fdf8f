"""What `amp-tui profile SCENARIO` measures: a scenario (preset or file), or a model preset alone.

A scenario file may already name the profile it is about to get (`model: {preset: X, profile:
X.profile.yaml}`): the profile is left out while measuring (it may not exist yet, or be the stale
one being replaced), and its path is where the new one goes unless -o says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import load_yaml_file, path_exists
from amp_tui.core.spec.model import Model, parse_model
from amp_tui.core.spec.presets import load_preset, preset_names
from amp_tui.core.spec.scenario import Scenario, parse_scenario, scenario_from_file

MODEL_ONLY_PRECISION = "bf16"    # a model preset alone is measured as most GPU training runs now


@dataclass(frozen=True)
class Target:
    model: Model
    precision: str
    scenario: Scenario | None        # None for a model preset alone
    named_profile: Path | None       # where the scenario file says its profile lives

    @property
    def gpu_names(self) -> list[str]:
        return list(dict.fromkeys(g.gpu.name for g in self.scenario.cluster.nodes)) if self.scenario else []


def _without_profile(data: object) -> tuple[object, object]:
    """(the scenario data, or a plan's, without model.profile; the profile value it held)."""
    if not isinstance(data, dict):
        return data, None
    nested = isinstance(data.get("scenario"), dict)
    section = data["scenario"] if nested else data
    model = section.get("model")
    if not (isinstance(model, dict) and "profile" in model):
        return data, None
    model = dict(model)
    named = model.pop("profile")
    section = {**section, "model": model}
    return ({**data, "scenario": section} if nested else section), named


def resolve_target(name: str) -> Target:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or path_exists(path):
        data, named = _without_profile(load_yaml_file(path))
        scenario = scenario_from_file(data, path.parent)
        where = path.parent / named if isinstance(named, str) and not Path(named).is_absolute() else \
            (Path(named) if isinstance(named, str) else None)
        return Target(scenario.model, scenario.training.precision, scenario, where)
    if name in preset_names("scenarios"):
        scenario = parse_scenario(_without_profile(load_preset("scenarios", name))[0])
        return Target(scenario.model, scenario.training.precision, scenario, None)
    if name in preset_names("models"):
        return Target(parse_model(name, 2), MODEL_ONLY_PRECISION, None, None)
    raise SpecError("SCENARIO", name, "neither a file, a scenario preset nor a model preset (see `amp-tui presets`)")
