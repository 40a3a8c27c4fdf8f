"""Edits as plain-dict surgery on `Scenario.to_dict()`, then one `parse_scenario` to validate.

Pure functions (no Textual): each takes the current Scenario and returns a new, validated one or
raises SpecError with the message the user sees. The app keeps the old scenario on any error.
"""

from __future__ import annotations

import copy as copy_module
from collections.abc import Callable
from dataclasses import replace

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.limits import MAX_LAYERS
from amp_tui.core.base.units import parse_int
from amp_tui.core.spec.hardware import instance_catalog
from amp_tui.core.spec.model import Model, override_shape
from amp_tui.core.spec.presets import load_preset
from amp_tui.core.spec.scenario import Scenario, parse_scenario

# Explicit-layer models may carry these shape keys beside their layers (see core/spec/model.py).
EXPLICIT_SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "vocab_size", "ffn_hidden_size", "num_kv_heads")


def apply(scenario: Scenario, change: Callable[[dict], None]) -> Scenario:
    """Run `change` on a deep copy of the scenario's dict and parse the result."""
    data = copy_module.deepcopy(scenario.to_dict())
    change(data)
    return parse_scenario(data)


# -- cluster ------------------------------------------------------------------------------------

def set_node_field(scenario: Scenario, index: int, key: str, value: object) -> Scenario:
    def change(data: dict) -> None:
        data["cluster"]["nodes"][index][key] = value
    return apply(scenario, change)


def set_gpu_memory(scenario: Scenario, index: int, text: str) -> Scenario:
    """Node group `index`'s GPUs with `text` of memory (e.g. '24 GiB'): its GPU with that memory, and
    the capacity planned against (usable_memory) the same share below it as before."""
    from amp_tui.core.base.units import exact_bytes, parse_bytes

    gpu = scenario.cluster.nodes[index].gpu
    field = f"cluster.nodes[{index}].gpu.memory"
    memory = parse_bytes(text.strip(), field)
    if not memory > 0:
        raise SpecError(field, text, "must be greater than 0")
    share = gpu.usable_memory_bytes / gpu.memory_bytes if gpu.memory_bytes else 1.0

    def change(data: dict) -> None:
        data["cluster"]["nodes"][index]["gpu"] = {**gpu.to_dict(), "memory": exact_bytes(memory),
                                                  "usable_memory": exact_bytes(int(memory * share))}
    return apply(scenario, change)


def add_instance(scenario: Scenario, instance: str, count: int = 1) -> Scenario:
    if instance not in instance_catalog():
        raise SpecError("instance", instance, f"unknown instance; known: {', '.join(instance_catalog())}")

    def change(data: dict) -> None:
        data["cluster"]["nodes"].append({"instance": instance, "count": count})
    return apply(scenario, change)


def add_custom_node(scenario: Scenario, like: int | None = None) -> Scenario:
    """A node group without an instance name, starting from the hardware of group `like` (or the last)."""
    groups = scenario.cluster.nodes
    template = groups[like if like is not None and 0 <= like < len(groups) else -1].to_dict()
    template.pop("instance", None)
    template["count"] = 1

    def change(data: dict) -> None:
        data["cluster"]["nodes"].append(template)
    return apply(scenario, change)


def remove_node_group(scenario: Scenario, index: int) -> Scenario:
    if len(scenario.cluster.nodes) == 1:
        raise SpecError("cluster.nodes", 1, "the last node group cannot be removed; add another first")

    def change(data: dict) -> None:
        del data["cluster"]["nodes"][index]
    return apply(scenario, change)


def use_cluster_preset(scenario: Scenario, name: str) -> Scenario:
    load_preset("clusters", name)  # raises SpecError naming the known presets

    def change(data: dict) -> None:
        data["cluster"] = {"preset": name}
    return apply(scenario, change)


# -- model --------------------------------------------------------------------------------------

def use_model_preset(scenario: Scenario, name: str) -> Scenario:
    load_preset("models", name)

    def change(data: dict) -> None:
        data["model"] = {"preset": name}
    return apply(scenario, change)


def set_model_field(scenario: Scenario, key: str, value: object) -> Scenario:
    """A family hyperparameter (hidden_size, num_layers, ..., flash_attention) or the model's name.

    An explicit layer list takes them too, by the rule an override of a layer-list preset follows
    (core/spec/model.py, override_shape): num_layers alone resizes its repeated block (keeping the
    measured times, the new copies get their mean); any other size rebuilds it from the family its
    layers follow (gpt unless it names one), keeping measured times only on layers whose shape is
    unchanged. The new model says what was kept and dropped (Model.rebuilt)."""
    model = scenario.model
    if key == "num_layers" and "num_layers" in model.shape:        # the other layers count towards the limit
        _copies(value, "model.num_layers", model.num_layers - int(model.shape["num_layers"]))
    if not model.family and key != "name":
        blocks = [group for group in model.groups if group.kind == "block"]
        if key == "num_layers" and len(blocks) == 1:     # (its other layers count towards the limit)
            _copies(value, "model.num_layers", model.num_layers - blocks[0].repeat)
        missing = [k for k in FAMILY_SHAPE_KEYS if k not in model.shape and k != key]
        if missing and not (key == "num_layers" and len(blocks) == 1):
            raise SpecError(f"model.{key}", value, f"this explicit layer list does not give its "
                            f"{', '.join(missing)}: edit its layers, or pick a family preset (ctrl+o)")
        rebuilt = override_shape(model, {key: value}, scenario.training.bytes_per_element,
                                 family=model.shape_family or "gpt")

        def replace_model(data: dict) -> None:
            data["model"] = rebuilt.to_dict()
        changed = apply(scenario, replace_model)
        return replace(changed, model=replace(changed.model, rebuilt=rebuilt.rebuilt))

    def change(data: dict) -> None:
        data["model"][key] = value
    return apply(scenario, change)


