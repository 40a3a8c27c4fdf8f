"""Where the preset files live, and what they hold.

The repository keeps presets/ at its top level; a wheel carries the same folder inside the package
as amp_tui/_presets (see pyproject.toml), so presets work after a plain `pip install .` too.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import load_yaml_file

PRESET_KINDS = ("scenarios", "clusters", "models")


@cache
def presets_dir() -> Path:
    package = Path(__file__).resolve().parents[2]    # amp_tui/, above core/spec/
    for candidate in (package / "_presets", package.parent / "presets"):
        if (candidate / "gpus.yaml").is_file():
            return candidate
    raise SpecError("presets", str(package), "preset folder not found; reinstall amp-tui")


@cache
def catalog(name: str) -> dict:
    """A top-level catalog file (`gpus`, `instances`) as a mapping of entry name to fields."""
    data = load_yaml_file(presets_dir() / f"{name}.yaml")
    if not isinstance(data, dict):
        raise SpecError(f"presets/{name}.yaml", type(data).__name__, "expected a mapping")
    return data


def preset_names(kind: str) -> list[str]:
    """Names of the presets of one kind ('scenarios', 'clusters' or 'models'), sorted."""
    return sorted(path.stem for path in (presets_dir() / kind).glob("*.yaml"))


def preset_path(kind: str, name: str) -> Path:
    # Only a listed name: `../x` or an absolute path is not a preset.
    if not isinstance(name, str) or name not in preset_names(kind):
        known = ", ".join(preset_names(kind))
        raise SpecError(kind[:-1], name, f"no such preset; known: {known}")
    return presets_dir() / kind / f"{name}.yaml"


def load_preset(kind: str, name: str) -> dict:
    """A preset's mapping, a fresh copy each time: callers may change it."""
    preset_path(kind, name)     # refuses an unknown name (or a list) before the cache sees it
    return copy.deepcopy(_load_preset(kind, name))


@cache
def _load_preset(kind: str, name: str) -> dict:
    data = load_yaml_file(preset_path(kind, name))
    if not isinstance(data, dict):
        raise SpecError(f"presets/{kind}/{name}.yaml", type(data).__name__, "expected a mapping")
    return data


def describe_preset(kind: str, name: str) -> str:
    """The preset's one-line description (its `description` field, else its name)."""
    data = load_preset(kind, name)
    return str(data.get("description") or data.get("name") or name)
