"""Profile files: layer times measured by `amp-tui profile` on the user's own GPU and software.

A profile is what AMP measures before it searches: each distinct layer of a model at each
tensor-parallel shard shape and micro-batch size, forward and forward + backward, in the precision
the model trains in. A scenario names one beside its model,

    model: {preset: llama3-8b, profile: h200.profile.yaml}

(a path, relative to the scenario file, or the document itself inline), and the cost model uses
the measured times where they exist and its analytic model elsewhere. The file says where and when
it was measured (GPU, device, software versions, date), so that a stale profile, or one measured
on a CPU to prove the code path, is visible wherever it is used.

Format (`format: amp-tui/profile/1`):

    model: gpt2-medium          # the model's name; each layer also states params and flops
    precision: bf16             # the precision it was measured in
    gpu: H200                   # the catalog GPU whose times these are (a CPU run: `any`, or --gpu)
    device: cuda                # cuda, or cpu (a CPU run standing in for `gpu`: proves the path)
    sequence_length: 1024       # tokens per sample measured (a CPU run may measure fewer)
    device_name: NVIDIA H200
    software: {torch: 2.11.0+cu130, cuda: '13.0', python: 3.12.3, amp_tui: 0.1.0}
    implementation: plain       # layers written in plain PyTorch, or hf (Hugging Face's)
    measured_at: '2026-11-27T19:40:00+00:00'
    timing: {clock: cuda-events, warmups: 3, repeats: 10, statistic: median}
    complete: true              # false when stopped (ctrl+c) before every shape was measured
    rows: 24                    # measurements below; fewer means the file was cut short
    optimizer: {name: adam, step_s_per_param: 1.1e-11}    # optional: one optimizer step
    layers:
    - name: block
      kind: block
      params: 12596224          # identify the layer: a profile of another model is refused
      flops: 30064771072
      measurements:             # per micro-batch, at the shard shape of tp (no collectives)
      - {tp: 1, micro_batch: 1, forward_s: 0.00078, forward_backward_s: 0.00146, recompute_s: 0.0024,
         peak_memory_bytes: 1.2e8}
    # recompute_s (blocks): forward + backward with the block checkpointed (torch.utils.checkpoint),
    # the recomputed forward and the checkpointing's own host cost included

Times are seconds per micro-batch for one copy of the layer on one GPU of a tensor-parallel group:
its shard (heads/tp, ffn/tp, vocabulary/tp) without the group's collectives, which the cost model
adds from the links. Every mistake is one SpecError naming the file and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_LAYERS, MAX_TEXT_CHARS, check_name
from amp_tui.core.base.units import parse_int, parse_number
from amp_tui.core.base.yamlio import dump_yaml, load_yaml_file
from amp_tui.core.spec.layers import ANY_GPU

PROFILE_FORMAT = "amp-tui/profile/1"
DEVICES = ("cuda", "cpu")
IMPLEMENTATIONS = ("plain", "hf")
STALE_AFTER_DAYS = 180       # a profile older than this is flagged: drivers, PyTorch and kernels move on
MAX_PROFILE_ROWS = 100_000
_HEADER = ("format", "model", "precision", "gpu", "device", "sequence_length", "device_name", "software", "implementation",
           "measured_at", "timing", "complete", "rows", "optimizer", "layers")
_ROW_KEYS = ("tp", "micro_batch", "forward_s", "forward_backward_s", "recompute_s", "peak_memory_bytes")


@dataclass(frozen=True)
class ProfileRow:
    """One measured shape of one layer: seconds per micro-batch on one GPU, at tp's shard shape."""

    tp: int
    micro_batch: int
    forward_s: float
    forward_backward_s: float
    peak_memory_bytes: float | None = None
    recompute_s: float | None = None     # forward + backward with the layer checkpointed (blocks)

    @property
    def backward_s(self) -> float:
        return self.forward_backward_s - self.forward_s


@dataclass(frozen=True)
class ProfiledLayer:
    name: str
    kind: str
    params: float
    flops: float
    rows: tuple[ProfileRow, ...]


