"""torchtitan job config for a plan: FSDP or HSDP, TP, PP with its schedule and stage boundaries,
CP, EP, activation checkpointing and float8.

Written for torchtitan 0.3 (0.3.0 checked), which reads a Python config function, not TOML: its
ConfigManager imports `--module` (a module on the path) and calls its `--config` function, which
returns a Trainer.Config; torchtitan_job.py is such a module, starting from torchtitan's own config
for the model (llama3_8b for Llama 3 8B) and setting the plan's fields. Checked against its
config/configs.py, config/manager.py, trainer.py and distributed code:
- ParallelDims asserts dp_replicate x dp_shard x cp x tp x pp = world size. dp_shard > 1 is FSDP,
  dp_replicate > 1 with dp_shard = 1 is DDP, both > 1 is HSDP.
- training.global_batch_size = local_batch_size x dp_replicate x dp_shard x gradient accumulation
  steps (trainer.py); with pipelining, local_batch_size is cut into micro-batches of
  pipeline_parallel_microbatch_size, which must divide it (Trainer.Config).
- parallelism.module_fqns_per_model_part names each pipeline chunk's modules ("tok_embeddings",
  "layers.N", "norm", "lm_head" for llama3), so the plan's stage boundaries, even or not, carry
  over exactly; looped schedules (Interleaved1F1B) put chunk c on pipeline rank c mod pp.
- Tensor parallelism shards the sequence between blocks (enable_sequence_parallel, on by default).
- Async TP is compile.enable_async_tensor_parallel; activation checkpointing is a config object
  (SelectiveAC.Config, FullAC.Config) or None.
- float8 is a model converter (Float8LinearConverter.Config, recipes "rowwise" and
  "rowwise_with_gw_hp" only) passed to the model registry.
- The device mesh is ordered pp, dp_replicate, dp_shard, cp, tp (tp fastest), Megatron's order.
- Mixed precision comes through FSDP (or autocast under plain DDP or one device): under TP or PP
  without FSDP it trains in fp32 (TrainingConfig.mixed_precision_param). A ZeRO-0 plan with tp or
  pp > 1 is therefore written as FSDP over its data-parallel ranks and predicted again that way
  (`needs_fsdp`), or refused when it has no data parallelism to shard over.
"""

from __future__ import annotations

from amp_tui.core.base.errors import SpecError
from amp_tui.core.plans.exports.common import Export, num_micro_batches, python_string_text, summary
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.spec.knobs import Knobs, resolve

FILE = "torchtitan_job.py"
CONFIG_FUNCTION = "amp_tui_plan"
STEPS = 10000   # torchtitan's default; the plan does not say how long to train

# torchtitan's llama3 flavors by (hidden, layers, heads, kv heads), and their config functions.
_LLAMA3_FLAVORS = {(4096, 32, 32, 8): "8B", (8192, 80, 64, 8): "70B", (16384, 126, 128, 8): "405B"}
_LLAMA3_CONFIGS = {"8B": "llama3_8b", "70B": "llama3_70b", "405B": "llama3_405b"}


def job_config(plan: Plan) -> dict:
    """The plan's settings as torchtitan 0.3 names them: section -> field -> value for the sections
    of Trainer.Config it sets (training, parallelism, compile), plus "model" (torchtitan's model name
    and flavor), "activation_checkpoint" ({"mode": none, selective or full}) and, for fp8, "float8"
    (the Float8LinearConverter's fields)."""
    scenario, s = plan.scenario, plan.strategy
    training = scenario.training
    knobs = resolve(s, training)
    replicate, shard = data_parallel_degrees(knobs, s.dp, needs_fsdp(plan))
    local_batch = s.micro_batch_size * (num_micro_batches(plan) if s.pp > 1 else 1)
    config: dict = {
        "model": {"name": "llama3" if scenario.model.family == "llama" else scenario.model.family or "custom",
                  "flavor": _flavor(plan)},
        "training": {"local_batch_size": local_batch, "global_batch_size": training.global_batch_size,
                     "seq_len": scenario.model.sequence_length, "steps": STEPS,
                     "mixed_precision_param": "float32" if training.precision in ("fp32", "tf32") else "bfloat16"},
        "parallelism": {
            "data_parallel_replicate_degree": replicate,
            "data_parallel_shard_degree": shard,
            "fsdp_reshard_after_forward": "always" if knobs.zero_stage == 3 else "never",
            "tensor_parallel_degree": s.tp,
            "enable_sequence_parallel": True,
            "pipeline_parallel_degree": s.pp,
            "pipeline_parallel_schedule": pipeline_schedule(training.schedule, knobs.virtual_stages),
            "pipeline_parallel_microbatch_size": s.micro_batch_size,
            "context_parallel_degree": knobs.cp,
            "expert_parallel_degree": knobs.ep,
        },
        "compile": {"enable_async_tensor_parallel": False},
        "activation_checkpoint": {"mode": knobs.recompute},
    }
    if s.pp > 1:    # Trainer.Config refuses pipelining with CUDA graphs, its default
        config["training"]["disable_cuda_graphs"] = True
    chunks = model_parts(plan, knobs)
    if s.pp > 1 and chunks is not None:
        config["parallelism"]["module_fqns_per_model_part"] = chunks
    if training.precision == "fp8":     # torchtitan 0.3's float8 recipes are rowwise only
        config["float8"] = {"recipe_name": "rowwise", "filter_fqns": ["lm_head"]}
    return config


