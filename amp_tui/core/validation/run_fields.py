"""What users write in a runs file: the field names other tools and papers use, read as the
published runs' schema, and the defaults a silent field gets (each one noted on the run).

`normalized(run, notes)` returns a copy of the run with every section's fields under the names the
replay reads (`model.hidden`, `training.tp`, `measured.iteration_time_s`, ...): Hugging Face's
config names (`n_embd`, `num_attention_heads`, `intermediate_size`, ...), Megatron's argument names
(`tensor_model_parallel_size`, `micro_batch_size`, ...) and the amp-tui scenario's own. Where a
model leaves out its vocabulary, heads, FFN width or sequence length, the family's default is
used and said; a missing data-parallel degree is what the GPUs leave, a missing global batch the
micro-batches one step runs.
"""

from __future__ import annotations

import re

from amp_tui.core.base.errors import SpecError

_MODEL = {"hidden": ("hidden", "hidden_size", "d_model", "n_embd", "dim", "model_dim"),
          "layers": ("layers", "num_layers", "n_layer", "n_layers", "num_hidden_layers", "depth"),
          "heads": ("heads", "num_heads", "n_head", "n_heads", "num_attention_heads"),
          "kv_heads": ("kv_heads", "num_kv_heads", "n_kv_heads", "num_key_value_heads", "num_query_groups"),
          "ffn": ("ffn", "ffn_hidden_size", "intermediate_size", "n_inner", "ffn_dim", "mlp_dim"),
          "seq_len": ("seq_len", "sequence_length", "seq_length", "seq", "max_seq_len", "context_length",
                      "n_positions", "max_position_embeddings", "block_size"),
          "vocab": ("vocab", "vocab_size", "n_vocab", "padded_vocab_size")}
_TRAINING = {"tp": ("tp", "tensor_parallel", "tensor_model_parallel_size", "tp_size", "mp", "model_parallel"),
             "pp": ("pp", "pipeline_parallel", "pipeline_model_parallel_size", "pp_size"),
             "dp": ("dp", "data_parallel", "data_parallel_size", "dp_size"),
             "cp": ("cp", "context_parallel", "context_parallel_size"),
             "ep": ("ep", "expert_parallel", "expert_model_parallel_size"),
             "micro_batch": ("micro_batch", "micro_batch_size", "mbs", "per_device_train_batch_size",
                             "per_device_batch_size", "batch_size_per_gpu", "local_batch_size"),
             "global_batch": ("global_batch", "global_batch_size", "gbs", "train_batch_size", "batch_size"),
             "grad_accum": ("grad_accum", "gradient_accumulation_steps", "accumulation_steps"),
             "zero": ("zero", "zero_stage", "sharding", "fsdp_sharding_strategy"),
             "recompute": ("recompute", "activation_checkpointing", "gradient_checkpointing",
                           "recompute_granularity", "checkpointing"),
             "tf32": ("tf32", "allow_tf32"),
             "grad_reduce_in_fp32": ("grad_reduce_in_fp32", "accumulate_allreduce_grads_in_fp32")}
_CLUSTER = {"gpu": ("gpu", "gpu_type", "device", "accelerator"),
            "num_gpus": ("num_gpus", "gpus", "world_size", "total_gpus", "n_gpus"),
            "gpus_per_node": ("gpus_per_node", "gpus_per_host", "devices_per_node"),
            "intra_node": ("intra_node", "intra_node_link", "interconnect", "intra_node_bandwidth"),
            "inter_node": ("inter_node", "network", "inter_node_link", "inter_node_bandwidth", "fabric")}
_MEASURED = {"iteration_time_s": ("iteration_time_s", "step_time_s", "time_per_iteration_s", "iteration_time",
                                  "step_time", "time_per_step_s"),
             "iteration_time_ms": ("iteration_time_ms", "step_time_ms", "time_per_iteration_ms"),
             "samples_per_s": ("samples_per_s", "samples_per_second", "throughput_samples_per_s"),
             "tokens_per_s": ("tokens_per_s", "tokens_per_second", "throughput_tokens_per_s"),
             "peak_mem_gb": ("peak_mem_gb", "peak_memory_gb", "peak_mem_gib", "max_memory_allocated_gb",
                             "max_memory_reserved_gb", "memory_gb"),
             "oom": ("oom", "out_of_memory")}

# Family defaults where a model leaves them out: GPT-2's byte-pair vocabulary, LLaMA 2's, BERT's
# WordPiece; GPT-3's and LLaMA's 128-wide heads (GPT-2's 64 where the width is under 2048).
FAMILY_VOCAB = {"gpt": 50257, "llama": 32000, "bert": 30522}
DEFAULT_SEQ_LEN = 2048
_LLAMA_LIKE = re.compile(r"llama|mistral|mixtral|qwen|gemma|yi-|deepseek|internlm|baichuan|olmo", re.IGNORECASE)


