"""Model specs: an ordered list of (possibly uneven) layers.

A model is written in one of three forms: `preset: NAME` (with optional overrides), a family with
its hyperparameters (`family: gpt`, see families.py), or an explicit `layers:` list. Every form
resolves to the same Model: layer groups as written (`block x 24`) and the expanded layer list the
cost model works on. All sizes are per sample at the training precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_LAYERS, MAX_TEXT_CHARS, check_figure, check_name
from amp_tui.core.base.units import parse_bytes, parse_int, parse_number
from amp_tui.core.spec.families import FAMILIES, SHAPE_KEYS, build_family, follow_family
from amp_tui.core.spec.layers import ANY_GPU, LAYER_KINDS, LAYER_NUMBERS, LOSS_WORKSPACE_PER_LOGIT, REQUIRED_NUMBERS, Layer
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.profiles import Profile, apply_profile, load_profile


@dataclass(frozen=True)
class Model:
    name: str
    groups: tuple[Layer, ...]
    sequence_length: int
    family: str | None = None
    # Family hyperparameters (hidden_size, num_layers, ...) or the shape given beside explicit layers.
    shape: dict = field(default_factory=dict, hash=False)
    description: str = ""
    # The profile file (`model.profile`) whose measurements the layers carry (Layer.measured).
    measured_profile: Profile | None = field(default=None, hash=False, compare=False)
    # Who measured the layers' inline `profile:` times, and when ("AMP 2020"): their label.
    profile_origin: str = ""
    # A layer list's family, whose shapes its layers follow (`shape_family: gpt`): an override of
    # its shape (`model: {preset: gpt2-medium, hidden_size: 2048}`) rebuilds the layers from it.
    shape_family: str | None = None
    # What such an override did, in one sentence ('' where nothing was overridden).
    rebuilt: str = field(default="", hash=False, compare=False)

    @cached_property
    def layers(self) -> tuple[Layer, ...]:
        """Expanded layer list: a group with repeat n appears n times."""
        return tuple(group for group in self.groups for _ in range(group.repeat))

    @cached_property
    def copy_index(self) -> np.ndarray:
        """For each expanded layer, which copy of its group it is (to index per-copy profiles)."""
        return np.array([copy for group in self.groups for copy in range(group.repeat)], dtype=np.int64)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @cached_property
    def total_params(self) -> float:
        return float(sum(layer.params * layer.repeat for layer in self.groups))

    @cached_property
    def columns(self) -> dict[str, np.ndarray]:
        """Per-layer numpy columns of every numeric field, for the vectorised cost model."""
        return {key: np.array([getattr(layer, key) for layer in self.layers], dtype=np.float64)
                for key in LAYER_NUMBERS}

    def to_dict(self) -> dict:
        out: dict = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.family:
            out["family"] = self.family
            out.update(self.shape)
        else:
            out["sequence_length"] = self.sequence_length
            out.update({k: v for k, v in self.shape.items() if k != "sequence_length"})
            if self.profile_origin:
                out["profile_origin"] = self.profile_origin
            if self.shape_family:
                out["shape_family"] = self.shape_family
            out["layers"] = [layer.to_dict() for layer in self.groups]
        if self.measured_profile is not None:   # inline: a saved plan keeps the times it was priced with
            out["profile"] = self.measured_profile.to_dict()
        return out

    def measured_layer_names(self, gpu: str, *, from_file: bool) -> list[str]:
        """The layer groups with measured times on `gpu`, as `name xrepeat`: from the profile file
        (`from_file`), or from AMP's inline per-layer `profile:` and not the file."""
        def named(group: Layer) -> str:
            return group.name + (f" x{group.repeat}" if group.repeat > 1 else "")
        filed = [group for group in self.groups if group.measured.get(gpu) or group.measured.get(ANY_GPU)]
        if from_file:
            return [named(group) for group in filed]
        return [named(group) for group in self.groups if group.profile.get(gpu) and group not in filed]


def _layer_number(value: object, key: str, field_name: str) -> float:
    if key.endswith("_bytes") and isinstance(value, str) and any(c.isalpha() for c in value):
        return parse_bytes(value, field_name, allow_zero=True)
    return float(parse_number(value, field_name, minimum=0))