def needs_fsdp(plan: Plan) -> bool:
    """Whether the plan is ZeRO-0 with tp or pp > 1 in a 16-bit precision: torchtitan would train it in
    fp32 under DDP, so it is written as FSDP (see the module docstring)."""
    knobs = resolve(plan.strategy, plan.scenario.training)
    return (knobs.zero_stage == 0 and knobs.cp == 1 and (plan.strategy.tp > 1 or plan.strategy.pp > 1)
            and plan.scenario.training.precision not in ("fp32", "tf32"))


def data_parallel_degrees(knobs: Knobs, dp: int, fsdp: bool = False) -> tuple[int, int]:
    """(dp_replicate, dp_shard): DDP for ZeRO 0 (FSDP where `fsdp`: needs_fsdp), FSDP over all dp
    ranks otherwise, and HSDP (ZeRO-3 within groups of hsdp_shard ranks, replicated across the
    dp / hsdp_shard groups) as (dp / group, group); torchtitan's mesh puts dp_shard inside
    dp_replicate, as the plan does."""
    if knobs.zero_stage == 0 and not fsdp:
        return dp, 1
    if knobs.zero_stage == 3 and knobs.hsdp_shard:
        return dp // knobs.hsdp_shard, knobs.hsdp_shard
    return 1, dp


def pipeline_schedule(schedule: str, virtual_stages: int) -> str:
    if virtual_stages > 1:
        return "Interleaved1F1B"
    return "GPipe" if schedule == "gpipe" else "1F1B"


def model_parts(plan: Plan, knobs: Knobs) -> list[list[str]] | None:
    """Module names of each pipeline chunk, or None when the layers have no torchtitan names.
    One chunk per stage as the plan splits them; with v virtual stages, pp x v near-even chunks."""
    layers = plan.scenario.model.layers
    names, block = [], 0
    for layer in layers:
        if layer.kind == "embedding":
            names.append(["tok_embeddings"])
        elif layer.kind == "block":
            names.append([f"layers.{block}"])
            block += 1
        elif layer.kind == "head":
            names.append(["norm", "lm_head"])
        else:
            return None
    if knobs.virtual_stages > 1:
        count = plan.strategy.pp * knobs.virtual_stages
        bounds = [round(i * len(layers) / count) for i in range(count + 1)]
    else:
        bounds = [0]
        for n in plan.strategy.partition:
            bounds.append(bounds[-1] + n)
    return [[name for layer in names[a:b] for name in layer] for a, b in zip(bounds, bounds[1:])]


def _flavor(plan: Plan) -> str:
    model = plan.scenario.model
    shape = model.shape
    if model.family == "llama" and not shape.get("num_experts"):
        key = (shape.get("hidden_size"), shape.get("num_layers"), shape.get("num_heads"), shape.get("num_kv_heads"))
        if key in _LLAMA3_FLAVORS:
            return _LLAMA3_FLAVORS[key]
    return model.name


# -- the Python file ---------------------------------------------------------------------------------

_AC = {"none": "None", "selective": "SelectiveAC.Config()", "full": "FullAC.Config()"}


