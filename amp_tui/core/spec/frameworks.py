"""Framework profiles: what each way of running a training step costs beyond its FLOPs and bytes.

A profile is named data, not code: the host time to issue one transformer block's kernels forward
and backward, the host time to issue one collective, how much element-wise memory traffic and how
many saved activations its kernels have against a fused block's (Korthikanti et al.), and how many
of the loss's fp32 logit copies it holds. `training.framework` picks the profile; with
`training.compile` the compiled profile replaces the framework's execution figures (the engine's
gradient reduction, sharding and loss stay the framework's).

The host figures are the defaults of the cost model's parameters `host_forward_s.KEY`,
`host_backward_s.KEY` and `collective_host_s.KEY` (params.py), so a scenario's calibration, or a
profile measured on the user's own GPU and software, overrides them by name; the cost model
reads them only through `ModelParams`.

Where the figures come from (docs/cost-model.md):
- eager PyTorch (torchtitan, Composer and plain-torch blocks): ../shared/reference/h200_measurements.yaml, one GPT block in plain torch under bf16
  autocast on an H200 (PyTorch 2.11): below a size the block takes ~0.5 ms forward and ~2.0 ms
  forward + backward at any tp and micro-batch size. That is the host issuing ~20 kernels forward
  (27.6 us each with autocast's casts) and ~45 backward through the autograd engine (31.9 us
  each): the medians of the floor-bound rows (validation/blocks.py, floor_from_measurements),
  0.552 ms forward and 1.436 ms backward, over those kernel counts.
- Hugging Face model code: the same per-kernel costs over its GPT2Block's kernels, ~29 forward and
  ~57 backward (tanh-GELU written out as 8 element-wise kernels in place of one; attention and
  residual dropout on by default).
- Megatron-LM (Transformer Engine or apex: fused layer norm + GEMM, fused bias-GELU, fused
  softmax) and Megatron-DeepSpeed (apex fused layer norm, fused softmax, JIT-fused bias-GELU and
  bias-dropout-add): the same per-kernel host cost over their kernel counts (~14 and ~17 forward).
- torch.compile (Inductor): element-wise chains fused into ~10 kernels forward and ~20 backward,
  launched by the generated wrapper (~8 us each, no dispatcher), one autograd node per compiled
  region; `cudagraphs` (mode="reduce-overhead") replays a captured graph: ~1 us per kernel.
- element-wise traffic: Hugging Face's GPT-2 block writes tanh-GELU as 8 element-wise kernels, keeps
  the residual stream and layer norms in fp32 under autocast and casts every weight per forward:
  ~520 h bytes per token forward + backward against the fused block's ~200 h (x2.6), in small
  kernels that reach about three quarters of the memory bandwidth a long one does (x3.5 in all);
  Inductor fuses each chain of element-wise kernels into one, ~120 h (x0.6). The x3.5 and x0.6
  were chosen knowing the issue's GPT-2 medium runs on one H200 (eager 1.87x slower than
  compiled at micro-batch 32), not fitted to them (docs/cost-model.md). Hugging Face's block keeps
  ~64 h bytes per token for backward (the GELU's intermediates, fp32 norm inputs, dropout masks)
  against Korthikanti's 34 h (x1.9). Inductor's min-cut partition keeps ~30 h (x0.9).
- the loss: Hugging Face upcasts the logits to fp32, copies the shifted ones and keeps the
  log-softmax (1.5 of the three fp32 copies); compiled with the model (`compile_covers_loss`), the
  upcast, log-softmax and gradient fuse, leaving about one copy (0.33). torchtitan compiles each
  block, not its loss, which keeps the framework's figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class FrameworkProfile:
    """The fixed costs and memory habits of one framework (or of compiled execution)."""

    key: str
    description: str
    forward_kernels: int            # kernels one transformer block launches forward
    backward_kernels: int           # and backward (input and weight gradients)
    host_s_per_forward_kernel: float    # host time to issue one: Python, dispatcher, autocast
    host_s_per_backward_kernel: float   # the autograd engine's, per backward kernel
    collective_host_s: float        # host time to issue one collective (c10d / NCCL enqueue)
    elementwise_traffic: float      # element-wise memory traffic against a fused block's
    activation_factor: float        # bytes kept for backward against a fused block's (Korthikanti)
    loss_buffers: float             # share of the loss's three fp32 logit copies held at its peak
    compile_covers_loss: bool = False   # torch.compile wraps the model with its loss (Hugging Face)
    # Kernels of a LLaMA-style block (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention)
    # against a GPT block's: eager code writes RMSNorm as 8 kernels and rotary embeddings as ~10
    # (x1.9 counted, as the H200 rows show: a Llama block's floor is ~1.9x a GPT block's); fused
    # and compiled code runs each as one or two (x1.2).
    gated_block_kernels: float = 1.9
    # The stack: the engine whose conventions it follows (what it allocates, shards and
    # overlaps: "megatron", "deepspeed", "fsdp", "pytorch"; the key where empty) and the year
    # of its software (PyTorch, CUDA, NCCL), which sets what the runtime holds (terms/runtime.py).
    engine: str = ""
    era: int = 2024
    # Share of the host's issue time the GPU's work hides: 1, a layer takes the longer of the two
    # (the host runs ahead); 0, their sum (the host waits for the GPU at every layer).
    host_overlap: float = 1.0
    # The pipeline engine's own cost per micro-batch on each stage beyond the sends' NCCL time and
    # the fitted micro_batch_overhead_s every engine pays (params pipeline_engine_s.PROFILE).
    pipeline_engine_s: float = 0.0
    # fp16 training keeps its fp32 master gradients between steps (zeroed, not freed): Megatron-LM
    # 1.x's FP16_Optimizer (megatron/fp16/fp16.py zero_grad, set_grads_to_None False by default).
    keeps_master_grads: bool = False

    @property
    def engine_key(self) -> str:
        return self.engine or self.key

    @property
    def eager_module_loading(self) -> bool:
        """CUDA loads every kernel at start: PyTorch before 1.13 (late 2022) did not ask for lazy loading."""
        return self.era <= 2022

    @property
    def nccl_runtime_connect(self) -> bool:
        """NCCL connects only the algorithms that run (NCCL_RUNTIME_CONNECT, 2.22, mid-2024)."""
        return self.era >= 2024

    @property
    def tf32(self) -> bool:
        """Whether fp32 matrix multiplies run on TF32 tensor cores unless told otherwise: PyTorch 1.7
        to 1.11 allowed it by default (torch.backends.cuda.matmul.allow_tf32; off from 1.12, mid-2022),
        and NGC's containers, where Megatron-LM and NeMo run, still do (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE)."""
        return self.era <= 2022 or self.engine_key == "megatron"

    @property
    def p2p_by_broadcast(self) -> bool:
        """DeepSpeed's pipeline engine sends by broadcast in groups of two before PyTorch 1.8 (2021)."""
        return self.era <= 2020

    @property
    def host_forward_s(self) -> float:
        return self.forward_kernels * self.host_s_per_forward_kernel

    @property
    def host_backward_s(self) -> float:
        return self.backward_kernels * self.host_s_per_backward_kernel