def _parse_profile(value: object, field_name: str, repeat: int) -> dict:
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected {GPU: {tp: seconds}}")
    out: dict = {}
    for gpu, by_tp in value.items():
        where = f"{field_name}.{gpu}"
        if not isinstance(by_tp, dict):
            raise SpecError(where, by_tp, "expected {tp: forward seconds per sample}")
        times: dict = {}
        check_name(gpu, where)
        for tp, seconds in by_tp.items():
            tp_int = parse_int(tp, f"{where}.{tp}")
            if isinstance(seconds, list):
                if len(seconds) != repeat:
                    raise SpecError(f"{where}.{tp}", f"{len(seconds)} values",
                                    f"a list of times needs one per repeated copy ({repeat})")
                times[tp_int] = tuple(float(parse_number(s, f"{where}.{tp}", positive=True)) for s in seconds)
            else:
                times[tp_int] = float(parse_number(seconds, f"{where}.{tp}", positive=True))
        out[str(gpu)] = times
    return out


def parse_layer(value: object, field_name: str, defaults: dict) -> Layer:
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a mapping with params, flops, activation_bytes, output_bytes")
    allowed = set(LAYER_NUMBERS) | {"name", "repeat", "profile", "kind"}
    for key in value:
        if key not in allowed:
            raise SpecError(f"{field_name}.{key}", value[key], f"unknown layer field; allowed: {', '.join(sorted(allowed))}")
    for key in REQUIRED_NUMBERS:
        if key not in value:
            raise SpecError(f"{field_name}.{key}", None, f"required ({LAYER_NUMBERS[key]})")
    repeat = parse_int(value.get("repeat", 1), f"{field_name}.repeat", maximum=MAX_LAYERS)
    numbers = {key: _layer_number(value[key], key, f"{field_name}.{key}") for key in LAYER_NUMBERS if key in value}
    numbers.setdefault("tokens", float(defaults.get("sequence_length") or 0))
    numbers.setdefault("width", float(defaults.get("hidden_size") or 0))
    if numbers.get("activation_replicated_bytes", 0) > numbers["activation_bytes"]:
        raise SpecError(f"{field_name}.activation_replicated_bytes", numbers["activation_replicated_bytes"],
                        "cannot exceed activation_bytes")
    if numbers.get("expert_params", 0) > numbers["params"]:
        raise SpecError(f"{field_name}.expert_params", numbers["expert_params"], "cannot exceed params")
    if numbers.get("experts", 0) % 1:
        raise SpecError(f"{field_name}.experts", numbers["experts"], "expected a whole number of experts")
    kind = value.get("kind", "other")
    if not isinstance(kind, str) or kind not in LAYER_KINDS:
        raise SpecError(f"{field_name}.kind", kind, f"expected one of {', '.join(LAYER_KINDS)}")
    profile = _parse_profile(value["profile"], f"{field_name}.profile", repeat) if "profile" in value else {}
    name = check_name(value.get("name", "layer"), f"{field_name}.name")
    return Layer(name=name, repeat=repeat, kind=kind, profile=profile, **numbers)


_SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "vocab_size", "ffn_hidden_size", "num_kv_heads",
               "num_experts", "top_k", "expert_ffn_hidden_size")