def render(plan: Plan, config: dict, header: list[str]) -> str:
    """torchtitan_job.py: a config function for torchtitan's ConfigManager. Every value is written
    with repr (a Python literal of str, int, bool or lists of them), names only inside the docstring
    through python_string_text."""
    flavor = config["model"]["flavor"]
    known = flavor in _LLAMA3_CONFIGS
    base = f"torchtitan.models.llama3.config_registry:{_LLAMA3_CONFIGS[flavor]}" if known else ""
    lines = ['"""' + python_string_text(header[0]), "", *(python_string_text(line) for line in header[1:]), '"""', "",
             "import importlib", "import os", "",
             "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401", "",
             "# torchtitan's config function for the model, as module:function; set TORCHTITAN_BASE_CONFIG to use "
             "another", f"BASE_CONFIG = os.environ.get(\"TORCHTITAN_BASE_CONFIG\", {base!r})", "", "",
             f"def {CONFIG_FUNCTION}():",
             "    if not BASE_CONFIG:",
             f"        raise ValueError({_no_flavor(plan)!r})",
             '    module, function = BASE_CONFIG.split(":")',
             "    config = getattr(importlib.import_module(module), function)()"]
    if "float8" in config:
        lines += ["    from torchtitan.components.quantization import Float8LinearConverter",
                  "    from torchtitan.models.llama3 import model_registry",
                  f"    config.model_spec = model_registry({flavor!r}, converters=[Float8LinearConverter.Config("
                  + ", ".join(f"{k}={v!r}" for k, v in config["float8"].items()) + ")])"]
    for section in ("training", "parallelism", "compile"):
        lines += [f"    config.{section}.{key} = {value!r}" for key, value in config[section].items()]
    lines += [f"    config.activation_checkpoint = {_AC[config['activation_checkpoint']['mode']]}", "    return config", ""]
    return "\n".join(lines)


def _no_flavor(plan: Plan) -> str:
    return (f"torchtitan ships no {plan.scenario.model.name}: set TORCHTITAN_BASE_CONFIG (or BASE_CONFIG in this file) "
            "to module:function of the config function that registers it")


# -- export -------------------------------------------------------------------------------------------