@dataclass(frozen=True)
class Profile:
    """A parsed profile file (or inline document)."""

    model: str
    precision: str
    gpu: str
    device: str
    sequence_length: int
    device_name: str
    software: tuple[tuple[str, str], ...]
    implementation: str
    measured_at: str
    timing: tuple[tuple[str, str], ...]
    complete: bool
    layers: tuple[ProfiledLayer, ...]
    optimizer_step_s_per_param: float | None = None
    optimizer_name: str = ""
    source: str = "inline"            # the file it came from, for messages

    @property
    def num_rows(self) -> int:
        return sum(len(layer.rows) for layer in self.layers)

    @property
    def measured_date(self) -> datetime | None:
        try:
            when = datetime.fromisoformat(self.measured_at)
        except ValueError:
            return None
        return when if when.tzinfo else when.replace(tzinfo=timezone.utc)

    def age_days(self, now: datetime | None = None) -> float | None:
        when = self.measured_date
        if when is None:
            return None
        return ((now or datetime.now(timezone.utc)) - when).total_seconds() / 86400.0

    def is_stale(self, now: datetime | None = None) -> bool:
        age = self.age_days(now)
        return age is not None and age > STALE_AFTER_DAYS

    def summary(self) -> str:
        """One line: where, on what and when it was measured (shown wherever a profile is used)."""
        software = dict(self.software)
        torch = f", torch {software['torch']}" if "torch" in software else ""
        day = self.measured_at[:10] or "undated"
        stands_for = "every GPU type" if self.gpu == ANY_GPU else self.gpu
        where = f"{self.gpu} ({self.device_name}{torch})" if self.device == "cuda" else \
            f"a CPU ({self.device_name}{torch}) standing in for {stands_for} at {self.sequence_length} tokens: " \
            "proves the code path, not a GPU's times"
        flags = "" if self.complete else ", incomplete (stopped early)"
        if self.is_stale():
            flags += f", stale: {self.age_days():.0f} days old"
        return f"profile {self.source}: measured on {where}, {day}, {self.num_rows} shapes{flags}"

    def to_dict(self) -> dict:
        out: dict = {"format": PROFILE_FORMAT, "model": self.model, "precision": self.precision, "gpu": self.gpu,
                     "device": self.device, "sequence_length": self.sequence_length, "device_name": self.device_name, "software": dict(self.software),
                     "implementation": self.implementation, "measured_at": self.measured_at,
                     "timing": dict(self.timing), "complete": self.complete, "rows": self.num_rows}
        if self.optimizer_step_s_per_param is not None:
            out["optimizer"] = {"name": self.optimizer_name or "adam",
                                "step_s_per_param": self.optimizer_step_s_per_param}
        out["layers"] = [
            {"name": layer.name, "kind": layer.kind, "params": float(layer.params), "flops": float(layer.flops),
             "measurements": [{k: v for k, v in (("tp", r.tp), ("micro_batch", r.micro_batch),
                                                  ("forward_s", r.forward_s),
                                                  ("forward_backward_s", r.forward_backward_s),
                                                  ("recompute_s", r.recompute_s),
                                                  ("peak_memory_bytes", r.peak_memory_bytes)) if v is not None}
                              for r in layer.rows]}
            for layer in self.layers]
        return out

    def to_yaml(self) -> str:
        head = (f"# amp-tui profile of {self.model}: {replace(self, source='this file').summary()}\n"
                "# Seconds per micro-batch per layer copy on one GPU, at each tp's shard shape (no collectives).\n")
        return head + dump_yaml(self.to_dict())


def _text(data: dict, key: str, where: str, *, required: bool = True, default: str = "") -> str:
    if key not in data or data[key] is None:
        if required:
            raise SpecError(f"{where}.{key}", None, "required (is the file cut short?)")
        return default
    return check_name(str(data[key]) if isinstance(data[key], (int, float)) else data[key], f"{where}.{key}",
                      limit=MAX_TEXT_CHARS, text=True)


