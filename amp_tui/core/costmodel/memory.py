"""Per-GPU memory terms (bytes) for one pipeline stage, as the engines allocate them.

  weights, gradients, fp32 main gradients,   bytes per parameter by engine, precision, optimizer
  optimizer state                            and ZeRO stage (engine_state below)
  activations                                kept for backward, per micro-batch in flight
  workspace                                  the largest transient buffer (e.g. fp32 logits for the loss),
                                             plus, under full recomputation, one layer's full activations
  optimizer step                             what the step allocates beyond backward's peak (fp32
                                             gradient copies): the peak is the larger of the two phases
  buffers                                    the engine's communication buckets (DDP, DeepSpeed)
  allocator reserve                          what PyTorch's caching allocator holds beyond its tensors
  CUDA context, NCCL                         outside PyTorch's allocator (terms/runtime.py)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from amp_tui.core.spec.frameworks import PROFILES, uses_pytorch_fsdp
from amp_tui.core.spec.scenario import Training

# Bytes the optimizer step reads and writes per parameter (it is memory-bound).
_OPTIMIZER_TRAFFIC = {"adam": 28, "sgd": 16}
# fp32 optimizer state beside fp32 weights: Adam's two moments, SGD's momentum.
_MOMENTS = {"adam": 8, "sgd": 4}


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter held on one GPU, after ZeRO sharding over `dp` replicas.

    `weights`, `gradients` (in the training precision), `main_gradients` (fp32 gradients held
    through backward beside 16-bit ones), `optimizer` (fp32 master weights and moments) and
    `buckets` (an engine's gradient bucket copies) are held through the iteration; `step` is what
    the optimizer step allocates for itself (fp32 gradient copies), after backward has freed the
    activations; `reduced` is what the gradient all-reduce moves per parameter."""

    weights: float
    gradients: float
    optimizer: float
    main_gradients: float = 0.0
    buckets: float = 0.0
    step: float = 0.0
    reduced: float = 2.0

    @property
    def total(self) -> float:
        """What is held through the iteration (the step's transient apart)."""
        return self.weights + self.gradients + self.main_gradients + self.optimizer + self.buckets


@dataclass(frozen=True)
class EngineState:
    """Bytes per parameter before sharding, and which ZeRO stage first shards each (4: never)."""

    weights: float
    gradients: float
    main_gradients: float
    optimizer: float
    step: float = 0.0
    buckets: float = 0.0          # held whole, whatever the ZeRO stage (DDP's bucket copies)
    main_from: int = 2            # main gradients sharded from this ZeRO stage on
    optimizer_from: int = 1       # optimizer state sharded from this ZeRO stage on
    step_from: int = 1            # the step's fp32 copies: of the shard's gradients only