# Eager PyTorch's per-kernel host costs, from the H200 block measurements (module docstring); a
# test checks them against the measurements.
_EAGER_FORWARD_KERNEL_S = 27.6e-6
_EAGER_BACKWARD_KERNEL_S = 31.9e-6

PROFILES: dict[str, FrameworkProfile] = {p.key: p for p in (
    FrameworkProfile("megatron", "Megatron-LM / NeMo (Transformer Engine or apex fused kernels)",
                     14, 30, _EAGER_FORWARD_KERNEL_S, _EAGER_BACKWARD_KERNEL_S, 20e-6, 1.0, 1.0, 1.0,
                     gated_block_kernels=1.2),
    # DeepSpeed's share of the loss buffers is fitted to AMP's runs on its pipeline engine, the only
    # published runs on it that ran out of memory (docs/validation.md).
    FrameworkProfile("deepspeed", "DeepSpeed, Megatron-DeepSpeed (apex and JIT-fused kernels)",
                     17, 38, _EAGER_FORWARD_KERNEL_S, _EAGER_BACKWARD_KERNEL_S, 20e-6, 1.0, 1.0, 0.875,
                     gated_block_kernels=1.2),
    FrameworkProfile("fsdp", "PyTorch FSDP trainers (torchtitan, llm-foundry / Composer)",
                     20, 45, _EAGER_FORWARD_KERNEL_S, _EAGER_BACKWARD_KERNEL_S, 20e-6, 1.0, 1.0, 1.0),
    FrameworkProfile("pytorch", "plain PyTorch: DDP or FSDP over Hugging Face transformers, accelerate or "
                     "Lightning model code, eager, bf16/fp16 autocast over fp32 weights",
                     29, 57, _EAGER_FORWARD_KERNEL_S, _EAGER_BACKWARD_KERNEL_S, 20e-6, 3.5, 1.9, 1.5,
                     compile_covers_loss=True),
    FrameworkProfile("compiled", "torch.compile (Inductor): fused element-wise kernels, one autograd node "
                     "per compiled region", 10, 20, 8e-6, 8e-6, 20e-6, 0.6, 0.9, 0.33, gated_block_kernels=1.2),
    FrameworkProfile("cudagraphs", "torch.compile(mode='reduce-overhead'): the compiled kernels replayed "
                     "from CUDA graphs", 10, 20, 1e-6, 1e-6, 2e-6, 0.6, 0.9, 0.33, gated_block_kernels=1.2),
)}