def model_family(name: str) -> str:
    if "bert" in name.lower():
        return "bert"
    return "llama" if _LLAMA_LIKE.search(name) else "gpt"


def _canonical(section: dict, aliases: dict[str, tuple[str, ...]]) -> dict:
    out = dict(section)
    for key, names in aliases.items():
        if out.get(key) is None:
            value = next((section[n] for n in names if section.get(n) is not None), None)
            if value is not None:
                out[key] = value
    return out


def _number(value, kilo: int = 1000):
    """'32,000', '50k', 4096.0 as whole numbers (a 'k' is `kilo`: 1024 for sequence lengths,
    '8k' being 8192); anything else as given."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip().lower().replace(",", "").replace("_", "")
        if match := re.fullmatch(r"(\d+(?:\.\d+)?)\s*k", text):
            return int(float(match.group(1)) * kilo)
        if re.fullmatch(r"\d+", text):
            return int(text)
    return value


def normalized(run: dict, notes: list[str]) -> dict:
    """The run with every section's fields under the replay's names and the defaults noted."""
    if not isinstance(run, dict):
        raise SpecError("run", run, "expected a mapping (id, model, cluster, training, measured)")
    sections = {}
    for name, aliases in (("model", _MODEL), ("training", _TRAINING), ("cluster", _CLUSTER), ("measured", _MEASURED)):
        section = run.get(name) or {}
        if not isinstance(section, dict):
            raise SpecError(name, section, "expected a mapping")
        sections[name] = _canonical(section, aliases)
    model, training, cluster, measured = (sections[k] for k in ("model", "training", "cluster", "measured"))
    for key in ("hidden", "layers", "heads", "kv_heads", "ffn", "seq_len"):
        if model.get(key) is not None:
            model[key] = _number(model[key], 1024 if key == "seq_len" else 1000)
    for key in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "grad_accum"):
        if training.get(key) is not None and not isinstance(training[key], list):
            training[key] = _number(training[key])
    if cluster.get("num_gpus") is not None:
        cluster["num_gpus"] = _number(cluster["num_gpus"])
    _model_defaults(model, notes)
    _degrees(training, cluster, notes)
    if measured.get("iteration_time_s") is None and isinstance(measured.get("iteration_time_ms"), (int, float)):
        measured["iteration_time_s"] = measured["iteration_time_ms"] / 1000.0
    return {**run, **sections}


def _model_defaults(model: dict, notes: list[str]) -> None:
    family = model_family(str(model.get("name") or ""))
    vocab = model.get("vocab")
    if vocab is None or (isinstance(vocab, str) and re.search(r"not stated|unknown|n/?a", vocab, re.I)):
        model["vocab"] = FAMILY_VOCAB[family]
        notes.append(f"vocabulary not stated: the {family} family's {FAMILY_VOCAB[family]:,}")
    elif isinstance(_number(vocab), int):
        model["vocab"] = _number(vocab)
    hidden = model.get("hidden")
    if model.get("heads") is None and isinstance(hidden, int) and hidden > 0:
        width = 64 if family != "llama" and hidden < 2048 else 128
        model["heads"] = max(hidden // width, 1)
        notes.append(f"attention heads not stated: {model['heads']} of width {width}")
    if model.get("seq_len") is None:
        model["seq_len"] = DEFAULT_SEQ_LEN
        notes.append(f"sequence length not stated: {DEFAULT_SEQ_LEN} assumed")


def _degrees(training: dict, cluster: dict, notes: list[str]) -> None:
    """A missing dp is what the GPUs leave after tp, pp and cp; a missing GPU count the degrees'
    product; a missing global batch one step's micro-batches (grad_accum of them per replica)."""
    plain = all(not isinstance(training.get(k), list) for k in ("tp", "dp"))
    tp, pp, cp = (training.get(k) or 1 for k in ("tp", "pp", "cp"))
    gpus = cluster.get("num_gpus")
    if plain and all(isinstance(v, int) and v > 0 for v in (tp, pp, cp)):
        if training.get("dp") is None and isinstance(gpus, int) and gpus % (tp * pp * cp) == 0:
            training["dp"] = gpus // (tp * pp * cp)
            if training["dp"] > 1:
                notes.append(f"dp not stated: {training['dp']}, what the {gpus} GPUs leave")
        if gpus is None and isinstance(training.get("dp"), int):
            cluster["num_gpus"] = tp * pp * cp * training["dp"]
            notes.append(f"GPU count not stated: {cluster['num_gpus']}, the degrees' product")
    mbs, dp, accum = training.get("micro_batch"), training.get("dp"), training.get("grad_accum")
    if training.get("global_batch") is None and isinstance(mbs, int) and isinstance(dp, int) \
            and (isinstance(accum, int) or pp == 1):
        training["global_batch"] = mbs * dp * (accum if isinstance(accum, int) else 1)
        notes.append(f"global batch not stated: {training['global_batch']}, micro-batch x dp"
                     + (" x gradient accumulation" if isinstance(accum, int) else " (no accumulation)"))
