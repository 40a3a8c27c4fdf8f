"""A measured run's training as its source labels it: framework, precision, recomputation, ZeRO
stage, attention kernel, fused loss and tensor-parallel overlap read from free text, and the model's
shape. Each assumption made where a label is silent goes into the run's notes.
"""

from __future__ import annotations

import re

from amp_tui.core.base.errors import SpecError
from amp_tui.core.spec.scenario import AUTO


# Plain PyTorch as most teams below a few hundred GPUs run it: Hugging Face model code (transformers,
# accelerate, the Trainer), Lightning, or a hand-written loop under DDP or FSDP, eager.
_PLAIN_PYTORCH = re.compile(r"hugging ?face|\bhf\b|transformers|accelerate|lightning|\bddp\b|"
                            r"distributeddataparallel|plain pytorch|pytorch|\btorch\b|timm|nanogpt")


def read_framework(label, notes: list[str] | None = None) -> str:
    """Which stack the run's trainer is (frameworks.FRAMEWORKS): the engine that holds and reduces
    the gradients (DeepSpeed's when it is named beside Megatron-LM's model code), whose kernels
    run, and the year of its software: torchtitan and llm-foundry's Composer are FSDP trainers
    with their own model code; Hugging Face, accelerate, Lightning or a plain loop under DDP or
    FSDP is plain PyTorch; Megatron-LM and DeepSpeed runs dated 2020 ("Megatron-LM 1.x", AMP's
    DeepSpeed pipeline engine on Megatron's GPT-2) or 2021-2022 ("Megatron-DeepSpeed", "Megatron-LM
    (2021)") take those years' stacks. Unstated: Megatron-LM's conventions, said in the notes."""
    text = str(label or "").lower()
    if "torchtitan" in text or "composer" in text or "foundry" in text:
        return "fsdp"
    year = _stack_year(text)
    if "deepspeed" in text:
        if year is None and ("megatron-deepspeed" in text or "megatron deepspeed" in text):
            year = 2022
        return _dated("deepspeed", year, label, notes)
    if "megatron" in text or "nemo" in text:
        if "nemo" in text or "megatron-core" in text or "mcore" in text or "bridge" in text:
            return "megatron"
        return _dated("megatron", year, label, notes)
    if _PLAIN_PYTORCH.search(text) or "fsdp" in text:
        return "pytorch"
    if notes is not None:
        notes.append(f"framework {label!r}: Megatron-LM's conventions" if text else
                     "framework not stated: Megatron-LM's conventions")
    return "megatron"


# Megatron-LM 1.x (2020: apex, PyTorch 1.5-1.7), 2.x-3.x (2021-2022); DeepSpeed 0.3 (2020), 0.4-0.7
# (2021-2022); AMP's "DeepSpeed pipeline engine on Megatron GPT-2" is the 2020 stack (its code's
# Megatron-LM-v1.1.5-3D_parallelism).
_VERSION_YEARS = ((r"megatron[- ]lm[ -]?v?1\.|v1\.1\.5|megatron[- ]lm 1\b", 2020),
                  (r"megatron[- ]lm[ -]?v?[23]\.|megatron[- ]lm [23]\b", 2022),
                  (r"deepspeed[ -]?v?0\.[0-3]\b", 2020), (r"deepspeed[ -]?v?0\.[4-7]\b", 2022),
                  (r"deepspeed pipeline engine on megatron", 2020))


def _stack_year(text: str) -> int | None:
    for pattern, year in _VERSION_YEARS:
        if re.search(pattern, text):
            return year
    years = [int(y) for y in re.findall(r"\b(20[12]\d)\b", text)]
    return min(years) if years else None


def _dated(engine: str, year: int | None, label, notes: list[str] | None) -> str:
    """The engine's stack of that year: 2020 and before, 2021-2022, else today's."""
    if year is None or year >= 2023:
        return engine
    key = f"{engine}-{2020 if year <= 2020 else 2022}"
    if notes is not None:
        notes.append(f"framework {label!r}: the {key} stack")
    return key


_NO_COMPILE = re.compile(r"\b(no|without|w/o|eager)\b[^,;)]*compile|compile\s*[:=]\s*(false|no|off)")


def read_compile(run: dict, notes: list[str]) -> bool | str:
    """torch.compile as the run states it: `training.compile` (true, false or cudagraphs), or
    "torch.compile" / "compiled" in its framework, notes or quoted row; CUDA graphs (mode
    "reduce-overhead") where those are named beside it."""
    training = run.get("training") or {}
    stated = training.get("compile")
    if isinstance(stated, bool):
        return stated
    text = " ".join(str(x) for x in (training.get("framework"), training.get("notes"), stated,
                                     (run.get("source") or {}).get("quote"))).lower()
    if _NO_COMPILE.search(text) or not re.search(r"compile", text):
        return False
    mode: bool | str = "cudagraphs" if re.search(r"cuda ?graph|reduce-overhead", text) else True
    notes.append("torch.compile" + (" with CUDA graphs" if mode == "cudagraphs" else "") + ": as the run says")
    return mode


