"""Where each layer's time comes from: one table of measured layer times per (GPU type,
tensor-parallel degree), each entry labelled with its source, and one rule for the entries nobody
measured (docs/cost-model.md, "Where layer times come from").

  measured  measured on this GPU type at this tp: inline in the model's layers (AMP's presets:
            AMP 2020, forward seconds per sample at micro-batch 1 with the tensor-parallel
            collectives inside), or by a profile file (`amp-tui profile`, with its file and date:
            forward and backward per micro-batch at the shard shape). Where both measured a layer
            on one GPU type, the profile file wins.
  carried   not measured on this GPU type at this tp: the analytic time times the layer's measured /
            analytic ratio at tp 1, this GPU type's own where it measured the layer at tp 1
            (carried across tensor-parallel degrees), else the geometric mean of the ratios of the
            GPU types that measured it (carried across GPU types; from the newest source where a
            profile file and the inline times both did), where the cluster as written holds a
            measured GPU type: its plans' ratio between GPU types then rests on one source. The
            measurement sets the level, the analytic model the ratio between GPU types and degrees.
  analytic  nothing to carry: nobody measured the layer at tp 1 (or its analytic time is 0), or no
            GPU type of the cluster was measured. (Carrying AMP's 2020 ratios to an H200 alone
            raised the error on 12 measured H200 iterations from 33% to 43%: a cluster nobody
            measured stays with the analytic model, fitted to today's software.)

layer_times.py prices every layer by this rule; `plan`, `evaluate` and the dashboard show the labels.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from amp_tui.core.spec.layers import ANY_GPU

INLINE_ORIGIN = "inline profile"   # a layer list's own `profile:` times, where the model names no origin
_INLINE, _FILE = 1, 2              # origin codes (0: not measured); the profile file is the newer
_TABLES = 8                        # models whose tables are kept
_tables: dict[int, tuple[object, "MeasuredTable"]] = {}
_tables_lock = threading.Lock()


def clear_tables() -> None:
    """Forget every model's table (the benchmark times each search from cold)."""
    with _tables_lock:
        _tables.clear()


def measured_table(model) -> MeasuredTable:
    """The model's table, shared by every cost model of it (the newest few models' are kept)."""
    with _tables_lock:
        entry = _tables.pop(id(model), None)
        if entry is None or entry[0] is not model:
            entry = (model, MeasuredTable(model))
        _tables[id(model)] = entry
        while len(_tables) > _TABLES:
            del _tables[next(iter(_tables))]
    return entry[1]