def _stack(base: str, key: str, description: str, era: int, **changes) -> FrameworkProfile:
    """A dated stack of an engine: its profile with the software of that year."""
    return replace(PROFILES[base], key=key, description=description, engine=base, era=era, **changes)


# The 2020 stack (Megatron-LM v1.1.5's GPT-2 code under PyTorch 1.5-1.7; AMP's code ran DeepSpeed's
# pipeline engine on it), from AMP's own layer times (reference/layer_profiles.yaml: a GPT-2
# medium block's forward per sample at micro-batch 1, T4 and V100, tp 1, 2, 4). They are the GPU's
# time plus a host time the GPU does not hide: with the analytic GPU times (T4 2.74, V100 1.24 ms
# forward at tp 1) one host time of 2.70 ms gives both GPUs (T4 5.47, V100 3.92 ms measured; the
# longer of the two would give one or the other, not both), and each tensor-parallel all-reduce adds
# 0.57 ms beyond its modelled NCCL time (0.39-0.83 ms over tp 2 and 4 on either GPU): PyTorch
# 1.5's c10d call and its stream synchronisation, not NCCL's wire time. The block runs unfused
# (~30 kernels forward: bias adds, scale, mask, softmax, dropout, GELU written out), so ~90 us per
# kernel from Python; backward kernels are issued by the autograd engine's C++ thread, taken at
# today's per-kernel figure (no measurement of the 2020 backward exists here).
_STACK_2020 = dict(forward_kernels=30, backward_kernels=60, host_s_per_forward_kernel=2.70e-3 / 30,
                   collective_host_s=0.57e-3, host_overlap=0.0)
# DeepSpeed's pipeline engine (runtime/pipe/engine.py, p2p.py) runs each micro-batch as
# instructions (load, forward, backward, and a send and a receive per neighbour), each a Python call,
# and sends blocking: the sender waits for its receiver (before PyTorch 1.8 a broadcast in a group
# of two). Per micro-batch on a stage: two blocking calls at the stack's collective cost and four
# instructions at its per-kernel Python cost: 2020 2 x 0.57 + 4 x 0.09 ms; later 2 x 0.02 + 4 x 0.028.
_DEEPSPEED_PIPE_2020_S = 2 * 0.57e-3 + 4 * 2.70e-3 / 30
_DEEPSPEED_PIPE_S = 2 * 20e-6 + 4 * 27.6e-6


