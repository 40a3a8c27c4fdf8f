"""Compute terms: one layer's forward time on one GPU, and what it keeps for backward.

Forward time of a layer for a micro-batch of b samples on a GPU of the stage, at tensor-parallel
degree t and context-parallel degree c (each GPU sees the tokens of its c-th of the sequence):

  matmuls    FLOPs b / (c t) / (peak x efficiency), where efficiency = peak_fraction x
             compute_efficiency[gpu] x M / (M + D) x N / (N + D): a matrix multiply of M = tokens b / c
             rows and N = width / t columns reaches its GPU's best fraction only when both are
             large (D = params `gemm_half_dim`); at fp8 (fp4) the linear layers run at the fp8
             (NVFP4) peak, at params `fp8_efficiency` (`fp4_efficiency`) of the bf16 efficiency
             (and `fp8_rowwise_efficiency` of that with a scale per row), and the attention
             core in bf16;
  memory     the weights read once, b / (c t) of the activations written and read again by the
             element-wise kernels (layer norms, activations, dropout, softmax) at memory bandwidth,
             times the execution profile's `elementwise_traffic` (spec/frameworks.py: eager
             Hugging Face code runs unfused chains, x3);
  floor      the kernel-launch floor of a layer (params `layer_floor_s`): small layers are
             latency-bound (the GPU's gaps between dependent kernels; the host's issue time is
             terms/host.py, taken as a max).

The three run one after another on the GPU, so they add. Measured layer times (profiles), where
given, replace all three (cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_tui.core.spec.frameworks import engine_of, execution_profile, loss_buffers
from amp_tui.core.spec.hardware import GPU
from amp_tui.core.spec.model import Model
from amp_tui.core.spec.params import ModelParams

# Precisions whose linear layers run on low-precision tensor cores while the rest is bf16.
LOW_PRECISIONS = ("fp8", "fp4")


def core_precision(precision: str) -> str:
    """The precision of the attention core and other non-linear matrix multiplies."""
    return "bf16" if precision in LOW_PRECISIONS else precision


def layer_shapes(model: Model, bytes_per_element: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per sample, width) per layer. A layer that does not state them (an explicit layer
    list) is read as a transformer block: width from its parameters (12 h^2), tokens from the
    bytes it sends on (tokens x width x bytes per element)."""
    cols = model.columns
    width = cols["width"].copy()
    tokens = cols["tokens"].copy()
    guess = (width <= 0) & (cols["params"] > 0)
    width[guess] = np.sqrt(cols["params"][guess] / 12.0)
    unknown = (tokens <= 0) & (width > 0)
    tokens[unknown] = np.maximum(cols["output_bytes"][unknown] / (width[unknown] * bytes_per_element), 1.0)
    return tokens, width


def best_fraction(gpu: GPU, params: ModelParams) -> float:
    """The share of the peak a training step's large matrix multiplies reach on this GPU: a GEMM
    microbenchmark's (catalog gemm_fraction) times the share training keeps of it (params
    `gemm_training_share`, one figure every source informs: clocks under sustained load, the
    collectives and element-wise kernels beside them), else the catalog's peak_fraction; times
    the GPU's calibration (params `compute_efficiency.GPU`)."""
    base = gpu.gemm_fraction * params("gemm_training_share") if gpu.gemm_fraction else gpu.peak_fraction
    return base * params("compute_efficiency", gpu.name)


