"""Model families: build the layer list from hyperparameters.

Sizes follow Megatron-LM (Narayanan et al. 2021) and Korthikanti et al. 2022 ("Reducing activation
recomputation"): per sample, s tokens, hidden h, FFN width f, a heads, vocabulary V, and e bytes per
element (2 for fp16/bf16). Activation constants are for 16-bit training with 1-byte dropout masks;
fp32 doubles them. The loss needs three fp32 s x V buffers at its peak (the logits cast to fp32,
their softmax, and the fp32 gradient), as Megatron's vocab-parallel cross-entropy does.

A mixture-of-experts model (`num_experts`, `top_k`, optionally `expert_ffn_hidden_size`) replaces each
block's MLP by num_experts expert MLPs and a router: parameters count every expert, FLOPs and
activations the top_k experts each token goes to, and each token's hidden state is sent to its top_k
experts and back (all-to-all dispatch and combine) under expert parallelism.
"""

from __future__ import annotations

import math
from dataclasses import replace

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import parse_int
from amp_tui.core.spec.layers import LAYER_NUMBERS, LOSS_WORKSPACE_PER_LOGIT, Layer

FAMILIES = ("gpt", "llama", "bert")

_COMMON = ("hidden_size", "num_layers", "num_heads", "sequence_length", "vocab_size")
_OPTIONAL = {"ffn_hidden_size", "num_kv_heads", "flash_attention", "rope_theta", "name", "description", "family",
             "num_experts", "top_k", "expert_ffn_hidden_size"}
# What sets a family model's layer shapes: the keys an override of a layer list that follows a
# family may change (model.py; a list that follows none refuses them).
SHAPE_KEYS = (*_COMMON, "ffn_hidden_size", "num_kv_heads", "flash_attention", "num_experts", "top_k",
              "expert_ffn_hidden_size")