def parse_model(value: object, bytes_per_element: int, field_name: str = "model",
                base_dir: Path | None = None) -> Model:
    """Resolve any of the three model forms. `bytes_per_element` is 2 for fp16/bf16, 4 for fp32.
    `profile:` (a file by `amp-tui profile`, relative to `base_dir`, or inline) puts measured times
    on the layers it measured (spec/profiles.py)."""
    if isinstance(value, str):
        value = {"preset": value}
    if not isinstance(value, dict):
        raise SpecError(field_name, value, "expected a preset name, a family with hyperparameters, or layers")
    if "preset" in value:
        name = value["preset"]
        if not isinstance(name, str):
            raise SpecError(f"{field_name}.preset", name, "expected a model preset name")
        base = dict(load_preset("models", name))
        overrides = {k: v for k, v in value.items() if k != "preset"}
        if "layers" in base and "layers" not in overrides:     # a layer list: its layers fix its shape
            shape = {key: overrides.pop(key) for key in SHAPE_KEYS if key in overrides}
            profile = overrides.pop("profile", None)
            base.update(overrides)
            model = override_shape(parse_model(base, bytes_per_element, field_name), shape, bytes_per_element,
                                   field_name)
            return model if profile is None else _with_profile(model, profile, base_dir)
        if "layers" in overrides:        # a list of one's own: not the preset's family or measurements
            base = {k: v for k, v in base.items() if k not in ("shape_family", "profile_origin")}
        base.update(overrides)
        return parse_model(base, bytes_per_element, field_name, base_dir)
    if "profile" in value:
        model = parse_model({k: v for k, v in value.items() if k != "profile"}, bytes_per_element, field_name)
        return _with_profile(model, value["profile"], base_dir)
    name = check_name(value.get("name") or value.get("family") or "model", f"{field_name}.name")
    description = check_name(value.get("description", ""), f"{field_name}.description", limit=MAX_TEXT_CHARS, text=True)
    if "family" in value:
        family = value["family"]
        if not isinstance(family, str) or family not in FAMILIES:
            raise SpecError(f"{field_name}.family", family, f"expected one of {', '.join(FAMILIES)}")
        if "layers" in value:
            raise SpecError(f"{field_name}.layers", "...", "give either a family or explicit layers, not both")
        if "num_layers" in value:     # before the family builds anything from it
            parse_int(value["num_layers"], f"{field_name}.num_layers", maximum=MAX_LAYERS)
        shape, groups = build_family(family, value, bytes_per_element, field_name)
        _check_size(groups, field_name)
        return Model(name=name, groups=groups, sequence_length=shape["sequence_length"], family=family,
                     shape=shape, description=description)
    if "layers" not in value:
        raise SpecError(field_name, sorted(value), "expected `preset`, `family` or `layers`")
    layers = value["layers"]
    if not isinstance(layers, list) or not layers:
        raise SpecError(f"{field_name}.layers", layers, "expected a non-empty list of layers")
    allowed = {"name", "description", "sequence_length", "layers", "profile_origin", "shape_family", *_SHAPE_KEYS}
    for key in value:
        if key not in allowed:
            raise SpecError(f"{field_name}.{key}", value[key], f"unknown model field; allowed: {', '.join(sorted(allowed))}")
    stated = "sequence_length" in value
    sequence_length = parse_int(value["sequence_length"], f"{field_name}.sequence_length") if stated else None
    shape = {key: parse_int(value[key], f"{field_name}.{key}") for key in _SHAPE_KEYS if key in value}
    defaults = {"sequence_length": sequence_length, **shape}
    if len(layers) > MAX_LAYERS:
        raise SpecError(f"{field_name}.layers", f"{len(layers):,} layers", f"more than the limit of {MAX_LAYERS:,} layers")
    groups = tuple(parse_layer(layer, f"{field_name}.layers[{i}]", defaults) for i, layer in enumerate(layers))
    _check_size(groups, field_name)
    if not any(layer.flops > 0 or layer.profile or layer.params > 0 for layer in groups):
        raise SpecError(f"{field_name}.layers", f"{len(groups)} layers",
                        "no layer has FLOPs, measured times or parameters, so there is no work to plan")
    if not stated:
        groups, sequence_length = _infer_shape(groups, bytes_per_element, shape.get("hidden_size"))
    origin = check_name(value.get("profile_origin", ""), f"{field_name}.profile_origin", limit=MAX_TEXT_CHARS, text=True)
    family = value.get("shape_family")
    if family is not None and family not in FAMILIES:
        raise SpecError(f"{field_name}.shape_family", family, f"expected one of {', '.join(FAMILIES)}")
    return Model(name=name, groups=groups, sequence_length=sequence_length, shape=shape, description=description,
                 profile_origin=origin, shape_family=family)


def _with_profile(model: Model, value: object, base_dir: Path | None) -> Model:
    """The model with a profile file's measurements on the layers it measured (spec/profiles.py)."""
    profile = load_profile(value, base_dir)
    return replace(model, groups=apply_profile(model.groups, profile, model.name), measured_profile=profile)