def matmul_efficiency(gpu: GPU, params: ModelParams, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    best = best_fraction(gpu, params)
    half = params("gemm_half_dim")    # tiles of 128 x 128 leave a narrow product's SMs partly idle
    shape = np.where((rows > 0) & (columns > 0), rows / (rows + half) * columns / (columns + half), 1.0)
    return np.minimum(best * shape, 1.0)


def attention_efficiency(model: Model, gpu: GPU, kernel: str, efficiency):
    """The attention core's share of the 16-bit peak: a GEMM's `efficiency`, held to the GPU's
    flash2_fraction under FlashAttention-2's kernels (`training.attention_kernel: flash2`), which
    on Hopper reach ~35% of the peak (FlashAttention-3 paper: ~350 of 989 TFLOP/s) where
    Transformer Engine's fused attention and FlashAttention-3 reach a GEMM's ~60%."""
    if kernel == "flash2" and gpu.flash2_fraction and model.shape.get("flash_attention"):
        return np.minimum(efficiency, gpu.flash2_fraction)
    return efficiency


def analytic_forward(model: Model, gpu: GPU, precision: str, params: ModelParams, tp: int, cp: int,
                     sequence_parallel: bool, mbs, attention_kernel: str = "fused",
                     fp8_scaling: str = "tensorwise", elementwise_traffic: float = 1.0) -> np.ndarray:
    """Forward seconds per layer for a micro-batch of `mbs` (a number, or a column of sizes);
    `elementwise_traffic` scales the element-wise kernels' memory traffic (frameworks.py)."""
    cols = model.columns
    e = 4 if precision in ("fp32", "tf32") else 2
    tokens, width = layer_shapes(model, e)
    rows = tokens * mbs / cp
    efficiency = matmul_efficiency(gpu, params, rows, width / tp)
    per_gpu = mbs / (tp * cp)
    # Transformer Engine runs the linear layers in fp8 or fp4, below their peak (casts, scaling);
    # the attention core (scores, softmax, values: flash attention) stays in bf16.
    attention = _blocks(model) * attention_core(model)[0]
    linear_rate = gpu.peak_flops(precision) * efficiency
    if precision in LOW_PRECISIONS:
        linear_rate = linear_rate * params(f"{precision}_efficiency")
    if precision == "fp8" and fp8_scaling == "rowwise":
        linear_rate = linear_rate * params("fp8_rowwise_efficiency")
    matmuls = (cols["flops"] - attention) * per_gpu / linear_rate \
        + attention_forward_time(model, gpu, precision, params, tp, cp, mbs, attention_kernel)
    replicated = cols["activation_replicated_bytes"]
    split = cols["activation_bytes"] - replicated
    # Without sequence parallelism every tensor-parallel rank runs the replicated element-wise
    # kernels (layer norms, dropout) on the whole activation.
    activations = (split / tp + replicated / (tp if sequence_parallel else 1)) * (mbs / cp)
    weights = cols["params"] * (e / tp)
    memory = (2.0 * elementwise_traffic * activations + weights) / gpu.memory_bandwidth
    return matmuls + memory + params("layer_floor_s") * (cols["flops"] > 0)


def attention_forward_time(model: Model, gpu: GPU, precision: str, params: ModelParams, tp: int, cp: int,
                           mbs, attention_kernel: str = "fused") -> np.ndarray:
    """Forward seconds per layer of the attention core (scores, softmax, values) for a
    micro-batch of `mbs` on one GPU: its FLOPs over tp x cp GPUs, in bf16 even under fp8 or fp4
    training, at a GEMM's efficiency for the layer's shape (attention_efficiency)."""
    flops, _ = attention_core(model)
    cols = model.columns
    efficiency = attention_efficiency(model, gpu, attention_kernel,
                                      matmul_efficiency(gpu, params, cols["tokens"] * mbs / cp, cols["width"] / tp))
    return _blocks(model) * flops * (mbs / (tp * cp)) / (gpu.peak_flops(core_precision(precision)) * efficiency)


def flash_backward_time(model: Model, gpu: GPU, params: ModelParams, tp: int, cp: int, mbs,
                        attention_kernel: str = "fused") -> np.ndarray:
    """Seconds per layer flash attention's backward adds beyond twice its forward: it computes the
    scores again (5 matrix multiplies against the forward's 2, Dao et al.), so the attention core
    costs 3.5 forwards instead of 3. In bf16 even under fp8 or fp4 training; 0 without flash attention."""
    if not model.shape.get("flash_attention"):
        return np.zeros(model.num_layers)
    return 0.5 * attention_forward_time(model, gpu, "bf16", params, tp, cp, mbs, attention_kernel)


def attention_core(model: Model) -> tuple[float, float]:
    """(forward FLOPs, bytes of scores kept) per sample of one transformer block's attention
    scores and softmax, from the family's shape; (0, 0) for a model without one."""
    shape = model.shape
    needed = ("hidden_size", "num_heads", "sequence_length")
    if not model.family or any(key not in shape for key in needed):
        return 0.0, 0.0
    h, a, s = shape["hidden_size"], shape["num_heads"], shape["sequence_length"]
    flash = shape.get("flash_attention", False)
    return 4.0 * s * s * h, (0.0 if flash else 5.0 * a * s * s)


def selective_recompute_time(model: Model, gpu: GPU, training, params: ModelParams, knobs, tp: int,
                             mbs, forward: np.ndarray) -> np.ndarray:
    """Extra seconds per layer under selective recomputation, by the framework's kind of it.
    Megatron and DeepSpeed (Korthikanti et al.): each block's attention scores and softmax run
    forward again in backward. PyTorch's op-level checkpointing (FSDP): the share of each block's
    `forward` FLOPs in the matrix multiplies not kept (`op_checkpoint_block`) runs again, and the
    element-wise outputs not kept are written and read once more."""
    blocks = _blocks(model)
    cp = knobs.cp
    ops = op_checkpoint_block(model) if training.engine == "fsdp" else None
    if ops is not None:
        full = _full_activations(model, tp, knobs, training.precision)
        dropped = np.maximum(full - _op_kept_bytes(model, tp, knobs, training.bytes_per_element, ops), 0.0)
        return blocks * (forward * ops.recomputed_share + 2.0 * dropped * mbs / gpu.memory_bandwidth)
    flops, score_bytes = attention_core(model)
    if not flops:
        return np.zeros_like(blocks) * mbs
    precision = training.precision
    per_gpu = mbs / (tp * cp * cp)          # ring attention: each GPU scores its c-th against all
    rate = gpu.peak_flops(core_precision(precision)) * attention_efficiency(
        model, gpu, training.attention_kernel, best_fraction(gpu, params))
    return blocks * (flops * per_gpu * cp / rate + 2.0 * score_bytes * per_gpu * cp / gpu.memory_bandwidth)


@dataclass(frozen=True)
class OpCheckpoint:
    """What PyTorch's op-level selective checkpointing keeps of one block, per token."""
    split: float              # elements split over tensor-parallel ranks (column-parallel outputs, attention)
    replicated: float         # elements each tensor-parallel rank holds whole unless SP (block input, row-parallel outputs)
    recomputed_share: float   # share of the block's forward FLOPs run again in backward


def op_checkpoint_block(model: Model) -> OpCheckpoint | None:
    """torchtitan's op-level selective checkpointing of a block: the block's input, the attention
    kernel's output and every other matrix multiply's output are kept, the rest recomputed in
    backward. None for a model without a family shape, or with experts: those fall back to
    Korthikanti's selective recomputation.

    Matrix multiplies in call order, the odd ones kept: LLaMA wq, wk, wv, wo, w1, w3, w2 (wq, wv,
    w1 and the row-parallel w2 kept); GPT fused qkv, proj, fc1, fc2 (qkv and fc1 kept)."""
    shape = model.shape
    if not model.family or "hidden_size" not in shape or shape.get("num_experts"):
        return None
    h, f = shape["hidden_size"], shape["ffn_hidden_size"]
    hkv = h * shape.get("num_kv_heads", shape["num_heads"]) // shape["num_heads"]
    if model.family == "llama":    # (output width, input width, row-parallel)
        matmuls = [(h, h, False), (hkv, h, False), (hkv, h, False), (h, h, True), (f, h, False), (f, h, False),
                   (h, f, True)]
    else:
        matmuls = [(h + 2 * hkv, h, False), (h, h, True), (f, h, False), (h, f, True)]
    kept = matmuls[0::2]
    total = sum(out * inp for out, inp, _ in matmuls)
    return OpCheckpoint(split=h + sum(out for out, _, row in kept if not row),
                        replicated=h + sum(out for out, _, row in kept if row),
                        recomputed_share=sum(out * inp for out, inp, _ in matmuls[1::2]) / total)


def _blocks(model: Model) -> np.ndarray:
    return np.array([layer.kind == "block" for layer in model.layers], dtype=np.float64)


def _op_kept_bytes(model: Model, tp: int, knobs, bytes_per_element: int, ops: OpCheckpoint) -> np.ndarray:
    """Per sample, per GPU: the bytes op-level checkpointing keeps of each block (0 elsewhere)."""
    sp = tp if knobs.sequence_parallel else 1
    per_token = (ops.split / tp + ops.replicated / sp) * bytes_per_element / knobs.cp
    return _blocks(model) * model.columns["tokens"] * per_token


# Share of a layer's transient buffers (the loss's fp32 copies of the logits) each framework holds
# (frameworks.FrameworkProfile.loss_buffers). DeepSpeed's is fitted to AMP's runs on its pipeline
# engine, the only published runs on it that ran out of memory: the last stages at micro-batch 16
# that did need more than 0.85 of the three fp32 copies, the one at micro-batch 8 that ran at most
# 0.9 (1.0 predicted it out of memory). FSDP trainers (torchtitan) take the cross-entropy of the
# logits cast to fp32 and hold all three (2/3 before: torchtitan's 20 measured peaks were 14.4%
# off, 10.4% at 1.0); Hugging Face's loss upcasts the logits, copies the shifted ones and keeps the
# log-softmax, 1.5 of them; llm-foundry's fused loss holds none (training.fused_loss).


# Transformer Engine keeps the fp8 casts of the matrix multiplies' inputs for backward, one byte
# instead of two: about three fifths of a bf16 layer's activation bytes remain. fp4 is counted the
# same (its casts are smaller, but no published run measures its memory: an upper figure).
FP8_ACTIVATION_SHARE = 0.6


def _full_activations(model: Model, tp: int, knobs, precision: str, activation_factor: float = 1.0) -> np.ndarray:
    """Per sample, per GPU: every byte each layer keeps for backward without recomputation; a
    block keeps `activation_factor` times a fused block's (the execution profile's: eager code
    keeps unfused intermediates, compiled code recomputes cheap ones)."""
    cols = model.columns
    replicated = cols["activation_replicated_bytes"]
    sp = tp if knobs.sequence_parallel else 1
    full = (replicated / sp + (cols["activation_bytes"] - replicated) / tp) / knobs.cp
    full = full * np.where(_blocks(model) > 0, activation_factor, 1.0)
    return full * FP8_ACTIVATION_SHARE if precision in LOW_PRECISIONS else full


def activation_terms(model: Model, tp: int, knobs, training) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, per GPU: (bytes each layer keeps for backward, each layer's transient peak).
    Korthikanti et al.: tensor parallelism splits all but the replicated part (layer-norm and
    dropout inputs), which sequence parallelism splits too; context parallelism splits every
    token-indexed tensor; selective recomputation drops the attention scores (Megatron,
    DeepSpeed) or keeps only what op-level checkpointing keeps (FSDP), rebuilding the rest of one
    block at a time; full recomputation keeps only each layer's input and rebuilds one layer's
    activations at a time. A fused cross-entropy (`training.fused_loss`) writes the gradient into
    the 16-bit logits in place and needs none of the loss's fp32 buffers."""
    cols = model.columns
    cp = knobs.cp
    sp = tp if knobs.sequence_parallel else 1
    factor = execution_profile(training.framework, training.compile).activation_factor
    full = _full_activations(model, tp, knobs, training.precision, factor)
    loss_share = 0.0 if training.fused_loss else loss_buffers(training.framework, training.compile)
    workspace = cols["workspace_bytes"] * loss_share / tp / cp
    if knobs.recompute == "full":
        inputs = np.concatenate([[0.0], cols["output_bytes"][:-1]]) / sp / cp
        return inputs, workspace + full
    if knobs.recompute == "selective":
        ops = op_checkpoint_block(model) if training.engine == "fsdp" else None
        if ops is not None:
            kept = np.where(_blocks(model) > 0, np.minimum(
                _op_kept_bytes(model, tp, knobs, training.bytes_per_element, ops), full), full)
            return kept, workspace + (full - kept)
        _, score_bytes = attention_core(model)
        full = np.maximum(full - _blocks(model) * score_bytes / tp / (cp * cp), 0.0)
    return full, workspace


def zero3_collectives(framework: str, recompute: str) -> float:
    """ZeRO-3 / FSDP collectives per layer per micro-batch: the parameters all-gathered for forward
    and again for backward, the gradients reduce-scattered. DeepSpeed's ZeRO-3 releases a module's
    parameters after every forward, so full recomputation gathers them once more before backward;
    FSDP's backward hook gathers a block once and recomputes it with those parameters."""
    return 4.0 if engine_of(framework) == "deepspeed" and recompute == "full" else 3.0


def zero3_layer_time(params: np.ndarray, bytes_per_element: int, tp: int, shard: tuple[float, float],
                     collectives: float = 3.0) -> np.ndarray:
    """ZeRO-3 / FSDP seconds per layer per micro-batch on the sharding ring (`shard`: seconds per
    byte already scaled by (n - 1)/n, latency): `collectives` passes (zero3_collectives) of each
    layer's parameters on this GPU (`params`, before tp)."""
    spb, _ = shard
    return collectives * params * (bytes_per_element / tp) * spb