def name_pairs(value: object, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise SpecError(where, value, "expected a mapping of names to versions")
    return tuple((check_name(str(k), where), check_name(str(v), f"{where}.{k}", text=True)) for k, v in value.items())


def _row(value: object, where: str) -> ProfileRow:
    if not isinstance(value, dict):
        raise SpecError(where, value, "expected {tp, micro_batch, forward_s, forward_backward_s}")
    for key in value:
        if key not in _ROW_KEYS:
            raise SpecError(f"{where}.{key}", value[key], f"unknown field; allowed: {', '.join(_ROW_KEYS)}")
    for key in _ROW_KEYS[:4]:
        if key not in value:
            raise SpecError(f"{where}.{key}", None, "required (is the file cut short?)")
    forward = float(parse_number(value["forward_s"], f"{where}.forward_s", positive=True))
    both = float(parse_number(value["forward_backward_s"], f"{where}.forward_backward_s", positive=True))
    if both < forward:
        raise SpecError(f"{where}.forward_backward_s", both, f"less than forward_s ({forward:g})")
    peak = value.get("peak_memory_bytes")
    recompute = value.get("recompute_s")
    if recompute is not None:
        recompute = float(parse_number(recompute, f"{where}.recompute_s", positive=True))
        if recompute < both:
            raise SpecError(f"{where}.recompute_s", recompute, f"less than forward_backward_s ({both:g})")
    return ProfileRow(recompute_s=recompute, tp=parse_int(value["tp"], f"{where}.tp", maximum=1024),
                      micro_batch=parse_int(value["micro_batch"], f"{where}.micro_batch", maximum=65_536),
                      forward_s=forward, forward_backward_s=both,
                      peak_memory_bytes=None if peak is None else float(parse_number(peak, f"{where}.peak_memory_bytes",
                                                                                      minimum=0)))


def _layer(value: object, where: str) -> ProfiledLayer:
    if not isinstance(value, dict):
        raise SpecError(where, value, "expected {name, kind, params, flops, measurements}")
    for key in ("name", "params", "flops", "measurements"):
        if key not in value:
            raise SpecError(f"{where}.{key}", None, "required (is the file cut short?)")
    rows = value["measurements"]
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{where}.measurements", rows, "expected a non-empty list of measured shapes")
    parsed = tuple(_row(row, f"{where}.measurements[{i}]") for i, row in enumerate(rows))
    seen: set[tuple[int, int]] = set()
    for i, row in enumerate(parsed):
        if (row.tp, row.micro_batch) in seen:
            raise SpecError(f"{where}.measurements[{i}]", f"tp {row.tp}, micro_batch {row.micro_batch}",
                            "measured twice; keep one")
        seen.add((row.tp, row.micro_batch))
    return ProfiledLayer(name=check_name(value["name"], f"{where}.name"), kind=str(value.get("kind", "other")),
                         params=float(parse_number(value["params"], f"{where}.params", minimum=0)),
                         flops=float(parse_number(value["flops"], f"{where}.flops", minimum=0)), rows=parsed)


def parse_profile(data: object, source: str = "inline") -> Profile:
    """A profile document; errors name `source` (the file) and the field."""
    where = f"profile {source}" if source != "inline" else "model.profile"
    try:
        return _parse(data, where, source)
    except SpecError as err:
        raise err if err.field.startswith(where) else err.within(where) from None


def _parse(data: object, where: str, source: str) -> Profile:
    if data is None:          # an empty file, or one cut short inside its header comments
        raise SpecError(where, None, "holds no profile: empty, or cut short before its first field; "
                                     "write it again with `amp-tui profile`")
    if not isinstance(data, dict):
        raise SpecError(where, type(data).__name__, f"expected a profile (format: {PROFILE_FORMAT}) written by "
                                                    "`amp-tui profile`")
    if data.get("format") != PROFILE_FORMAT:
        raise SpecError(f"{where}.format", data.get("format"),
                        f"not an amp-tui profile; expected format: {PROFILE_FORMAT} (written by `amp-tui profile`)")
    for key in data:
        if key not in _HEADER:
            raise SpecError(f"{where}.{key}", data[key], f"unknown profile field; allowed: {', '.join(_HEADER)}")
    device = _text(data, "device", where)
    if device not in DEVICES:
        raise SpecError(f"{where}.device", device, f"expected one of {', '.join(DEVICES)}")
    implementation = _text(data, "implementation", where, required=False, default="plain")
    if implementation not in IMPLEMENTATIONS:
        raise SpecError(f"{where}.implementation", implementation, f"expected one of {', '.join(IMPLEMENTATIONS)}")
    complete = data.get("complete")
    if not isinstance(complete, bool):
        raise SpecError(f"{where}.complete", complete, "expected true or false (is the file cut short?)")
    if "rows" not in data:
        raise SpecError(f"{where}.rows", None, "required: the number of measured shapes (is the file cut short?)")
    expected_rows = parse_int(data["rows"], f"{where}.rows", maximum=MAX_PROFILE_ROWS)
    layers = data.get("layers")
    if not isinstance(layers, list) or not layers:
        raise SpecError(f"{where}.layers", layers, "expected a non-empty list of measured layers "
                                                   "(is the file cut short?)")
    if len(layers) > MAX_LAYERS:
        raise SpecError(f"{where}.layers", f"{len(layers):,} layers", f"more than the limit of {MAX_LAYERS:,}")
    parsed = tuple(_layer(layer, f"{where}.layers[{i}]") for i, layer in enumerate(layers))
    rows = sum(len(layer.rows) for layer in parsed)
    if rows != expected_rows:
        raise SpecError(f"{where}.rows", expected_rows, f"the file holds {rows} measured shapes: it was cut short "
                                                        "or edited; measure again with `amp-tui profile`")
    optimizer = data.get("optimizer")
    step = name = None
    if optimizer is not None:
        if not isinstance(optimizer, dict) or "step_s_per_param" not in optimizer:
            raise SpecError(f"{where}.optimizer", optimizer, "expected {name, step_s_per_param}")
        step = float(parse_number(optimizer["step_s_per_param"], f"{where}.optimizer.step_s_per_param", positive=True))
        name = _text(optimizer, "name", f"{where}.optimizer", required=False, default="adam")
    measured_at = _text(data, "measured_at", where)
    when = measured_at
    try:
        datetime.fromisoformat(when)
    except ValueError:
        raise SpecError(f"{where}.measured_at", measured_at, "expected an ISO date and time") from None
    return Profile(model=_text(data, "model", where), precision=_text(data, "precision", where),
                   gpu=check_name(_text(data, "gpu", where), f"{where}.gpu"), device=device,
                   sequence_length=parse_int(data.get("sequence_length", "missing"), f"{where}.sequence_length"),
                   device_name=_text(data, "device_name", where, required=False, default=device),
                   software=name_pairs(data.get("software"), f"{where}.software"), implementation=implementation,
                   measured_at=measured_at, timing=name_pairs(data.get("timing"), f"{where}.timing"),
                   complete=complete, layers=parsed, optimizer_step_s_per_param=step, optimizer_name=name or "",
                   source=source)


def load_profile(value: object, base_dir: Path | None = None) -> Profile:
    """A scenario's `model.profile`: a path (relative to `base_dir`, the scenario file's folder) or
    the document inline."""
    if isinstance(value, dict):
        return parse_profile(value)
    if not isinstance(value, str) or not value.strip():
        raise SpecError("model.profile", value, "expected a profile file's path (written by `amp-tui profile`)")
    path = Path(value).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    try:
        data = load_yaml_file(path)
    except SpecError as err:
        raise SpecError("model.profile", value, err.reason) from None
    return parse_profile(data, source=value)


def profile_note(profile: Profile | None) -> str:
    """Whether a profile is loaded and from when, in one line (the dashboard's model pane and
    calibrate screen)."""
    if profile is None:
        return "No profile loaded (`amp-tui profile` measures the layers on your own GPU and software)."
    return f"Layer times from {profile.summary()}."


# -- applying a profile to a model's layers ---------------------------------------------------------

def _shown(profile: Profile) -> object:
    """The profile's file as an error shows it: a path whole (SpecError cuts other values)."""
    return Path(profile.source) if profile.source != "inline" else "inline"


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.5)