def read_precision(label, notes: list[str] | None = None) -> str:
    text = str(label or "").lower()
    if "fp4" in text:
        return "fp4"
    if "fp8" in text or "float8" in text:
        return "fp8"
    if "bf16" in text or "bfloat16" in text:
        return "bf16"
    tf32 = tf32_said(text)
    if tf32 is not None and "16" not in text:
        return "tf32" if tf32 else "fp32"
    if re.search(r"fp32|float32|full precision", text) and "16" not in text:
        return "fp32"
    if notes is not None and not re.search(r"fp16|float16|16|mixed|amp|half", text):
        notes.append(f"precision {label!r}: fp16 mixed precision assumed" if text else
                     "precision not stated: fp16 mixed precision assumed")
    return "fp16"   # "mixed", "mixed fp16", "amp", "16-mixed": fp16 mixed precision


def tf32_said(text: str) -> bool | None:
    """What a label says of TF32: on ('TF32 matmuls', 'tf32'), off ('TF32 off', 'no TF32'), or nothing."""
    if not re.search(r"tf32|tensorfloat", text):
        return None
    return not re.search(r"\b(no|without|disabled?)\W+(tf32|tensorfloat)|(tf32|tensorfloat)\W+(off|disabled)\b", text)


def read_tf32(precision: str, training: dict, framework: str, notes: list[str]) -> str:
    """fp32 as the run ran it: with TF32 matrix multiplies where it says so (`tf32: true` beside
    `precision: fp32`, or TF32 in its notes), or where it says nothing and its stack turns TF32 on
    (frameworks.FrameworkProfile.tf32); `tf32: false` keeps plain fp32."""
    from amp_tui.core.spec.frameworks import PROFILES

    if precision != "fp32":
        return precision
    stated = training.get("tf32")
    if isinstance(stated, bool):
        return "tf32" if stated else "fp32"
    said = tf32_said(" ".join(str(training.get(k) or "") for k in ("precision", "notes", "framework")).lower())
    if said is not None:
        return "tf32" if said else "fp32"
    if PROFILES[framework].tf32:
        notes.append(f"fp32 under {framework}: TF32 matrix multiplies, the stack's default")
        return "tf32"
    return "fp32"


def read_recompute(label, notes: list[str]) -> str:
    if isinstance(label, bool):           # activation_checkpointing: true / false
        return "full" if label else "none"
    text = str(label or "").lower().strip()
    if text.startswith("selective") or "(selective)" in text:
        return "selective"
    if text.startswith("full") or text in ("yes", "true", "on", "enabled", "block", "uniform") \
            or re.search(r"(activation|gradient) checkpointing|checkpoint", text) and not re.match(r"no\b", text):
        return "full"
    if text in ("no", "false", "off", "disabled", "0") or text.startswith("none"):
        return "none"
    # A recipe that does not say is tuned to fit: replay takes the fastest kind that fits.
    notes.append(f"recomputation {label or 'not stated'}: the fastest of none, selective and full that fits")
    return AUTO


def read_attention_kernel(source: str, notes: list[str], framework: str = "") -> str:
    """llm-foundry's MPT runs attention through the flash-attn 2 package (`attn_impl: flash`, or
    Triton's flash attention for ALiBi); NeMo and Megatron-LM use Transformer Engine's fused
    attention, torchtitan PyTorch's SDPA (cuDNN's kernel on Hopper); Hugging Face models call SDPA,
    whose flash backend is FlashAttention-2's kernel."""
    if source == "llmfoundry":
        notes.append("attention: llm-foundry's FlashAttention-2 kernels")
        return "flash2"
    if framework == "pytorch":
        notes.append("attention: PyTorch SDPA's flash backend (FlashAttention-2)")
        return "flash2"
    return "fused"


def read_fused_loss(source: str, notes: list[str]) -> bool:
    """llm-foundry's MPT computes its loss with flash-attn's fused cross-entropy (its `loss_fn`
    default, `fused_crossentropy`), which writes the gradient into the logits in place."""
    if source == "llmfoundry":
        notes.append("loss: llm-foundry's default fused cross-entropy")
        return True
    return False