def engine_state(engine: str, precision: str, optimizer: str, zero_stage: int, dp: int,
                 fp32_gradients: bool | None = None) -> EngineState:
    """Per parameter, what each engine keeps (read in each engine's source):

    - Megatron-LM (docs/user-guide/features/dist_optimizer.md, training/arguments.py): bf16 forces
      fp32 gradient accumulation and all-reduce (`accumulate_allreduce_grads_in_fp32`): the
      gradient buffer is fp32 and the bf16 `.grad` is never kept: 2 + 4 + 12 = 18 bytes, 6 + 12/d
      with the distributed optimizer (ZeRO-1), as its docs' table says; fp8 and fp4 train bf16
      weights the same way. fp16 keeps an fp16 buffer; the step copies the gradients (of its shard)
      to fp32 (`main_param.grad = main_grad.float()`, freed by `zero_grad(set_to_none)`): the
      docs' 20 and 4 + 16/d, the fp32 copy living only through the step.
    - DeepSpeed (runtime/engine.py `_do_optimizer_sanity_check`, bf16_optimizer.py): bf16 without
      ZeRO, or with ZeRO-1 and fp32 gradient accumulation (Megatron-DeepSpeed's configs set
      `grad_accum_dtype: fp32`; DeepSpeed 0.8.0 made it the default), runs BF16_Optimizer: bf16
      weights and gradients, a flat fp32 gradient buffer of the whole model (`fp32_groups_
      gradients_flat`: not sharded) and fp32 master and moments partitioned over the data-parallel
      ranks even at stage 0: 8 + 12/d; its all-reduce after backward flattens the fp32 gradients
      into buckets of 5e8 elements (engine.py `buffered_allreduce_fallback`, counted uncapped).
      fp16 without ZeRO (fp16/fused_optimizer.py) flattens the
      gradients to fp32 for the step (`fp32_groups_flat[i].grad`, freed after it); with ZeRO-1/2
      (zero/stage_1_and_2.py) the step's fp32 copy is of the partition only.
    - plain PyTorch (autocast over fp32 weights): fp32 weights and gradients and AdamW's moments,
      no master copy: 4 + 4 + 8; DDP's reducer keeps its buckets as copies of the gradients
      (`gradient_as_bucket_view` is off by default): 4 more under data parallelism.
    - FSDP (torchtitan's FSDP2: fp32 sharded parameters, bf16 gathered, fp32 reduce) and ZeRO-3
      shard everything: 16 / d, kept in the 2 + 2 + 12 split.
    fp32 training is 4 + 4 and the moments everywhere. `fp32_gradients` false (NVIDIA's performance
    recipes: Megatron-Bridge's `grad_reduce_in_fp32=False`, Megatron-LM's --grad-reduce-in-bf16;
    DeepSpeed's `grad_accum_dtype: bf16`) keeps 16-bit gradient buffers instead; None, the engine's
    own default."""
    moments = _MOMENTS[optimizer]
    if precision in ("fp32", "tf32"):
        return EngineState(4.0, 4.0, 0.0, moments, buckets=4.0 if _ddp(engine, zero_stage, dp) else 0.0)
    if engine == "pytorch" and zero_stage < 3:
        return EngineState(4.0, 4.0, 0.0, moments, buckets=4.0 if _ddp(engine, zero_stage, dp) else 0.0)
    master = 4.0 + moments          # fp32 master weights and moments
    if engine == "megatron":
        if fp32_gradients is False or (precision == "fp16" and fp32_gradients is None):
            return EngineState(2.0, 2.0, 0.0, master, step=4.0)
        return EngineState(2.0, 0.0, 4.0, master)
    if engine == "deepspeed" and zero_stage < 3:
        if precision != "fp16" and zero_stage <= 1 and fp32_gradients is not False:
            # BF16_Optimizer; its all-reduce flattens the fp32 gradients
            return EngineState(2.0, 2.0, 4.0, master, step=4.0 if dp > 1 else 0.0, main_from=4, optimizer_from=0,
                               step_from=4)
        return EngineState(2.0, 2.0, 0.0, master, step=4.0, step_from=1)
    return EngineState(2.0, 2.0, 0.0, master)


def _ddp(engine: str, zero_stage: int, dp: int) -> bool:
    """PyTorch DDP (plain PyTorch's data parallelism without sharding) over more than one rank."""
    return engine == "pytorch" and zero_stage == 0 and dp > 1


def state_bytes_per_param(training: Training, dp: int, zero_stage: int | None = None, pp: int = 1) -> StateBytes:
    """Per parameter on one GPU, as the engine (`training.framework`) keeps it (engine_state);
    ZeRO-1 (Megatron's distributed optimizer) shards the optimizer state over the `dp` ranks that
    hold the parameter, ZeRO-2 the gradients too, ZeRO-3 (FSDP) the weights as well. FSDP under
    pipeline parallelism (torchtitan) gathers a stage's weights once per iteration and keeps them,
    with their gradients accumulated whole in fp32, until the last micro-batch, rather than
    gathering them again for every micro-batch. A stated `training.state_bytes_per_param` is split
    as the weights and gradients in the training precision and the rest optimizer state."""
    stage = training.zero_stage if zero_stage is None else zero_stage
    e = training.bytes_per_element
    if training.state_bytes_override is not None:
        optimizer = training.state_bytes_override - 2 * e
        return StateBytes(weights=e / dp if stage >= 3 else e, gradients=e / dp if stage >= 2 else e,
                          optimizer=optimizer / dp if stage >= 1 else optimizer, reduced=e)
    if stage >= 3 and pp > 1 and uses_pytorch_fsdp(training.framework):
        optimizer = training.state_bytes_per_param - 2 * e
        return StateBytes(weights=e + e / dp, gradients=max(e, 4) + e / dp, optimizer=optimizer / dp, reduced=e)
    s = engine_state(training.engine, training.precision, training.optimizer, stage, dp, training.grad_reduce_in_fp32)
    if s.step and PROFILES[training.framework].keeps_master_grads:     # held between steps, not made by each
        s = replace(s, main_gradients=s.main_gradients + s.step, step=0.0, main_from=s.step_from)

    def shard(value: float, first: int) -> float:
        return value / dp if stage >= first else value

    # The gradient all-reduce moves the buffers it reduces: fp32 main gradients (Megatron's bf16,
    # DeepSpeed's BF16_Optimizer), DDP's fp32 gradients under autocast, else the training precision's.
    reduced = 4.0 if s.main_gradients or s.gradients == 4.0 else float(e)
    return StateBytes(weights=shard(s.weights, 3), gradients=shard(s.gradients, 2),
                      main_gradients=shard(s.main_gradients, s.main_from), optimizer=shard(s.optimizer, s.optimizer_from),
                      buckets=s.buckets, step=shard(s.step, s.step_from), reduced=reduced)