def apply_profile(groups: tuple, profile: Profile, model_name: str) -> tuple:
    """The model's layer groups with the profile's measurements on the layers it measured (by name,
    parameters and FLOPs). A profile of another model, or of layers this model does not have, is
    refused: its times would price the wrong work."""
    by_name: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        by_name.setdefault(group.name, []).append(i)
    updated = list(groups)
    for measured in profile.layers:
        matches = [i for i in by_name.get(measured.name, ())
                   if _same(groups[i].params, measured.params) and _same(groups[i].flops, measured.flops)]
        if not matches:
            known = by_name.get(measured.name)
            what = (f"its layer {measured.name!r} has {measured.params:,.0f} parameters and {measured.flops:.4g} "
                    f"FLOPs, this model's {groups[known[0]].params:,.0f} and {groups[known[0]].flops:.4g}"
                    if known else f"this model has no layer {measured.name!r}")
            raise SpecError("model.profile", _shown(profile),
                            f"measured for model {profile.model!r}, not this scenario's {model_name!r} ({what}); "
                            f"profile this model with `amp-tui profile`")
        rows: dict = {}
        for row in measured.rows:
            recompute = row.recompute_s if row.recompute_s is not None else math.nan
            rows.setdefault(row.tp, []).append((row.micro_batch, row.forward_s, row.backward_s, recompute))
        table = {tp: tuple(sorted(r)) for tp, r in rows.items()}
        for i in matches:
            merged = dict(updated[i].measured)
            merged[profile.gpu] = table
            updated[i] = replace(updated[i], measured=merged)
    return tuple(updated)


def check_profile_fits(profile: Profile, gpu_names: list[str], precision: str, sequence_length: int) -> None:
    """A profile measured on a GPU the cluster does not have, in another precision or at another
    sequence length would price nothing or the wrong kernels: refused in one line. A CPU profile
    (proving the code path, labelled as such wherever it is used) is measured in fp32 at a few
    tokens; one filed under `any` stands in for every GPU type."""
    if profile.device == "cpu" and profile.gpu == ANY_GPU:
        return
    if profile.gpu not in gpu_names:
        raise SpecError("model.profile", _shown(profile),
                        f"measured on {profile.gpu}; this scenario's cluster has {', '.join(dict.fromkeys(gpu_names))} "
                        f"(profile on one of them, or pass --gpu to `amp-tui profile`)")
    if profile.device == "cpu":
        return
    if profile.precision != precision:
        raise SpecError("model.profile", _shown(profile),
                        f"measured in {profile.precision}; this scenario trains in {precision}")
    if profile.sequence_length != sequence_length:
        raise SpecError("model.profile", _shown(profile), f"measured at {profile.sequence_length} tokens per "
                        f"sample; this scenario's model has {sequence_length}")