class MeasuredTable:
    """The measured entries of one model's layers, per (GPU type, tp), built as asked for."""

    def __init__(self, model):
        self.model = model
        profile = model.measured_profile
        self.origins = {_INLINE: model.profile_origin or INLINE_ORIGIN}
        if profile is not None:
            self.origins[_FILE] = f"profile {profile.source}, {profile.measured_at[:10] or 'undated'}"
        self._entries: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        self.gpus = tuple(dict.fromkeys(name for layer in model.layers for name in (*layer.profile, *layer.measured)
                                        if name != ANY_GPU))

    def measured_any(self, gpu_names) -> bool:
        """Whether any of these GPU types measured a layer."""
        return any(name in self.gpus for name in gpu_names)

    def entry(self, gpu: str, tp: int) -> tuple[np.ndarray, np.ndarray]:
        """(inline forward seconds per sample at micro-batch 1, NaN where none or where the profile
        file measured the layer; whether the profile file measured it) per layer."""
        key = (gpu, tp)
        if key not in self._entries:
            layers = self.model.layers
            filed = np.array([layer.measured_passes(gpu, tp) is not None for layer in layers], dtype=bool)
            inline = np.array([t if (t := layer.profiled_time(gpu, tp, int(c))) is not None else np.nan
                               for layer, c in zip(layers, self.model.copy_index)])
            self._entries[key] = (np.where(filed, np.nan, inline), filed)
        return self._entries[key]

    def tp1_points(self, gpu: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per layer, its tp 1 measurement on this GPU type: (forward seconds, the micro-batch size
        they are for, origin code); NaN, 1, 0 where it was not measured at tp 1."""
        inline, filed = self.entry(gpu, 1)
        seconds, mbs = inline.copy(), np.ones(len(inline))
        for index in np.flatnonzero(filed):       # the profile file's smallest micro-batch
            mbs[index], seconds[index] = self.model.layers[index].measured_passes(gpu, 1)[0][:2]
        origin = np.where(filed, _FILE, np.where(np.isnan(inline), 0, _INLINE))
        return seconds, mbs, origin


class TimeSources:
    """The rule for entries nobody measured, and the labels: `ratio` is what the analytic time is
    multiplied by, `labels` says where each layer's time comes from. `analytic(gpu, tp, mbs)` is
    the analytic forward time per layer (rows: micro-batch sizes); `gpu_named` finds a measured
    GPU type's figures (None: it cannot be carried from); `across`: whether the cluster holds a
    measured GPU type to carry from to its other types (else a ratio is carried across tp only)."""

    def __init__(self, table: MeasuredTable, analytic: Callable, gpu_named: Callable, across: bool,
                 host: Callable | None = None):
        self.table = table
        self.across = across      # whether the cluster holds a measured GPU type to carry across from
        self.model = table.model
        self._analytic = analytic
        self._gpu_named = gpu_named
        self._host = host         # () -> (per layer: the host's seconds to issue one forward, host_overlap)
        self._cache: dict = {}

    def _cached(self, key: tuple, build: Callable):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def own_ratio(self, gpu, gpu_only: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Per layer, measured / analytic forward time at tp 1 on this GPU type (NaN where it was not
        measured at tp 1 or the analytic time is 0), and the measurement's origin code.

        A measured time holds the host's time to issue the layer's kernels as the stack that was
        measured exposed it (terms/host.py: GPU + max(host - overlap x GPU, 0)); the GPU's part is
        what a ratio carries (`gpu_only`), since the layer it is carried to pays the host's time
        again on its own (AMP's 2020 times, host and GPU added, carried whole to an A10G made it
        slower than the T4). Without `gpu_only`, the whole measurement over the analytic GPU time
        (how a tp > 1 measurement is split into compute and the rest: LayerTimes._split_measured)."""
        def build():
            seconds, mbs, origin = self.table.tp1_points(gpu.name)
            if gpu_only and self._host is not None:
                seconds = gpu_part(seconds, *self._host())
            sizes = np.unique(mbs)
            analytic = self._analytic(gpu, 1, sizes[:, None])[np.searchsorted(sizes, mbs), np.arange(len(mbs))]
            usable = ~np.isnan(seconds) & (analytic > 0)
            return np.where(usable, seconds / np.where(usable, analytic, 1.0), np.nan), np.where(usable, origin, 0)
        return self._cached(("own", gpu, gpu_only), build)

    def carried(self) -> tuple[np.ndarray, list[tuple[str, ...]], np.ndarray]:
        """Per layer, the geometric mean of the measured GPU types' ratios from the newest origin
        that measured it at tp 1 (NaN where none did), those GPU types, and that origin."""
        def build():
            n = self.model.num_layers
            names, ratios, origins = [], [], []
            for name in self.table.gpus if self.across else ():
                gpu = self._gpu_named(name)
                if gpu is not None:
                    ratio, origin = self.own_ratio(gpu)
                    names.append(name)
                    ratios.append(ratio)
                    origins.append(origin)
            if not names:
                return np.full(n, np.nan), [()] * n, np.zeros(n, dtype=int)
            origins = np.array(origins)
            newest = origins.max(axis=0)
            use = (origins == newest) & (newest > 0)
            logs = np.where(use, np.log(np.where(use, np.array(ratios), 1.0)), 0.0)
            mean = np.where(newest > 0, np.exp(logs.sum(axis=0) / np.maximum(use.sum(axis=0), 1)), np.nan)
            refs = [tuple(name for name, used in zip(names, use[:, i]) if used) for i in range(n)]
            return mean, refs, newest
        return self._cached(("carried",), build)

    def ratio(self, gpu, tp: int, gpu_only: bool = True) -> np.ndarray:
        """Per layer, the factor on the analytic time where this (GPU type, tp) measured nothing:
        the GPU type's own tp 1 ratio at tp > 1, else the other GPU types' (1 at tp 1 where the
        layer was measured here, its measurement standing; 1 where nothing can be carried).
        `gpu_only`: see own_ratio."""
        def build():
            own = self.own_ratio(gpu, gpu_only)[0]
            carried = self.carried()[0]
            measured_here = ~np.isnan(own)
            out = np.where(measured_here, own if tp > 1 else 1.0, carried)
            return np.where(np.isnan(out), 1.0, out)
        return self._cached(("ratio", gpu, tp, gpu_only), build)

    def labels(self, gpu, tp: int) -> tuple[str, ...]:
        """Per layer, where its time on this GPU type at this tp comes from (the module's rule)."""
        def build():
            inline, filed = self.table.entry(gpu.name, tp)
            own, own_origin = self.own_ratio(gpu)
            carried, refs, origin = self.carried()
            origins = {0: "", **self.table.origins}
            # 0 measured by the file, 1 inline, 2 carried from this GPU type's tp 1, 3 from others, 4 analytic
            kind = np.select([filed, ~np.isnan(inline), (tp > 1) & ~np.isnan(own), ~np.isnan(carried)], [0, 1, 2, 3], 4)
            texts: dict[tuple, str] = {}
            out = []
            for i, k in enumerate(kind.tolist()):
                key = (k, bool(self.model.layers[i].measured.get(gpu.name)) if k == 0 else
                       int(own_origin[i]) if k == 2 else (refs[i], int(origin[i])) if k == 3 else 0)
                if key not in texts:
                    texts[key] = (
                        f"measured ({origins[_FILE]}, {gpu.name if key[1] else 'a CPU standing in'})" if k == 0 else
                        f"measured ({origins[_INLINE]}, {gpu.name})" if k == 1 else
                        f"carried from {gpu.name}'s tp 1 measured/analytic ratio ({origins[key[1]]})" if k == 2 else
                        f"carried from {'+'.join(key[1][0])}'s measured/analytic ratio ({origins[key[1][1]]})"
                        if k == 3 else "analytic")
                out.append(texts[key])
            return tuple(out)
        return self._cached(("labels", gpu, tp), build)


def gpu_part(seconds: np.ndarray, host: np.ndarray, overlap: float) -> np.ndarray:
    """The GPU's part of measured forward times that hold the host's issue time as a stack with this
    host_overlap exposes it (measured = GPU + max(host - overlap x GPU, 0)): all of it where the GPU
    hides the host, else (measured - host) / (1 - overlap); at least a tenth of the measurement (a
    layer measured no slower than its host time says little about its GPU time)."""
    exposed = host > overlap * seconds
    if overlap < 1.0:
        gpu = np.where(exposed, (seconds - host) / (1.0 - overlap), seconds)
    else:
        gpu = seconds
    return np.maximum(gpu, 0.1 * seconds)


def span_label(labels: tuple[str, ...], working: np.ndarray, first: int, end: int) -> str:
    """One label for layers first..end - 1: the layers that do work (FLOPs > 0) decide, each
    distinct source with its count where they differ."""
    chosen = [label for label, w in zip(labels[first:end], working[first:end]) if w] or list(labels[first:end])
    counts = {label: chosen.count(label) for label in dict.fromkeys(chosen)}
    if len(counts) == 1:
        return chosen[0]
    return "; ".join(f"{label}: {n} layer{'s' if n > 1 else ''}" for label, n in counts.items())


def _named_groups(model, labels: tuple[str, ...]) -> dict[str, list[str]]:
    """Working layer groups (`name xrepeat`) by the label of their first copy."""
    out: dict[str, list[str]] = {}
    start = 0
    for group in model.groups:
        if group.flops > 0:
            out.setdefault(labels[start], []).append(group.name + (f" x{group.repeat}" if group.repeat > 1 else ""))
        start += group.repeat
    return out


def gpu_summary(model, labels: tuple[str, ...]) -> str:
    """Where one GPU type's layer times come from, in one line: its label, or each label with its
    layer groups where they differ."""
    named = _named_groups(model, labels)
    if len(named) == 1:
        return next(iter(named))
    order = sorted(named, key=lambda label: ("measured", "carried", "analytic").index(label.split(" ")[0]))
    return "; ".join(f"{label} {', '.join(named[label])}" for label in order)


def _kind(label: str) -> str:
    """The JSON key of a label: measured by a profile file, inline, carried or analytic."""
    if label.startswith("measured (profile "):
        return "measured"
    return "amp_inline" if label.startswith("measured") else label.split(" ")[0]


def has_measurements(model) -> bool:
    return any(layer.profile or layer.measured for layer in model.groups)


def layer_time_sources(cost, tp: int = 1) -> dict:
    """Per GPU type of the cluster at tp 1: which layer groups are measured (a profile file's,
    `measured`; inline, `amp_inline`), carried and analytic, with a one-line summary (`by_gpu`),
    what an override of the model's shape dropped (`rebuilt`) and the profile file's provenance
    (what `plan`, `evaluate --json` and the dashboard show)."""
    model = cost.model
    gpus = {group.gpu.name: group.gpu for group in cost.scenario.cluster.nodes}
    out: dict = {key: {} for key in ("measured", "amp_inline", "carried", "analytic", "by_gpu")}
    for name, gpu in gpus.items():
        labels = cost.time_sources(gpu, tp)
        for key in ("measured", "amp_inline", "carried", "analytic"):
            out[key][name] = []
        for label, names in _named_groups(model, labels).items():
            out[_kind(label)][name] += names
        out["by_gpu"][name] = gpu_summary(model, labels)
    if model.rebuilt:        # an override of a layer list's shape: what it kept and dropped
        out["rebuilt"] = model.rebuilt
    profile = model.measured_profile
    if profile is not None:
        out["profile"] = {"source": profile.source, "gpu": profile.gpu, "device": profile.device,
                          "device_name": profile.device_name, "measured_at": profile.measured_at,
                          "software": dict(profile.software), "complete": profile.complete,
                          "stale": profile.is_stale(), "summary": profile.summary()}
    return out


def sources_line(cost) -> str:
    """'layer times: on V100 measured (...); on A10G carried from ...' for a model with any
    measured times ('' for an analytic model: nothing to tell apart)."""
    if not has_measurements(cost.model):
        return ""
    by_gpu = layer_time_sources(cost)["by_gpu"]
    return "layer times: " + "; ".join(f"on {gpu} {summary}" for gpu, summary in by_gpu.items())


def sources_statement(cost) -> str:
    """The dashboard's model pane: where the layer times come from on each GPU type of the
    cluster, in one sentence, whatever was measured."""
    line = sources_line(cost)
    return line[0].upper() + line[1:] + "." if line else "Layer times: analytic on every GPU type (nothing measured)."


def stage_sources_text(prediction) -> str:
    """'stages 0-1 on A10G carried from ...; stages 2-5 on V100 measured (...)': each stage's
    source, consecutive stages with the same GPU type and source together."""
    runs: list[list] = []
    for stage in prediction.stages:
        if runs and runs[-1][2:] == [stage.gpu, stage.time_source]:
            runs[-1][1] = stage.index
        else:
            runs.append([stage.index, stage.index, stage.gpu, stage.time_source])
    return "; ".join(f"stage{'s' if last > first else ''} {first}{f'-{last}' if last > first else ''} on {gpu} {source}"
                     for first, last, gpu, source in runs)


def source_warning(cost, prediction) -> str | None:
    """Where a plan's stages meet GPU types that price the same layers from different sources with
    no measured ratio between them (one measured or carried, another analytic): one sentence."""
    by_name = {group.gpu.name: group.gpu for group in cost.scenario.cluster.nodes}
    tps = prediction.strategy.stage_tp or (prediction.strategy.tp,) * len(prediction.stages)
    kinds: dict[str, np.ndarray] = {}
    for stage, tp in zip(prediction.stages, tps):
        for name in stage.gpu_types:
            analytic = np.array([label == "analytic" for label in cost.time_sources(by_name[name], tp)])
            kinds[name] = kinds.get(name, analytic) | analytic
    if len(kinds) < 2:
        return None
    stack = np.array(list(kinds.values()))
    apart = stack.any(axis=0) & ~stack.all(axis=0) & (cost.model.columns["flops"] > 0)
    if not apart.any():
        return None
    names = list(dict.fromkeys(cost.model.layers[i].name for i in np.flatnonzero(apart)))
    analytic = [gpu for gpu, row in kinds.items() if row[apart].any()]
    other = [gpu for gpu, row in kinds.items() if not row[apart].all()]
    return (f"stages priced by different sources: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''} "
            f"analytic on {', '.join(analytic)} (no measured ratio to carry) but measured or carried on "
            f"{', '.join(other)}: the split between them rests on the analytic model alone")