# DeepSpeed ZeRO-3's defaults: parameters gathered at once (stage3_max_live_parameters) and the
# gradient elements reduced per bucket (reduce_bucket_size); Megatron-FSDP buckets likewise.
ZERO3_MAX_LIVE_PARAMS = 1e9
ZERO3_REDUCE_BUCKET = 5e8


def zero3_gathered_params(layer_params, framework: str):
    """Parameters (per GPU, per layer) ZeRO-3 holds whole while a layer runs, beyond its shard.
    PyTorch FSDP gathers a whole wrapped block, prefetches the next and holds its unsharded
    gradient: 3 layers. DeepSpeed (and Megatron-FSDP) gather module by module up to a bound on the
    live parameters and reduce gradients in buckets: a 5-billion-parameter layer does not sit whole."""
    if uses_pytorch_fsdp(framework):
        return 3.0 * layer_params
    return np.minimum(2.0 * layer_params, ZERO3_MAX_LIVE_PARAMS) + np.minimum(layer_params, ZERO3_REDUCE_BUCKET)


# DeepSpeed's 16-bit optimizer wrapper moves the gradients through a flat fp32 buffer around the
# fused step: copy in (2 read, 4 written), unscale and clip (4 + 4, and 4 read for the norm), and
# the fp32 master weights back to 16 bits (4 read, 2 written).
_DEEPSPEED_FP16_WRAPPER = 24


def optimizer_traffic_per_param(training: Training, dp: int, zero_stage: int | None = None) -> float:
    """Bytes moved per parameter by one optimizer step on one GPU (ZeRO shards the step too)."""
    stage = training.zero_stage if zero_stage is None else zero_stage
    traffic = _OPTIMIZER_TRAFFIC[training.optimizer]
    if training.engine == "deepspeed" and training.precision not in ("fp32", "tf32"):
        traffic += _DEEPSPEED_FP16_WRAPPER
    return traffic / dp if stage >= 1 else traffic