def read_grad_reduce_in_fp32(run: dict, source: str, notes: list[str]) -> bool | None:
    """Whether 16-bit gradients are accumulated and reduced in fp32: as the run states it
    (`grad_reduce_in_fp32`, or "bf16 grad reduce" / "fp32 grad reduce" in its notes); NVIDIA's
    performance recipes, which NeMo's and Megatron-Bridge's published tables run, reduce in bf16
    (Megatron-Bridge perf_recipes/_common.py `_benchmark_common`: grad_reduce_in_fp32 = False);
    otherwise the engine's own default (None)."""
    training = run.get("training") or {}
    stated = training.get("grad_reduce_in_fp32")
    if isinstance(stated, bool):
        return stated
    text = str(training.get("notes") or "").lower()
    if re.search(r"(bf16|16-bit) (grad(ient)?s? )?reduc", text):
        return False
    if re.search(r"fp32 (grad(ient)?s? )?(reduc|accumulat)", text):
        return True
    if source == "nemo":
        notes.append("gradients reduced in bf16: NVIDIA's performance recipes (grad_reduce_in_fp32 false)")
        return False
    return None


def read_tp_comm_overlap(run: dict, tp: int) -> bool:
    """NeMo's recipes state TP communication overlap; torchtitan's async-TP rows say AsyncTP in
    their id, notes or quoted row."""
    text = " ".join(str(x) for x in ((run.get("training") or {}).get("notes"),
                                     (run.get("source") or {}).get("quote"))).lower()
    return tp > 1 and ("async_tp" in str(run.get("id")).lower()
                       or any(word in text for word in ("tp comm overlap", "asynctp", "async tp")))


def read_zero_stage(label) -> int:
    """ZeRO stage from a number, DeepSpeed's or FSDP's names ('ZeRO-2', 'stage 3', 'FULL_SHARD',
    'SHARD_GRAD_OP', 'HYBRID_SHARD') or Megatron's distributed optimizer (ZeRO-1)."""
    if isinstance(label, int) and not isinstance(label, bool) and 0 <= label <= 3:
        return label
    text = str(label or "").lower()
    if "no_shard" in text or "no shard" in text:
        return 0
    if "shard_grad_op" in text or "params kept after forward" in text:
        return 2
    if match := re.search(r"(?:zero|stage)[\s_-]*(?:stage)?[\s_-]*([0-3])\b", text):
        return int(match.group(1))
    if "fsdp" in text or "full_shard" in text or "hybrid_shard" in text:
        return 3
    if "distributed optimizer" in text:
        return 1
    return 0


def model_flops_per_token(model: dict) -> float:
    """Training model FLOPs per token as NeMo counts them: 3 passes x 2 FLOPs per multiply-add of the
    matrix multiplies, and attention's 12 l h s (causal masking not discounted)."""
    try:
        h, l, a, s = (int(model[k]) for k in ("hidden", "layers", "heads", "seq_len"))
        kv, f, v = int(model.get("kv_heads") or a), int(model["ffn"]), int(model["vocab"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    if min(h, l, a, s, kv, f, v) <= 0:
        return 0.0
    gated = "llama" in str(model.get("name", "")).lower()
    per_layer = 2 * h * h + 2 * h * (h * kv // a) + (3 if gated else 2) * h * f
    return 6.0 * (l * per_layer + v * h) + 12.0 * l * h * s


_FLASH_FREE_FRAMEWORKS = ("megatron-lm (2021", "megatron-lm (2022", "deepspeed pipeline")


_VOCAB_NAMES = {"gpt-2 bpe": 50257}


def model_spec(model: dict, training: dict, notes: list[str]) -> dict:
    from amp_tui.core.validation.run_fields import model_family

    name = str(model.get("name") or "model")
    family = model_family(name)
    vocab = model.get("vocab")
    if not isinstance(vocab, int):
        known = next((n for key, n in _VOCAB_NAMES.items() if key in str(vocab).lower()), None)
        if known is None:
            raise SpecError("model.vocab", vocab, "not a vocabulary size")
        notes.append(f"vocabulary {vocab!r}: {known}")
        vocab = known
    framework = str(training.get("framework") or "").lower()
    spec = {"family": family, "name": name, "hidden_size": model.get("hidden"), "num_layers": model.get("layers"),
            "num_heads": model.get("heads"), "sequence_length": model.get("seq_len"), "vocab_size": vocab,
            "flash_attention": not framework.startswith(_FLASH_FREE_FRAMEWORKS)}
    if model.get("kv_heads"):
        spec["num_kv_heads"] = model["kv_heads"]
    if model.get("ffn"):
        spec["ffn_hidden_size"] = model["ffn"]
    return spec
