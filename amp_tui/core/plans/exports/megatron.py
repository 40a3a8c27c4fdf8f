"""Megatron-LM arguments for a plan: parallel degrees, batch, model shape, precision, memory savers,
and the pipeline split.

Megatron splits transformer blocks, not the plan's expanded layers: the embedding always sits on the
first stage and the output head on the last. A plan's partition is therefore read as blocks per
stage. Megatron-Core takes an uneven split as `--decoder-first-pipeline-num-layers` and
`--decoder-last-pipeline-num-layers` with equal middle stages (checked against Megatron-Core
0.16.1's TransformerConfig rules: first and last at least 1, the middle stages even); those flags
are written where they say the plan's split. Where they cannot, the active flag is the free layout
`--pipeline-model-parallel-layout` (e.g. "Et*3|t*4|t*4L"; Megatron-Core 0.13 or newer), which says
any split of an embedding, blocks and a head exactly, and the notes give the nearest split the
first/last flags can say, and what it costs, for older versions. A model with other layers keeps
them with the block before them in Megatron, so the flags for the nearest split are written, and
the export's warnings (shown first, and at the top of the file) say when Megatron runs another split
than the plan's, and when what it runs is predicted not to fit in memory.

The training techniques come from the strategy's resolved knobs (core/spec/knobs.py). Flag names were
checked against Megatron-Core 0.16.1, whose config dataclasses name the options Megatron-LM's
argument parser exposes (TransformerConfig: recompute_granularity, fp8 as --fp8-format, fp4 as
--fp4-format with fp4_recipe (nvfp4),
fp8_amax_history_len, fp8_amax_compute_algo, num_moe_experts, moe_router_topk, moe_ffn_hidden_size,
moe_token_dispatcher_type; ModelParallelConfig: sequence_parallel, context_parallel_size,
expert_model_parallel_size; DistributedDataParallelConfig: use_distributed_optimizer,
use_megatron_fsdp, data_parallel_sharding_strategy, num_distributed_optimizer_instances: HSDP under
Megatron-FSDP, replicas of the shard group), and its rule that with virtual stages every
stage's layer count is divisible by them. The wheel does not ship Megatron-LM's arguments.py; the
flags whose name differs from their field (--num-experts, --num-virtual-stages-per-pipeline-rank)
are Megatron-LM's as of its 0.16 release.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from amp_tui.core.base.errors import SpecError
from amp_tui.core.costmodel.cost import CostModel
from amp_tui.core.costmodel.prediction import Prediction
from amp_tui.core.plans.exports.common import Export, num_micro_batches, summary
from amp_tui.core.plans.exports.common import comment as one_line_comment
from amp_tui.core.plans.planfile import Plan
from amp_tui.core.spec.chunks import interleaved_chunks
from amp_tui.core.spec.knobs import Knobs, resolve
from amp_tui.core.spec.model import Model

FIRST_FLAG = "--decoder-first-pipeline-num-layers"
LAST_FLAG = "--decoder-last-pipeline-num-layers"
VIRTUAL_FLAG = "--num-virtual-stages-per-pipeline-rank"   # works with the uneven first/last flags
# A free split per stage (or per chunk), checked in Megatron-LM's arguments.py and Megatron-Core's
# pipeline_parallel_layer_layout.py: E embedding, t transformer layer, L loss, stages split by "|",
# "t*3" for "ttt"; it excludes the first/last flags and the virtual-stage flag (it sets the virtual
# size itself from its length). First released in Megatron-Core 0.13.
LAYOUT_FLAG = "--pipeline-model-parallel-layout"
LAYOUT_VERSION = "0.13"
# Transformer Engine's delayed-scaling recipe as Megatron-LM's own fp8 examples set it.
FP8_FLAGS = ["--fp8-format", "hybrid", "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"]
# NVFP4 (Blackwell): Transformer Engine's NVFP4BlockScaling recipe, Megatron-Core's only built-in fp4 one.
FP4_FLAGS = ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]


@dataclass(frozen=True)
class PipelineSplit:
    """Transformer blocks per stage, and the Megatron flags that say it (None: flag not needed)."""

    blocks: tuple[int, ...]
    first: int | None
    last: int | None

    def args(self) -> list[str]:
        out = []
        if self.first is not None:
            out += [FIRST_FLAG, str(self.first)]
        if self.last is not None:
            out += [LAST_FLAG, str(self.last)]
        return out


def blocks_per_stage(model: Model, partition: tuple[int, ...]) -> tuple[int, ...]:
    """Layers of kind "block" in each stage of a partition over the expanded layer list."""
    kinds = [layer.kind for layer in model.layers]
    out, start = [], 0
    for count in partition:
        out.append(sum(1 for kind in kinds[start:start + count] if kind == "block"))
        start += count
    return tuple(out)


def megatron_split(blocks: tuple[int, ...]) -> PipelineSplit | None:
    """The flags for a blocks-per-stage split, or None when Megatron's flags cannot express it."""
    pp = len(blocks)
    if any(b < 1 for b in blocks):
        return None
    if pp == 1 or len(set(blocks)) == 1:
        return PipelineSplit(blocks, None, None)
    if pp == 2:
        return PipelineSplit(blocks, blocks[0], None)
    middle = blocks[1:-1]
    if len(set(middle)) != 1:
        return None
    m = middle[0]
    return PipelineSplit(blocks, blocks[0] if blocks[0] != m else None, blocks[-1] if blocks[-1] != m else None)