def build_family(family: str, spec: dict, e: int, field: str) -> tuple[dict, tuple[Layer, ...]]:
    """Return (shape, layer groups) for a family model given as a spec mapping."""
    for key in spec:
        if key not in _COMMON and key not in _OPTIONAL:
            raise SpecError(f"{field}.{key}", spec[key],
                            f"unknown {family} hyperparameter; allowed: {', '.join(sorted(set(_COMMON) | _OPTIONAL - {'name', 'description', 'family'}))}")
    for key in _COMMON:
        if key not in spec:
            raise SpecError(f"{field}.{key}", None, f"required for the {family} family")
    h, n, a, s, v = (parse_int(spec[key], f"{field}.{key}") for key in _COMMON)
    if h % a:
        raise SpecError(f"{field}.num_heads", a, f"must divide hidden_size ({h})")
    default_ffn = _llama_ffn(h) if family == "llama" else 4 * h
    f = parse_int(spec.get("ffn_hidden_size", default_ffn), f"{field}.ffn_hidden_size")
    kv = parse_int(spec.get("num_kv_heads", a), f"{field}.num_kv_heads")
    if a % kv:
        raise SpecError(f"{field}.num_kv_heads", kv, f"must divide num_heads ({a})")
    flash = spec.get("flash_attention", family == "llama")
    if not isinstance(flash, bool):
        raise SpecError(f"{field}.flash_attention", flash, "expected true or false")
    shape = {"hidden_size": h, "num_layers": n, "num_heads": a, "sequence_length": s, "vocab_size": v,
             "ffn_hidden_size": f, "flash_attention": flash}
    if family == "llama":
        shape["num_kv_heads"] = kv
        if "rope_theta" in spec:    # the rotary base (Llama 3: 500000); costs nothing, exports write it
            shape["rope_theta"] = parse_int(spec["rope_theta"], f"{field}.rope_theta")
    elif "rope_theta" in spec:
        raise SpecError(f"{field}.rope_theta", spec["rope_theta"], f"the {family} family has no rotary embeddings")
    experts, top_k, fe = _experts(spec, f, field)
    if experts:
        shape.update(num_experts=experts, top_k=top_k, expert_ffn_hidden_size=fe)
    hkv = h * kv // a
    gated = family == "llama"
    scale = e / 2  # activation constants are for 16-bit training

    attn_params = 2 * h * h + 2 * h * hkv + (0 if gated else 2 * h + 2 * hkv)
    norm_params = 2 * h if gated else 4 * h
    attn_matmul = 2 * h * h + 2 * h * hkv
    if experts:
        # Every expert's weights and the router (h x experts); each token runs top_k experts.
        expert_params = experts * ((3 * h * fe) if gated else (2 * h * fe + fe + h))
        mlp_params = expert_params + h * experts
        matmul_params = attn_matmul + top_k * (3 if gated else 2) * h * fe + h * experts
        # top_k copies of an expert MLP's activations, plus the router's fp32 probabilities.
        mlp_act = top_k * ((2 * h + 8 * fe) if gated else (3 * h + 4 * fe)) + 2 * experts
        alltoall = 2 * s * top_k * h * e   # dispatch and combine: each token's state to top_k experts and back
    else:
        expert_params = alltoall = 0
        mlp_params = (3 * h * f) if gated else (2 * h * f + f + h)
        matmul_params = attn_matmul + (3 if gated else 2) * h * f
        mlp_act = (2 * h + 8 * f) if gated else (3 * h + 4 * f)
    block_params = attn_params + mlp_params + norm_params
    block_flops = 2 * s * matmul_params + 4 * s * s * h
    attn_scores = 0 if flash else 5 * a * s * s  # softmax input/output, dropout mask and output
    attn_act = 7 * h + 4 * hkv
    block_act = s * (attn_act + mlp_act + 4 * h) + attn_scores
    replicated = 10 * s * h
    block = Layer(
        name="block", kind="block", repeat=n, params=block_params, flops=block_flops,
        activation_bytes=block_act * scale, activation_replicated_bytes=replicated * scale,
        output_bytes=s * h * e, tp_comm_bytes=2 * s * h * e, tokens=s, width=h,
        experts=experts, expert_params=expert_params, moe_alltoall_bytes=alltoall,
    )
    position = 0 if gated else s * h  # LLaMA uses rotary embeddings
    embedding = Layer(
        name="embedding", kind="embedding", params=v * h + position, flops=2 * s * h,
        activation_bytes=s * h * scale, output_bytes=s * h * e, tp_comm_bytes=s * h * e, tokens=s, width=h,
    )
    head_name = "mlm_head" if family == "bert" else "lm_head"
    transform = family == "bert"  # BERT's dense h x h transform before the decoder
    head = Layer(
        name=head_name, kind="head", params=v * h + 2 * h + (h * h + h if transform else 0),
        flops=2 * s * h * v + (2 * s * h * h if transform else 0),
        activation_bytes=(2 * s * h + 2 * s * v) * scale, activation_replicated_bytes=2 * s * h * scale,
        output_bytes=4 * s, workspace_bytes=LOSS_WORKSPACE_PER_LOGIT * s * v, tokens=s, width=h,
    )
    return shape, (embedding, block, head)


def _experts(spec: dict, ffn: int, field: str) -> tuple[int, int, int]:
    """(num_experts, top_k, expert FFN width), or zeros for a dense model."""
    if "num_experts" not in spec:
        for key in ("top_k", "expert_ffn_hidden_size"):
            if key in spec:
                raise SpecError(f"{field}.{key}", spec[key], "only with num_experts (a mixture-of-experts model)")
        return 0, 0, 0
    experts = parse_int(spec["num_experts"], f"{field}.num_experts")
    if "top_k" not in spec:
        raise SpecError(f"{field}.top_k", None, "required with num_experts (experts each token is routed to)")
    top_k = parse_int(spec["top_k"], f"{field}.top_k")
    if top_k > experts:
        raise SpecError(f"{field}.top_k", top_k, f"cannot exceed num_experts ({experts})")
    return experts, top_k, parse_int(spec.get("expert_ffn_hidden_size", ffn), f"{field}.expert_ffn_hidden_size")


