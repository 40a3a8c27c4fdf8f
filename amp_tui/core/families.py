"""Model families: build the layer list from hyperparameters.

Sizes follow Megatron-LM (Narayanan et al. 2021) and Korthikanti et al. 2022 ("Reducing activation
recomputation"): per sample, s tokens, hidden h, FFN width f, a heads, vocabulary V, and e bytes per
element (2 for fp16/bf16). Activation constants are for 16-bit training with 1-byte dropout masks;
fp32 doubles them. The loss needs three fp32 s x V buffers at its peak (the logits cast to fp32,
their softmax, and the fp32 gradient), as Megatron's vocab-parallel cross-entropy does.
"""

from __future__ import annotations

from amp_tui.core.errors import SpecError
from amp_tui.core.model import Layer
from amp_tui.core.units import parse_int

FAMILIES = ("gpt", "llama", "bert")

_COMMON = ("hidden_size", "num_layers", "num_heads", "sequence_length", "vocab_size")
_OPTIONAL = {"ffn_hidden_size", "num_kv_heads", "flash_attention", "name", "description", "family"}


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
    hkv = h * kv // a
    gated = family == "llama"
    scale = e / 2  # activation constants are for 16-bit training

    attn_params = 2 * h * h + 2 * h * hkv + (0 if gated else 2 * h + 2 * hkv)
    mlp_params = (3 * h * f) if gated else (2 * h * f + f + h)
    norm_params = 2 * h if gated else 4 * h
    block_params = attn_params + mlp_params + norm_params
    matmul_params = 2 * h * h + 2 * h * hkv + (3 if gated else 2) * h * f
    block_flops = 2 * s * matmul_params + 4 * s * s * h
    attn_scores = 0 if flash else 5 * a * s * s  # softmax input/output, dropout mask and output
    mlp_act = (2 * h + 8 * f) if gated else (3 * h + 4 * f)
    attn_act = 7 * h + 4 * hkv
    block_act = s * (attn_act + mlp_act + 4 * h) + attn_scores
    replicated = 10 * s * h
    block = Layer(
        name="block", kind="block", repeat=n, params=block_params, flops=block_flops,
        activation_bytes=block_act * scale, activation_replicated_bytes=replicated * scale,
        output_bytes=s * h * e, tp_comm_bytes=2 * s * h * e, tokens=s, width=h,
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
        output_bytes=4 * s, workspace_bytes=12 * s * v, tokens=s, width=h,
    )
    return shape, (embedding, block, head)


def _llama_ffn(h: int) -> int:
    """LLaMA's SwiGLU width: 2/3 of 4h, rounded up to a multiple of 256."""
    return ((int(8 * h / 3) + 255) // 256) * 256