def expressible_splits(num_blocks: int, pp: int) -> Iterator[PipelineSplit]:
    """Every split of `num_blocks` over `pp` stages that Megatron's first/last flags can express."""
    if pp == 1:
        yield PipelineSplit((num_blocks,), None, None)
        return
    if pp == 2:
        for first in range(1, num_blocks):
            split = megatron_split((first, num_blocks - first))
            if split:
                yield split
        return
    for m in range(1, (num_blocks - 2) // (pp - 2) + 1):
        ends = num_blocks - (pp - 2) * m
        for first in range(1, ends):
            split = megatron_split((first, *([m] * (pp - 2)), ends - first))
            if split:
                yield split


def layer_partition(model: Model, blocks: tuple[int, ...]) -> tuple[int, ...]:
    """The expanded-layer partition Megatron runs for a blocks-per-stage split: each stage ends just
    before its successor's first block, so layers between blocks stay with the block before them,
    the embedding (and anything before the first block) with stage 0, the head with the last stage."""
    block_index = [i for i, layer in enumerate(model.layers) if layer.kind == "block"]
    bounds, seen = [0], 0
    for count in blocks[:-1]:
        seen += count
        bounds.append(block_index[seen])
    bounds.append(model.num_layers)
    return tuple(b - a for a, b in zip(bounds, bounds[1:]))


def layout_string(blocks: tuple[int, ...]) -> str:
    """Megatron-Core's pipeline_model_parallel_layout for a split: E embedding, t block, L loss."""
    stages = []
    for s, count in enumerate(blocks):
        text = ("E" if s == 0 else "") + (f"t*{count}" if count > 1 else "t" * count)
        stages.append(text + ("L" if s == len(blocks) - 1 else ""))
    return "|".join(stages)


def nearest_split(plan: Plan, cost: CostModel | None = None) -> tuple[PipelineSplit, Prediction] | None:
    """The expressible split with the lowest predicted iteration time (fitting in memory first)."""
    scenario, s = plan.scenario, plan.strategy
    num_blocks = sum(1 for layer in scenario.model.layers if layer.kind == "block")
    candidate = (cost or CostModel(scenario)).candidate(s.tp, s.pp, s.dp, s.micro_batch_size, s.placement)
    best = None
    for split in expressible_splits(num_blocks, s.pp):
        prediction = candidate.predict(layer_partition(scenario.model, split.blocks))
        key = (not prediction.fits_memory, prediction.iteration_time_s)
        if best is None or key < best[0]:
            best = (key, split, prediction)
    return (best[1], best[2]) if best else None


def has_megatron_shape(model: Model) -> bool:
    shape = model.shape
    blocks = any(layer.kind == "block" for layer in model.layers)
    return blocks and (model.family is not None or ("hidden_size" in shape and "num_heads" in shape))


def export(plan: Plan) -> Export:
    scenario, s = plan.scenario, plan.strategy
    model, training = scenario.model, scenario.training
    notes: list[str] = []
    sections: list[tuple[str, list[str]]] = []

    if not has_megatron_shape(model):
        # Megatron-LM's validate_args refuses a run without --num-layers, and its GPT model has no
        # other layers than an embedding, transformer blocks and a head.
        raise SpecError("model", model.name, "cannot export to megatron: Megatron-LM's pretrain_gpt.py trains GPT-style "
                        "transformers and this model has no transformer blocks with a family or hidden_size and "
                        "num_heads (use --format torchrun or rankmap for a training script of your own)")
    heads = model.shape["num_heads"]
    groups = model.shape.get("num_kv_heads", heads)
    if groups % s.tp and s.tp % groups:
        # TransformerConfig.__post_init__ (Megatron-Core 0.16): query groups shard whole over tensor ranks.
        raise SpecError("strategy.tp", s.tp, f"cannot export to megatron: Megatron-Core needs the number of query "
                        f"groups ({groups}) to be a multiple or a divisor of the tensor-parallel size")
    knobs = resolve(s, training)
    sections.append(_parallel_section(plan, knobs, notes))

    warnings: list[str] = []
    if s.pp > 1:
        sections.append(_pipeline_section(plan, knobs, notes, warnings))
    sections.append((f"Batch: {num_micro_batches(plan)} micro-batches of {s.micro_batch_size} per replica per iteration",
                     ["--micro-batch-size", str(s.micro_batch_size),
                      "--global-batch-size", str(training.global_batch_size)]))
    sections.append(_model_section(plan, knobs, notes))
    sections.append(_training_section(plan, knobs, notes))

    script = "pretrain_bert.py" if model.family == "bert" else "pretrain_gpt.py"
    lines = [
        "#!/usr/bin/env bash",
        f"# {summary(plan)}",
        "# Megatron-LM arguments for this plan (the uneven pipeline flags need Megatron-Core 0.10 or newer,",
        f"# {LAYOUT_FLAG} 0.13 or newer).",
        f"# Source this file, then start {script} on every node with the node's launch line from",
        "# `amp-tui export PLAN --format torchrun` (node order matters), for example:",
        f'#   source megatron_args.sh; TRAIN_SCRIPT={script} NODE_RANK=<k> MASTER_ADDR=<node 0> \\',
        '#     bash launch.sh "${MEGATRON_ARGS[@]}" <data, tokenizer, learning-rate and iteration arguments>',
        *(f"# WARNING: {one_line_comment(warning)}" for warning in warnings),
        *_environment(plan, knobs),
        "MEGATRON_ARGS=(",
    ]
    for comment, args in sections:
        lines.append(f"  # {one_line_comment(comment)}")
        lines += ["  " + " ".join(shlex.quote(token) for token in flag) for flag in _flags(args)]
    lines += [")", ""]
    notes.insert(0, f"megatron_args.sh defines MEGATRON_ARGS for {script}; add your data, tokenizer, learning-rate "
                    "and iteration arguments, and launch with the torchrun export so nodes take ranks in plan order.")
    if knobs.cp > 1:
        notes.append("Megatron's default rank order is tensor, then context, then data, then pipeline.")
    else:
        notes.append("Megatron's default rank order (tensor, then data, then pipeline) is the one the plan was "
                     "predicted with.")
    return Export(files={"megatron_args.sh": "\n".join(lines)}, notes=notes, warnings=warnings)


def _environment(plan: Plan, knobs: Knobs) -> list[str]:
    """Lines exporting what Megatron-LM's validate_args requires of the environment: with tensor or
    context parallelism (and not Megatron-FSDP) it asserts CUDA_DEVICE_MAX_CONNECTIONS=1 on GPUs
    before Blackwell, so that communication kernels queue in order with the GEMMs they overlap."""
    if (plan.strategy.tp > 1 or knobs.cp > 1) and knobs.zero_stage != 3:
        return ["# Megatron-LM asserts this with tensor or context parallelism (before Blackwell GPUs).",
                "export CUDA_DEVICE_MAX_CONNECTIONS=1"]
    return []


def _parallel_section(plan: Plan, knobs: Knobs, notes: list[str]) -> tuple[str, list[str]]:
    s = plan.strategy
    ep = knobs.ep
    args = ["--tensor-model-parallel-size", str(s.tp), "--pipeline-model-parallel-size", str(s.pp)]
    if knobs.cp > 1:
        args += ["--context-parallel-size", str(knobs.cp)]
    if knobs.sequence_parallel:
        if s.tp > 1:
            args.append("--sequence-parallel")
        else:
            notes.append("Sequence parallelism works beside tensor parallelism; with tp = 1 there is nothing to "
                         "split, so --sequence-parallel is not written.")
    if ep > 1:
        args += ["--expert-model-parallel-size", str(ep)]
    cp = f" x cp {knobs.cp}" if knobs.cp > 1 else ""
    experts = f"; experts over ep {ep} of the dp x cp ranks" if ep > 1 else ""
    return (f"Parallelism: {plan.scenario.cluster.num_gpus} GPUs = tp {s.tp}{cp} x pp {s.pp} x dp {s.dp}"
            f"{experts} (Megatron derives dp from the world size)", args)


def _pipeline_section(plan: Plan, knobs: Knobs, notes: list[str], warnings: list[str]) -> tuple[str, list[str]]:
    v = knobs.virtual_stages
    model, s = plan.scenario.model, plan.strategy
    blocks = blocks_per_stage(model, s.partition)
    split = megatron_split(blocks)
    flags_say_it = split is not None and layer_partition(model, split.blocks) == s.partition
    if v > 1 and (any(count % v for count in blocks) or not flags_say_it):
        # The virtual-stage flag needs every stage's blocks divisible by v, and the first/last flags
        # equal middle stages; the layout states the plan's chunks instead (and sets the virtual size
        # itself: the two flags exclude each other).
        chunks = interleaved_chunks(blocks, v)
        if _layout_states_the_model(model):
            candidate = CostModel(plan.scenario).candidate(s.tp, s.pp, s.dp, s.micro_batch_size, s.placement)
            _warn_if_over(candidate.predict(s.partition), "the plan's split", warnings)
            notes.append(f"Interleaving with {v} virtual stages per pipeline rank: the split {list(blocks)} is not in "
                         f"multiples of {v}, which {VIRTUAL_FLAG} needs, so {LAYOUT_FLAG} states the plan's "
                         f"{len(chunks)} chunks in model order (chunk c on pipeline rank c mod {plan.strategy.pp}; "
                         f"Megatron-Core {LAYOUT_VERSION} or newer).")
            return (f"Pipeline split: the plan's {len(chunks)} chunks, transformer blocks "
                    f"{' '.join(map(str, chunks))}, interleaved 1F1B with {v} model chunks per pipeline rank "
                    f"(Megatron-Core {LAYOUT_VERSION} or newer)", [LAYOUT_FLAG, layout_string(chunks)])
        notes.append(f"Interleaving with {v} virtual stages per pipeline rank needs every stage's transformer blocks "
                     f"divisible by {v}; the split {list(blocks)} is not, so Megatron will refuse it. Choose a split "
                     f"in multiples of {v}.")
    comment, args, _ = _split_section(plan, notes, warnings)
    if v <= 1:
        return comment, args
    return (comment + f"; interleaved 1F1B, {v} model chunks per pipeline rank",
            args + [VIRTUAL_FLAG, str(v)])


def _layout_states_the_model(model: Model) -> bool:
    """Whether --pipeline-model-parallel-layout can say any split of this model's layers: its only
    layer kinds are an embedding first, transformer blocks, and a head last (E, t and L)."""
    kinds = [layer.kind for layer in model.layers]
    return (all(kind in ("embedding", "block", "head") for kind in kinds)
            and kinds.count("embedding") <= 1 and kinds.count("head") <= 1
            and (kinds[0] == "embedding" if "embedding" in kinds else True)
            and (kinds[-1] == "head" if "head" in kinds else True))


def _split_section(plan: Plan, notes: list[str], warnings: list[str]) -> tuple[str, list[str], tuple[int, ...]]:
    """Comment, split flags, and the blocks per stage Megatron will run. The first/last-stage flags
    where they say the plan's split (every Megatron-Core since 0.10); the layout flag where they
    cannot (0.13 or newer), with the nearest split they can say as the older versions' alternative;
    `warnings` gets a sentence when what Megatron runs differs from the plan or does not fit."""
    scenario, s = plan.scenario, plan.strategy
    model = scenario.model
    blocks = blocks_per_stage(model, s.partition)
    split = megatron_split(blocks)
    cost = CostModel(scenario)
    candidate = cost.candidate(s.tp, s.pp, s.dp, s.micro_batch_size, s.placement)
    planned = candidate.predict(s.partition)   # fresh, so both sides of a comparison use today's model
    if split is not None and layer_partition(model, split.blocks) == s.partition:
        comment = f"Pipeline split, transformer blocks per stage: {' '.join(map(str, blocks))}"
        if split.first is None and split.last is None:
            comment += " (even: no split flags needed)"
        _warn_if_over(planned, "the plan's split", warnings)
        return comment, split.args(), split.blocks

    exact = layout_string(blocks)
    nearest = nearest_split(plan, cost)
    if _layout_states_the_model(model):
        older = ""
        if nearest is not None:
            alternative, prediction = nearest
            older = (f"; before 0.13 the nearest split the first/last flags can say, "
                     f"{' '.join(alternative.args()) or 'an even split (no flags)'}, is predicted "
                     f"{_seconds(prediction)}{_change(prediction, planned)}"
                     + ("" if prediction.fits_memory else " and does not fit in memory"))
        notes.append(f"The plan's split, transformer blocks per stage {list(blocks)}, cannot be said with "
                     f"{FIRST_FLAG} / {LAST_FLAG} (the middle stages must be equal and every stage needs a block), "
                     f"so {LAYOUT_FLAG} \"{exact}\" states it exactly (E the embedding, t a block, L the loss; "
                     f"Megatron-Core {LAYOUT_VERSION} or newer){older}.")
        _warn_if_over(planned, "the plan's split", warnings)
        return (f"Pipeline split, transformer blocks per stage {' '.join(map(str, blocks))}, exactly "
                f"(Megatron-Core {LAYOUT_VERSION} or newer)", [LAYOUT_FLAG, exact], blocks)

    # Layers Megatron's GPT model does not have by name: it keeps layers between blocks with the
    # block before them, so it runs another split than the plan's.
    if split is not None:
        runs = layer_partition(model, split.blocks)
        actual = candidate.predict(runs)
        notes.append(
            f"Megatron keeps the embedding on the first stage, the head on the last, and layers between "
            f"blocks with the block before them, so it runs the layers as {list(runs)} rather than the "
            f"plan's {list(s.partition)}: predicted {_seconds(actual)} per iteration vs {_seconds(planned)}"
            f"{_change(actual, planned)}.")
        warnings.append(f"Megatron-LM runs another split: layers {list(runs)} instead of the plan's "
                        f"{list(s.partition)}, predicted {_seconds(actual)}{_change(actual, planned)}.")
        _warn_if_over(actual, "the split Megatron runs", warnings)
        return (f"Pipeline split, transformer blocks per stage: {' '.join(map(str, blocks))}", split.args(),
                split.blocks)
    if nearest is None:
        notes.append(
            f"Megatron needs at least one transformer block per pipeline stage and this model has "
            f"{sum(blocks)} blocks for {s.pp} stages, so no split flags are written.")
        warnings.append(f"no split is written: Megatron-LM cannot run the plan's split {list(s.partition)} of this "
                        "model's layers.")
        return f"Pipeline split: the plan's blocks per stage {' '.join(map(str, blocks))} cannot be expressed", [], blocks
    split, prediction = nearest
    notes.append(
        f"The plan's split, transformer blocks per stage {list(blocks)}, cannot be expressed with "
        f"{FIRST_FLAG} / {LAST_FLAG} (the middle stages must be equal and every stage needs a block); written "
        f"instead: the nearest expressible split {list(split.blocks)} (the one with the lowest predicted iteration "
        f"time), predicted {_seconds(prediction)} per iteration vs the plan's {_seconds(planned)}"
        f"{_change(prediction, planned)}.")
    notes.append(
        f"{LAYOUT_FLAG} \"{exact}\" (Megatron-Core {LAYOUT_VERSION} or newer) states the plan's blocks per stage in "
        "place of the two split flags, with the model's other layers where Megatron's GPT puts them.")
    warnings.append(f"Megatron-LM runs another split: blocks {'/'.join(map(str, split.blocks))} instead of the plan's "
                    f"{'/'.join(map(str, blocks))}, predicted {_seconds(prediction)}{_change(prediction, planned)} "
                    f"({LAYOUT_FLAG} in the notes states the plan's).")
    _warn_if_over(prediction, "the split written", warnings)
    return (f"Pipeline split, blocks per stage: {' '.join(map(str, split.blocks))} (nearest to the plan's "
            f"{' '.join(map(str, blocks))})", split.args(), split.blocks)


def _warn_if_over(prediction: Prediction, what: str, warnings: list[str]) -> None:
    if not prediction.fits_memory:
        warnings.append(f"does not fit: {what} is predicted to run out of memory ({prediction.reason}).")


def _model_section(plan: Plan, knobs: Knobs, notes: list[str]) -> tuple[str, list[str]]:
    scenario, s = plan.scenario, plan.strategy
    model = scenario.model
    shape = model.shape
    num_blocks = sum(1 for layer in model.layers if layer.kind == "block")
    if "num_layers" in shape and shape["num_layers"] != num_blocks:
        notes.append(f"The model's shape says {shape['num_layers']} layers but its layer list has {num_blocks} "
                     "transformer blocks; --num-layers uses the blocks.")
    args = ["--num-layers", str(num_blocks), "--hidden-size", str(shape["hidden_size"]),
            "--num-attention-heads", str(shape["num_heads"])]
    if "ffn_hidden_size" in shape:
        args += ["--ffn-hidden-size", str(shape["ffn_hidden_size"])]
    heads, kv = shape["num_heads"], shape.get("num_kv_heads", shape["num_heads"])
    if kv != heads:
        args += ["--group-query-attention", "--num-query-groups", str(kv)]
    args += ["--seq-length", str(model.sequence_length), "--max-position-embeddings", str(model.sequence_length)]
    if model.family == "llama":
        args += ["--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
                 "--disable-bias-linear", "--untie-embeddings-and-output-weights"]
        if "rope_theta" in shape:      # Megatron's default --rotary-base is 10000 (Llama 1 and 2)
            args += ["--rotary-base", str(shape["rope_theta"])]
    if shape.get("num_experts"):
        args += ["--num-experts", str(shape["num_experts"]), "--moe-router-topk", str(shape["top_k"]),
                 "--moe-ffn-hidden-size", str(shape.get("expert_ffn_hidden_size", shape.get("ffn_hidden_size"))),
                 "--moe-token-dispatcher-type", "alltoall", "--moe-grouped-gemm"]
        if s.tp > 1 and not knobs.sequence_parallel:
            notes.append("Megatron requires --sequence-parallel for a mixture-of-experts model with tensor "
                         "parallelism; add it (the plan was predicted without it).")
    if "vocab_size" in shape:
        vocab = shape["vocab_size"]
        multiple = 128 * s.tp
        padded = -(-vocab // multiple) * multiple
        notes.append(f"The vocabulary ({vocab} tokens) comes from your tokenizer arguments"
                     + (f"; Megatron pads it to {padded} (a multiple of 128 x tp), a little more than the "
                        "prediction counted." if padded != vocab else "."))
    if shape.get("flash_attention"):
        notes.append("The prediction assumes flash attention (no attention-score activations kept); use a Megatron "
                     "build that runs it (Transformer Engine, or --use-flash-attn / --attention-backend flash "
                     "depending on the version).")
    return f"Model: {model.name}" + (f" ({model.family} family)" if model.family else ""), args


def _training_section(plan: Plan, knobs: Knobs, notes: list[str]) -> tuple[str, list[str]]:
    training = plan.scenario.training
    args = []
    if training.precision == "fp16":
        args.append("--fp16")
    elif training.precision in ("bf16", "fp8", "fp4"):
        args.append("--bf16")
    else:
        notes.append("fp32 is Megatron's default: no precision flag is written.")
    if training.precision == "tf32":
        notes.append("tf32: the plan assumes TF32 matrix multiplies, as NGC's PyTorch containers run them "
                     "(TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1); elsewhere set "
                     "torch.backends.cuda.matmul.allow_tf32 = True.")
    if training.precision == "fp8":
        args += FP8_FLAGS
        notes.append("fp8: matrix multiplies in fp8 through Transformer Engine (--transformer-impl "
                     "transformer_engine, Megatron's default), the rest in bf16; --fp8-format hybrid is e4m3 "
                     "forward and e5m2 for gradients.")
    if training.precision == "fp4":
        args += FP4_FLAGS
        notes.append("fp4: matrix multiplies in NVFP4 through Transformer Engine (>= 2.7, Blackwell GPUs), the rest "
                     "in bf16; NVIDIA's recipes keep the first and last few layers in bf16, which the prediction "
                     "folds into params fp4_efficiency.")
    args += ["--optimizer", training.optimizer]
    if knobs.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif knobs.recompute == "selective":
        args += ["--recompute-granularity", "selective"]   # recomputes the attention core (core_attn)
    zero = knobs.zero_stage
    if zero:
        args.append("--use-distributed-optimizer")
    if zero == 2:
        notes.append("Megatron's distributed optimizer shards the optimizer state (ZeRO-1) and reduce-scatters "
                     "gradients but keeps a full gradient buffer, so gradient memory is higher than the "
                     "plan's ZeRO-2 prediction (Megatron-FSDP's --data-parallel-sharding-strategy optim_grads "
                     "matches it).")
    elif zero == 3:
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
        notes.append("ZeRO-3: Megatron-FSDP shards parameters, gradients and optimizer state over the data-parallel "
                     "ranks (optim_grads_params); Megatron-Core releases before 0.14 call it --use-custom-fsdp.")
        if knobs.hsdp_shard:   # DistributedDataParallelConfig.num_distributed_optimizer_instances
            replicas = plan.strategy.dp // knobs.hsdp_shard
            args += ["--num-distributed-optimizer-instances", str(replicas)]
            notes.append(f"HSDP: Megatron-FSDP shards within groups of {knobs.hsdp_shard} data-parallel ranks "
                         f"(x cp) and replicates across {replicas} of them (outer_dp_sharding_strategy no_shard, "
                         "its default).")
    if training.schedule == "gpipe":
        notes.append("Megatron has no GPipe schedule and runs 1F1B: about the same time, less activation memory "
                     "than the plan's GPipe prediction.")
    return (f"Training: {training.precision}, {training.optimizer}, recompute {knobs.recompute}, "
            f"{_zero_name(zero)}", args)


def _zero_name(stage: int) -> str:
    return {0: "ZeRO stage 0", 1: "ZeRO stage 1 (Megatron's distributed optimizer)",
            2: "ZeRO stage 2 (distributed optimizer)", 3: "ZeRO stage 3 (Megatron-FSDP)"}[stage]


def _flags(args: list[str]) -> list[list[str]]:
    """["--a", "1", "--b"] -> [["--a", "1"], ["--b"]]: one flag and its values per line."""
    out: list[list[str]] = []
    for token in args:
        if token.startswith("--") or not out:
            out.append([token])
        else:
            out[-1].append(token)
    return out


def _seconds(prediction: Prediction) -> str:
    return f"{prediction.iteration_time_s:.4g} s"


def _change(new: Prediction, old: Prediction) -> str:
    if not old.iteration_time_s:
        return ""
    return f" ({(new.iteration_time_s - old.iteration_time_s) / old.iteration_time_s:+.1%})"