FAMILY_SHAPE_KEYS = ("hidden_size", "num_layers", "num_heads", "vocab_size")


def explicit_model_dict(model: Model) -> dict:
    """The model as an explicit layer list (a family model's layers become editable this way)."""
    out: dict = {"name": model.name}
    if model.description:
        out["description"] = model.description
    out["sequence_length"] = model.sequence_length
    out.update({k: v for k, v in model.shape.items() if k in EXPLICIT_SHAPE_KEYS})
    if model.profile_origin:
        out["profile_origin"] = model.profile_origin
    out["layers"] = [layer.to_dict() for layer in model.groups]
    return out


def _edit_layers(scenario: Scenario, change_layers: Callable[[list], None]) -> Scenario:
    def change(data: dict) -> None:
        data["model"] = explicit_model_dict(scenario.model)
        change_layers(data["model"]["layers"])
    return apply(scenario, change)


def set_layer_field(scenario: Scenario, group: int, key: str, value: object, copy: int | None = None) -> Scenario:
    """One field of layer group `group`, or of one copy of it alone (the group is split around that
    copy: 'block x 24', copy 4 becomes 4 + 1 + 19). A new repeat count also resizes per-copy
    measured times (dropping the extra copies' times, or giving new copies the mean of the measured ones)."""
    if key == "repeat":       # (checked before lists that long are built)
        edited = 1 if copy is not None else scenario.model.groups[group].repeat    # (one copy, split off)
        repeat = _copies(value, f"model.layers[{group}].repeat", scenario.model.num_layers - edited)

        def change(layers: list) -> None:
            at = split_copy(layers, group, copy)
            layers[at]["repeat"] = repeat
            _resize_profile(layers[at], repeat)
    else:
        def change(layers: list) -> None:
            layers[split_copy(layers, group, copy)][key] = value
    return _edit_layers(scenario, change)


def _copies(value: object, field: str, others: int) -> int:
    """A count of copies of a layer (blocks), at most what MAX_LAYERS leaves beside `others` layers."""
    most = max(MAX_LAYERS - others, 1)
    count = parse_int(value, field)
    if count > most:
        raise SpecError(field, value, f"must be at most {most:,}: the limit is {MAX_LAYERS:,} layers in all, "
                                      f"and the model has {others} other layers")
    return count


def split_copy(layers: list, group: int, copy: int | None) -> int:
    """Split layer dict `group` (repeated) so that copy `copy` stands alone; its index in `layers`.
    With copy None the group stays whole and `group` is returned."""
    layer = layers[group]
    repeat = layer.get("repeat", 1)
    if copy is None or repeat == 1:
        return group
    if not 0 <= copy < repeat:
        raise SpecError(f"model.layers[{group}] copy", copy, f"must be 0..{repeat - 1}")
    parts = []
    for start, count in ((0, copy), (copy, 1), (copy + 1, repeat - copy - 1)):
        if count:
            part = copy_module.deepcopy(layer)
            part["repeat"] = count
            for by_tp in part.get("profile", {}).values():
                for tp, times in by_tp.items():
                    if isinstance(times, list):
                        by_tp[tp] = times[start:start + count]
            parts.append(part)
    layers[group:group + 1] = parts
    return group + (1 if copy > 0 else 0)


def _resize_profile(layer: dict, repeat: int) -> None:
    for by_tp in layer.get("profile", {}).values():
        for tp, times in by_tp.items():
            if isinstance(times, list):
                mean = sum(times) / len(times)
                by_tp[tp] = (times + [mean] * repeat)[:repeat]


def duplicate_layer(scenario: Scenario, group: int, copy: int | None = None) -> Scenario:
    """A copy of layer group `group` after it, or of one copy of it (one layer more in total)."""
    def change(layers: list) -> None:
        at = split_copy(layers, group, copy)
        single = copy_module.deepcopy(layers[at])
        if copy is not None:
            single["repeat"] = 1
        layers.insert(at + 1, single)
    return _edit_layers(scenario, change)


def insert_layer(scenario: Scenario, group: int) -> Scenario:
    """A new empty layer after `group`, passing on that layer's output (edit its numbers next)."""
    def change(layers: list) -> None:
        layers.insert(group + 1, {"name": "layer", "kind": "other", "params": 0.0, "flops": 0.0,
                                  "activation_bytes": 0.0, "output_bytes": layers[group]["output_bytes"]})
    return _edit_layers(scenario, change)