def override_shape(model: Model, overrides: dict, bytes_per_element: int, field_name: str = "model",
                   family: str | None = None) -> Model:
    """A layer list with its shape overridden (`model: {preset: gpt2-medium, hidden_size: 2048}`,
    or the dashboard's edit): rebuilt from the family its layers follow (`family`, else its
    `shape_family`; families.follow_family says what it kept and dropped in `rebuilt`), or, for
    a list that follows none (AMP's TransGAN generator), refused: its layers fix every size."""
    family = family or model.shape_family
    old = {**model.shape, "sequence_length": model.sequence_length}
    new = dict(old)
    for key, value in overrides.items():
        where = f"{field_name}.{key}"
        if key == "flash_attention":
            if not isinstance(value, bool):
                raise SpecError(where, value, "expected true or false")
            new[key] = value
        else:
            new[key] = parse_int(value, where, **({"maximum": MAX_LAYERS} if key == "num_layers" else {}))
    changed = [key for key in new if new[key] != old.get(key)]
    if not changed:
        return model
    if family is None:
        key = changed[0]
        raise SpecError(f"{field_name}.{key}", overrides[key],
                        f"{model.name} is a list of measured layers that follows no family, so nothing rebuilds it at "
                        f"another {key}{f' (it has {old[key]})' if key in old else ''}: edit model.layers, or start "
                        "from a family (model: {family: gpt, ...})")
    groups, note, from_family = follow_family(model.groups, old, new, family, bytes_per_element, field_name,
                                              model.profile_origin or "inline")
    _check_size(groups, field_name)
    return replace(model, groups=groups, sequence_length=new["sequence_length"], rebuilt=note, description="",
                   shape={key: new[key] for key in _SHAPE_KEYS if key in new},
                   shape_family=family if from_family else model.shape_family)


def _infer_shape(groups: tuple[Layer, ...], bytes_per_element: int,
                 hidden_size: int | None) -> tuple[tuple[Layer, ...], int]:
    """A layer list that states no sequence length: read the layer it repeats most (identical
    parameters, FLOPs and bytes, at least twice) as the transformer block. Its width is the hidden
    size (or h from a GPT block's 12 h^2 + 13 h parameters), its output of tokens x width 16-bit values gives
    the tokens per sample; every layer that does not state them takes both, as a preset with a
    hidden size and sequence length would, and the block's copies are marked as blocks (two
    tensor-parallel all-reduces per pass). Without such a layer each layer's shape is inferred on
    its own (terms/compute.py layer_shapes) and a sample counts as one token. A list that ends in a
    loss gets the loss's workspace (_loss_workspace)."""
    counts: dict[tuple, int] = {}
    for layer in groups:
        if layer.params > 0 and layer.output_bytes > 0:
            key = (layer.params, layer.flops, layer.activation_bytes, layer.output_bytes)
            counts[key] = counts.get(key, 0) + layer.repeat
    block = max(counts, key=counts.get) if counts else None
    if block is None or counts[block] < 2:
        return groups, 1
    params, _, _, output_bytes = block
    width = float(hidden_size or round((math.sqrt(169.0 + 48.0 * params) - 13.0) / 24.0))   # 12 h^2 + 13 h
    tokens = max(round(output_bytes / (width * bytes_per_element)), 1)

    def shaped(layer: Layer) -> Layer:
        is_block = (layer.params, layer.flops, layer.activation_bytes, layer.output_bytes) == block
        return replace(layer, tokens=layer.tokens or float(tokens), width=layer.width or width,
                       kind="block" if is_block and layer.kind == "other" else layer.kind)
    return _loss_workspace(tuple(shaped(layer) for layer in groups), tokens, width, bytes_per_element), tokens


def _loss_workspace(groups: tuple[Layer, ...], tokens: int, width: float,
                    bytes_per_element: int) -> tuple[Layer, ...]:
    """A list that states no workspace anywhere and whose last layer outputs at most one fp32
    value per token ends in a loss: its logits are its input (the previous layer's output), or,
    where it has weights itself (an output projection and loss in one layer), tokens x its
    parameters / width. Without this a plain file predicted every one of AMP's five
    out-of-memory runs to fit."""
    last = groups[-1]
    if any(layer.workspace_bytes for layer in groups) or last.repeat != 1 or last.output_bytes > 4 * tokens:
        return groups
    if last.params > 0:
        logits = tokens * last.params / width
    elif len(groups) > 1:
        logits = groups[-2].output_bytes / bytes_per_element
    else:
        return groups
    loss = replace(last, workspace_bytes=LOSS_WORKSPACE_PER_LOGIT * logits,
                   kind="head" if last.kind == "other" else last.kind)
    return (*groups[:-1], loss)


def _check_size(groups: tuple[Layer, ...], field_name: str) -> None:
    """At most MAX_LAYERS layers once repeated, and figures the cost model can add and multiply
    without overflow (a family's figures are products of its hyperparameters)."""
    total = sum(layer.repeat for layer in groups)
    if total > MAX_LAYERS:
        raise SpecError(f"{field_name}.layers", f"{total:,} layers after repeats", f"more than the limit of {MAX_LAYERS:,}")
    for i, layer in enumerate(groups):
        for key in LAYER_NUMBERS:
            value = getattr(layer, key)
            check_figure(value, f"{field_name}.layers[{i}].{key}", value)