def _llama_ffn(h: int) -> int:
    """LLaMA's SwiGLU width: 2/3 of 4h, rounded up to a multiple of 256."""
    return ((int(8 * h / 3) + 255) // 256) * 256


def follow_family(groups: tuple[Layer, ...], old: dict, new: dict, family: str, e: int, field: str,
                  origin: str) -> tuple[tuple[Layer, ...], str, bool]:
    """A layer list whose layers are `family`'s at shape `old` (`shape_family:`, AMP's gpt2-medium),
    at shape `new` instead: where only num_layers changes, its one block repeated num_layers times
    (the measured copies' times kept, new copies taking their mean); otherwise the family's layers
    at `new`, a layer's measured times (`origin`'s) kept only where its shape is unchanged.
    Returns the layer groups, what was done in one sentence, and whether they are the family's."""
    changed = [key for key in new if new[key] != old.get(key)]
    blocks = [i for i, group in enumerate(groups) if group.kind == "block"]
    if changed == ["num_layers"] and len(blocks) == 1:
        block, count = groups[blocks[0]], new["num_layers"]
        note = f"num_layers {count} (was {block.repeat}): the block repeated {count} times"
        if any(isinstance(times, tuple) for by_tp in block.profile.values() for times in by_tp.values()):
            note += (f"; its {block.repeat} measured copies' times kept, copies {block.repeat + 1}-{count} take "
                     "their mean" if count > block.repeat else f"; the times of its first {count} measured copies kept")
        resized = replace(block, repeat=count, profile=_repeat_times(block.profile, count))
        return (*groups[:blocks[0]], resized, *groups[blocks[0] + 1:]), note, False
    _, built = build_family(family, {key: new[key] for key in SHAPE_KEYS if key in new}, e, field)
    out, kept = [], []
    for layer in built:
        match = next((group for group in groups if group.profile and _same_shape(group, layer)), None)
        if match is not None:
            layer = replace(layer, profile=_repeat_times(match.profile, layer.repeat))
            kept.append(_named(layer))
        out.append(layer)
    dropped = list(dict.fromkeys(_named(group) for group in groups
                                 if group.profile and not any(_same_shape(group, layer) for layer in built)))
    gpus = ", ".join(dict.fromkeys(gpu for group in groups for gpu in group.profile))
    what = ", ".join(f"{key} {new[key]} (was {old.get(key, 'unstated')})" for key in changed)
    note = f"rebuilt from the {family} family's shapes at {what}"
    if dropped:
        note += (f": measured times ({origin}: {gpus}) dropped where the shapes changed, on "
                 f"{'every measured layer' if not kept else ', '.join(dropped)}")
    if kept:
        note += f"; kept on {', '.join(kept)} (shape unchanged)"
    elif dropped:
        note += "; every layer is priced by the analytic model"
    return tuple(out), note, True


def _named(layer: Layer) -> str:
    return layer.name + (f" x{layer.repeat}" if layer.repeat > 1 else "")


def _same_shape(a: Layer, b: Layer) -> bool:
    """The same layer at the same size: what a measured time was measured on."""
    return a.name == b.name and a.kind == b.kind and all(
        math.isclose(getattr(a, key), getattr(b, key), rel_tol=1e-9) for key in LAYER_NUMBERS)


def _repeat_times(profile: dict, repeat: int) -> dict:
    """Measured times per copy for `repeat` copies: the first ones kept, new copies the mean."""
    out: dict = {}
    for gpu, by_tp in profile.items():
        out[gpu] = {}
        for tp, times in by_tp.items():
            if isinstance(times, tuple):
                mean = sum(times) / len(times)
                times = (times + (mean,) * repeat)[:repeat]
            out[gpu][tp] = times
    return out