def delete_layer(scenario: Scenario, group: int) -> Scenario:
    if len(scenario.model.groups) == 1:
        raise SpecError("model.layers", 1, "the last layer cannot be deleted")

    def change(layers: list) -> None:
        del layers[group]
    return _edit_layers(scenario, change)


# -- training and search options ----------------------------------------------------------------

def set_training_field(scenario: Scenario, key: str, value: object) -> Scenario:
    def change(data: dict) -> None:
        data["training"][key] = value
    return apply(scenario, change)


def set_search_field(scenario: Scenario, key: str, value: object) -> Scenario:
    def change(data: dict) -> None:
        data["search"][key] = value
    return apply(scenario, change)



def set_node_group(scenario: Scenario, index: int, fields: dict) -> Scenario:
    """Replace node group `index` wholesale (e.g. another instance type, keeping the count)."""
    def change(data: dict) -> None:
        data["cluster"]["nodes"][index] = dict(fields)
    return apply(scenario, change)


# -- names --------------------------------------------------------------------------------------

def cluster_name(nodes) -> str:
    """'3x-p3.8xlarge+1x-g4dn.12xlarge': what the cluster is, as the cluster presets name themselves."""
    return "+".join(f"{group.count}x-{group.label}" for group in nodes)


def follow_names(old: Scenario, new: Scenario) -> Scenario:
    """After an edit of the cluster or the model, names and descriptions that described the old one
    (a preset's) would mislabel plan files, export headers and saved scenarios: derive new ones.
    A name the edit itself changed is kept."""
    cluster, model = new.cluster, new.model
    if cluster.nodes != old.cluster.nodes and cluster.name == old.cluster.name:
        cluster = replace(cluster, name=cluster_name(cluster.nodes), description="")
    if model != old.model and model.name == old.model.name:
        name = model.name if model.name.endswith("-edited") else f"{model.name}-edited"
        model = replace(model, name=name, description="")
    if cluster is new.cluster and model is new.model:
        return new
    name = new.name if new.name != old.name else f"{cluster.name}-{model.name}"
    return replace(new, name=name, description="", cluster=cluster, model=model)


# -- plausibility -------------------------------------------------------------------------------

# Beyond these a bandwidth is almost surely a typo (NVLink 5 is 14.4 Tbps per GPU; 100 Mbps is a slow office link).
MAX_PLAUSIBLE_BANDWIDTH = 20e12 / 8
MIN_PLAUSIBLE_BANDWIDTH = 100e6 / 8
# ... and a model or batch past these (the widest trained models are near 25,000; the largest batches
# near 16 million tokens).
MAX_PLAUSIBLE_HIDDEN = 65536
MAX_PLAUSIBLE_BATCH_TOKENS = 1e9


def plausibility_warning(scenario: Scenario, before: Scenario | None = None) -> str:
    """Valid but probably not meant: a warning the edit dialog shows once before applying, or ''.
    With `before`, only what the edit brought in (an old oddity is not repeated at every edit)."""
    old = set(_implausible(before)) if before is not None else set()
    return next((warning for warning in _implausible(scenario) if warning not in old), "")


def _implausible(scenario: Scenario) -> list[str]:
    from amp_tui.core.base.units import format_bandwidth
    from amp_tui.core.search.search import divisors

    out = []
    for index, group in enumerate(scenario.cluster.nodes):
        for what, value in (("intra-node", group.intra_node_bandwidth), ("network", group.inter_node_bandwidth)):
            if not MIN_PLAUSIBLE_BANDWIDTH <= value <= MAX_PLAUSIBLE_BANDWIDTH:
                out.append(f"Implausible {what} bandwidth for node group {index}: {format_bandwidth(value)} "
                               f"(real links run from {format_bandwidth(MIN_PLAUSIBLE_BANDWIDTH)} to "
                               f"{format_bandwidth(MAX_PLAUSIBLE_BANDWIDTH)}).")
    hidden = scenario.model.shape.get("hidden_size")
    if isinstance(hidden, int) and hidden > MAX_PLAUSIBLE_HIDDEN:
        out.append(f"Implausible hidden size {hidden:,}: the widest models trained are near 25,000 "
                   f"(above {MAX_PLAUSIBLE_HIDDEN:,} is almost surely a typo).")
    gpus, batch = scenario.cluster.num_gpus, scenario.training.global_batch_size
    tokens = batch * scenario.model.sequence_length
    if tokens > MAX_PLAUSIBLE_BATCH_TOKENS:
        out.append(f"Implausible global batch {batch:,}: {tokens:,.0f} tokens per step, where the largest runs use "
                   f"about 16 million (above {MAX_PLAUSIBLE_BATCH_TOKENS:,.0f} is almost surely a typo).")
    dp = max(d for d in divisors(gpus) if batch % d == 0)
    if gpus > 1 and dp == 1:
        out.append(f"Implausible global batch {batch} for {gpus} GPUs: dp must divide it, so only dp = 1 "
                   f"(no data parallelism) is possible; a multiple of 2, 4 or 8 lets dp grow.")
    return out