def micro_batches_in_flight(schedule: str, stage: int, pp: int, num_micro_batches: int,
                            virtual_stages: int = 1) -> float:
    """Micro-batches of activations a stage holds at its peak: 1F1B stage s keeps min(pp - s, B),
    GPipe keeps all B. Megatron's interleaved 1F1B with v chunks per rank warms up with
    2 (pp - s - 1) + (v - 1) pp + 1 chunk passes, each holding 1/v of the stage's activations."""
    if schedule == "gpipe":
        return num_micro_batches
    if virtual_stages > 1:
        warmup = 2 * (pp - stage - 1) + (virtual_stages - 1) * pp + 1
        return min(warmup / virtual_stages, num_micro_batches)
    return min(pp - stage, num_micro_batches)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory per GPU of one stage at its peak, by term. `total_bytes` is what the process holds
    on the GPU (what runs out of memory, and what nvidia-smi shows); `reserved_bytes` what
    PyTorch's caching allocator holds (torch.cuda.max_memory_reserved); `allocated_bytes` its
    tensors (max_memory_allocated)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    workspace_bytes: float
    reserve_bytes: float = 0.0          # a runtime reserve the training states (replaces context and NCCL)
    main_gradients_bytes: float = 0.0   # fp32 gradient accumulation / main gradients
    optimizer_step_bytes: float = 0.0   # the step's fp32 copies beyond backward's peak
    buffers_bytes: float = 0.0          # the engine's communication buckets and pipeline buffers
    allocator_bytes: float = 0.0        # the caching allocator's reserve above its tensors
    context_bytes: float = 0.0          # CUDA context and library workspaces
    nccl_bytes: float = 0.0             # NCCL's communicator buffers

    @property
    def allocated_bytes(self) -> float:
        return (self.weights_bytes + self.gradients_bytes + self.main_gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.workspace_bytes + self.optimizer_step_bytes + self.buffers_bytes)

    @property
    def reserved_bytes(self) -> float:
        return self.allocated_bytes + self.allocator_bytes

    @property
    def total_bytes(self) -> float:
        return self.reserved_bytes + self.context_bytes + self.nccl_bytes + self.reserve_bytes

    def to_dict(self) -> dict:
        return {"weights_bytes": self.weights_bytes, "gradients_bytes": self.gradients_bytes,
                "main_gradients_bytes": self.main_gradients_bytes,
                "optimizer_bytes": self.optimizer_bytes, "activations_bytes": self.activations_bytes,
                "workspace_bytes": self.workspace_bytes, "optimizer_step_bytes": self.optimizer_step_bytes,
                "buffers_bytes": self.buffers_bytes, "allocator_bytes": self.allocator_bytes,
                "context_bytes": self.context_bytes, "nccl_bytes": self.nccl_bytes,
                "reserve_bytes": self.reserve_bytes, "allocated_bytes": self.allocated_bytes,
                "reserved_bytes": self.reserved_bytes, "total_bytes": self.total_bytes}

    def terms(self) -> dict[str, float]:
        """The terms by name, in the order they add up to the total (display)."""
        return {"weights": self.weights_bytes, "gradients": self.gradients_bytes,
                "fp32 main gradients": self.main_gradients_bytes, "optimizer state": self.optimizer_bytes,
                "activations": self.activations_bytes, "workspace": self.workspace_bytes,
                "optimizer step": self.optimizer_step_bytes, "buffers": self.buffers_bytes,
                "allocator reserve": self.allocator_bytes, "CUDA context": self.context_bytes,
                "NCCL": self.nccl_bytes, "runtime reserve": self.reserve_bytes}


def breakdown(state: tuple[float, float, float, float, float], activations: float, workspace: float,
              step: float, runtime: tuple[float, float, float, float], fragmentation: float) -> MemoryBreakdown:
    """One stage's breakdown from its terms: `state` (weights, gradients, main gradients,
    optimizer, buckets) bytes, the activations and workspace as the cost model's arrays hold them
    (grown by the allocator's `fragmentation`), the step's transient, and `runtime` (stated
    reserve, context, NCCL, fixed buffers) bytes. The peak is the larger of backward's (the
    activations and workspace) and the step's (its fp32 copies); the caching allocator's share
    of the activations and workspace is its own term."""
    weights, gradients, main, optimizer, buckets = state
    reserve, context, nccl, buffers = runtime
    grown = activations + workspace
    allocator = grown * fragmentation / (1.0 + fragmentation)
    return MemoryBreakdown(
        weights_bytes=weights, gradients_bytes=gradients, optimizer_bytes=optimizer,
        activations_bytes=activations / (1.0 + fragmentation), workspace_bytes=workspace / (1.0 + fragmentation),
        reserve_bytes=reserve, main_gradients_bytes=main, optimizer_step_bytes=max(step - grown, 0.0),
        buffers_bytes=buckets + buffers, allocator_bytes=allocator, context_bytes=context, nccl_bytes=nccl)


def least_reserve(training: Training, gpu) -> float:
    """The least a GPU of this type holds whatever the strategy: the stated runtime reserve, else
    the CUDA context (NCCL's buffers depend on the strategy): a floor for the search's bounds."""
    from amp_tui.core.costmodel.terms import runtime

    if training.runtime_reserve_bytes is not None:
        return training.runtime_reserve_bytes
    return runtime.context_bytes(gpu.generation, PROFILES[training.framework].eager_module_loading)