PROFILES["deepspeed"] = replace(PROFILES["deepspeed"], pipeline_engine_s=_DEEPSPEED_PIPE_S)
# The 2021-2022 stacks (PyTorch 1.8-1.12): the eager per-kernel figures, and a c10d collective of
# 0.15 ms on the host: the issue-26 quoted Megatron-DeepSpeed run (GPT h1024, 24 layers, tp 8 on 8
# A100s, micro-batch 1: 2.54 ms a block a micro-batch if its global batch was 32) sits 0.6 ms a block
# above today's figures, over the block's four all-reduces (one run, its batch assumed: a weak
# figure, the only one here).
_STACK_2022 = dict(collective_host_s=0.15e-3)
PROFILES.update({p.key: p for p in (
    _stack("megatron", "megatron-2020", "Megatron-LM 1.x (2020): PyTorch 1.5-1.7, apex, NCCL 2.7", 2020,
           keeps_master_grads=True, **_STACK_2020),
    _stack("megatron", "megatron-2022", "Megatron-LM 2.x-3.x (2021-2022): PyTorch 1.8-1.12, NCCL 2.8-2.12", 2022,
           **_STACK_2022),
    _stack("deepspeed", "deepspeed-2020", "DeepSpeed's pipeline engine on Megatron's GPT-2 (2020): DeepSpeed "
           "0.3, PyTorch 1.5-1.7, NCCL 2.7", 2020, pipeline_engine_s=_DEEPSPEED_PIPE_2020_S, **_STACK_2020),
    _stack("deepspeed", "deepspeed-2022", "DeepSpeed and Megatron-DeepSpeed (2021-2022): DeepSpeed 0.5-0.7, "
           "PyTorch 1.8-1.12, NCCL 2.10-2.12", 2022, pipeline_engine_s=2 * 0.15e-3 + 4 * 27.6e-6, **_STACK_2022),
)})

# The engines: what a training allocates, shards and overlaps (memory.py, cost.py); each stack
# (training.framework) follows one.
ENGINES = ("megatron", "deepspeed", "fsdp", "pytorch")
# What training.framework accepts: the engines as they are today, and dated stacks.
FRAMEWORKS = ("megatron", "deepspeed", "fsdp", "pytorch", "megatron-2020", "megatron-2022", "deepspeed-2020",
              "deepspeed-2022")
# training.compile: False (eager), True (torch.compile's default mode), or "cudagraphs".
COMPILE_MODES = (False, True, "cudagraphs")


def engine_of(framework: str) -> str:
    """The engine a stack follows (ENGINES)."""
    return PROFILES[framework].engine_key


def execution_key(framework: str, compile_mode) -> str:
    """The profile whose host and kernel figures a training runs with."""
    if compile_mode == "cudagraphs":
        return "cudagraphs"
    return "compiled" if compile_mode else framework


def execution_profile(framework: str, compile_mode) -> FrameworkProfile:
    return PROFILES[execution_key(framework, compile_mode)]


def loss_buffers(framework: str, compile_mode) -> float:
    """Share of the loss's fp32 logit copies held: the framework's, or compiled execution's where
    torch.compile wraps the loss too."""
    own = PROFILES[framework]
    return PROFILES[execution_key(framework, compile_mode)].loss_buffers if compile_mode and \
        own.compile_covers_loss else own.loss_buffers


def uses_pytorch_fsdp(framework: str) -> bool:
    """Whether ZeRO-3 under this framework is PyTorch's FSDP (block-wise gathers and prefetch)."""
    return engine_of(framework) in ("fsdp", "pytorch")