def export(plan: Plan) -> Export:
    scenario, s = plan.scenario, plan.strategy
    training = scenario.training
    if training.precision == "fp4":
        raise SpecError("training.precision", "fp4", "cannot export to torchtitan: its converters train in float8 "
                        "or MX formats, not Transformer Engine's NVFP4 (use the megatron format)")
    knobs = resolve(s, training)
    fsdp = needs_fsdp(plan)
    if fsdp and s.dp == 1:
        raise SpecError("training.precision", training.precision,
                        f"cannot export to torchtitan: with tp {s.tp} and pp {s.pp} it applies mixed precision only "
                        "through FSDP, and dp = 1 leaves nothing to shard over, so it would train in fp32 (use "
                        "--format megatron, or a plan with data parallelism)")
    config = job_config(plan)
    replicate, shard = data_parallel_degrees(knobs, s.dp, fsdp)
    launch = (f"PYTHONPATH=<this folder> TRAIN_SCRIPT=<torchtitan/train.py> bash launch.sh --module torchtitan_job "
              f"--config {CONFIG_FUNCTION}")
    header = [f"torchtitan 0.3 job config: {summary(plan)}",
              "torchtitan's ConfigManager reads it as --module torchtitan_job --config amp_tui_plan; start it with",
              "the torchrun export's launch.sh so that nodes take ranks in the plan's order:", f"    {launch}"]
    notes = [
        f"{FILE}: dp_replicate {replicate} x dp_shard {shard} x cp {knobs.cp} x tp {s.tp} x pp {s.pp} = "
        f"{replicate * shard * knobs.cp * s.tp * s.pp} GPUs, as torchtitan's ParallelDims requires. torchtitan 0.3 "
        f"reads a Python config function, not TOML: {launch}.",
        f"training.steps is torchtitan's default ({STEPS}); set it, the dataset and the tokenizer "
        "(hf_assets_path) for your run.",
    ]
    warnings = []
    if fsdp:
        note, warning = _fsdp_instead_of_ddp(plan)
        notes.append(note)
        warnings += [warning] if warning else []
    elif knobs.zero_stage == 0:
        notes.append(f"ZeRO 0: plain data parallelism (DDP) over {s.dp} replicas.")
    elif knobs.zero_stage == 3:
        notes.append(f"ZeRO-3: FSDP over {s.dp} ranks, parameters resharded after forward.")
    else:
        notes.append(f"ZeRO-{knobs.zero_stage}: torchtitan has no ZeRO-1/2 as such; FSDP over {s.dp} ranks that keeps "
                     "parameters gathered after forward (fsdp_reshard_after_forward never, as Llama 3 trained) is "
                     "the nearest, and shards weights between steps, so it needs less memory than predicted.")
    if config["model"]["flavor"] == scenario.model.name:
        notes.append(f"torchtitan has no flavor for {scenario.model.name}: register its model and point "
                     "TORCHTITAN_BASE_CONFIG at that model's config function (torchtitan 0.3 ships llama3 8B/70B/405B, "
                     "qwen3, deepseek_v3, gpt_oss and others).")
    if s.pp > 1:
        if "module_fqns_per_model_part" not in config["parallelism"]:
            notes.append(f"The model's layers have no torchtitan module names, so the plan's split {list(s.partition)} "
                         "is not written; torchtitan will split the layers evenly.")
        elif knobs.virtual_stages > 1:
            notes.append(f"Interleaved1F1B with {knobs.virtual_stages} chunks per rank: module_fqns_per_model_part "
                         f"lists {s.pp * knobs.virtual_stages} near-even chunks, chunk c on pipeline rank "
                         f"c mod {s.pp}.")
        else:
            notes.append(f"module_fqns_per_model_part gives the plan's stage boundaries {list(s.partition)} by module "
                         "name.")
        if config["training"]["local_batch_size"] < s.pp * knobs.virtual_stages:
            notes.append("torchtitan refuses fewer micro-batches per step than pipeline stages; raise the global batch "
                         "or lower the micro-batch size.")
    if s.tp > 1 and not knobs.sequence_parallel:
        notes.append("torchtitan's tensor parallelism shards the sequence between blocks (enable_sequence_parallel, "
                     "its default), which the plan did not assume: activation memory will be lower than predicted.")
    if training.precision == "fp16":
        notes.append("torchtitan trains in bf16 or fp32, not fp16: mixed_precision_param is bfloat16.")
    if training.precision == "fp8":
        notes.append("fp8: torchtitan's Float8LinearConverter (torchao) swaps the linear layers for Float8Linear with "
                     "rowwise scaling; the output projection (lm_head) stays in bf16.")
        if training.fp8_scaling != "rowwise":
            warnings.append(f"torchtitan 0.3 scales float8 per row only: the file asks for rowwise, not the plan's "
                            f"{training.fp8_scaling} scaling (a little slower than predicted).")
    if knobs.recompute == "selective":
        notes.append("Selective recomputation: torchtitan's per-op policy (SelectiveAC) keeps the outputs of costly "
                     "operations, recomputes the cheap ones around them and every second matrix multiply.")
    if training.schedule == "gpipe" and knobs.virtual_stages > 1:
        notes.append("torchtitan's interleaved schedule is 1F1B-based; the plan's GPipe order is not available with "
                     "virtual stages.")
    header += [f"WARNING: {warning}" for warning in warnings]
    return Export(files={FILE: render(plan, config, header)}, notes=notes, warnings=warnings)


def _fsdp_instead_of_ddp(plan: Plan) -> tuple[str, str | None]:
    """The note saying why a ZeRO-0 plan is written as FSDP and what that is predicted to do, and a
    warning when the FSDP job is predicted not to fit."""
    from dataclasses import replace

    from amp_tui.core.base.units import format_bytes, format_seconds
    from amp_tui.core.search.evaluate import evaluate

    s = plan.strategy
    planned = evaluate(plan.scenario, s)
    # FSDP with parameters kept gathered after forward holds them whole and shards gradients and
    # optimizer state: the cost model's ZeRO-2.
    written = evaluate(plan.scenario, replace(s, zero_stage=2))
    note = (f"ZeRO 0 with tp {s.tp} and pp {s.pp}: torchtitan applies bf16 mixed precision only through FSDP and "
            "would train this plan in fp32 under DDP (its distributed/utils.py, maybe_enable_amp), so the file "
            f"shards over the {s.dp} data-parallel ranks with FSDP, parameters kept gathered after forward "
            f"(fsdp_reshard_after_forward never, the cost model's ZeRO-2): predicted "
            f"{format_seconds(written.iteration_time_s)} per iteration and "
            f"{format_bytes(written.tightest_stage.memory.total_bytes)} on the fullest stage, against the plan's "
            f"{format_seconds(planned.iteration_time_s)} and {format_bytes(planned.tightest_stage.memory.total_bytes)}.")
    warning = None if written.fits_memory else f"does not fit: as torchtitan runs it (FSDP), {written.reason}"
    return note, warning
