"""Saved serving placements: `amp-tui serve --save FILE` writes one, `amp-tui serve FILE` and
`amp-tui ui FILE` reopen it (the placement is re-evaluated on the saved scenario, not searched again).

    format: amp-tui/serving-placement/1
    scenario: {...}          # presets resolved: the file stands alone
    placement: [{group, node, first_layer, num_layers}, ...]
    figures: {throughput_tokens_per_s, upper_bound_tokens_per_s, solve_time_s}
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from amp_tui import __version__
from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.yamlio import atomic_write, dump_yaml, load_yaml_file
from amp_tui.serving.network import build_network
from amp_tui.serving.placement import Placement, placement_from_rows
from amp_tui.serving.spec import ServingScenario, load_serving_scenario, parse_serving_scenario

FORMAT = "amp-tui/serving-placement/1"
_KEYS = ("format", "amp_tui_version", "created", "scenario", "placement", "figures")


def save_placement(path: str | Path, result) -> Path:
    figures = {key: value for key, value in result.to_json().items()
               if key in ("throughput_tokens_per_s", "upper_bound_tokens_per_s", "solve_time_s")}
    data = {"format": FORMAT, "amp_tui_version": __version__,
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "scenario": result.scenario.to_dict(), "placement": result.placement.rows(result.net),
            "figures": {k: float(v) for k, v in figures.items()}}
    header = (f"# amp-tui serving placement for {result.scenario.name}: "
              f"{result.solution.throughput:.1f} tokens/s. Reopen with `amp-tui serve FILE` or `amp-tui ui FILE`.\n")
    return atomic_write(path, header + dump_yaml(data))


def is_placement_file(data: object) -> bool:
    return isinstance(data, dict) and data.get("format") == FORMAT


def open_serving(name_or_path: str) -> tuple[ServingScenario, Placement | None]:
    """A serving scenario (preset or file), or a saved placement with its scenario."""
    path = Path(name_or_path)
    if not path.is_file():
        return load_serving_scenario(name_or_path), None
    data = load_yaml_file(path)
    if not is_placement_file(data):
        return load_serving_scenario(name_or_path), None
    try:
        for key in data:
            if key not in _KEYS:
                raise SpecError(str(key), data[key], f"unknown placement-file field; allowed: {', '.join(_KEYS)}")
        if not isinstance(data.get("scenario"), dict):
            raise SpecError("scenario", data.get("scenario"), "required: a mapping (the file may be cut short)")
        scenario = parse_serving_scenario(data["scenario"])
        placement = placement_from_rows(build_network(scenario), data.get("placement"))
    except SpecError as err:
        raise SpecError(f"{path}: {err.field}", err.value, err.reason) from None
    return scenario, placement
