"""Measuring a model's layers: forward and forward + backward per shape, and one optimizer step.

For each distinct layer (shapes.py), tensor-parallel degree and micro-batch size: build the shard
(torch_layers.py, or Hugging Face's with `hf`), run it forward with autograd recording (as training
does), then forward and backward, each timed as the median of `repeats` after `warmups`
(backend.py), and record the peak memory above the layer's weights and inputs. A shape that runs
out of memory is left out and reported. Ctrl+C stops the loop: what was measured is kept and the
profile is marked incomplete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from amp_tui.core.spec.model import Model
from amp_tui.core.spec.profiles import Profile, ProfiledLayer, ProfileRow
from amp_tui.profiling.backend import Device, software_versions
from amp_tui.profiling.shapes import STACKED_BLOCKS, LayerShape, layer_shapes

# The optimizer-step measurement: up to this many copies of the largest layer, and parameters
# (16 bytes each with AdamW's state and the gradient: 16 GB on a GPU, 1 GB on the CPU).
OPTIMIZER_COPIES = 8
OPTIMIZER_PARAMS = 1_000_000_000
OPTIMIZER_PARAMS_CPU = 64_000_000


@dataclass
class Progress:
    """What the progress callback sees after each measured shape."""

    done: int
    total: int
    shape: LayerShape
    tp: int
    micro_batch: int
    row: ProfileRow | None
    note: str
    elapsed_s: float
    left_s: float | None


@dataclass
class Run:
    """The outcome of a profiling run: the profile and what it left out."""

    profile: Profile | None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    interrupted: bool = False


def build_stack(shape: LayerShape, tp: int, ep: int, hf: bool):
    """The module timed for a layer: its shard, or a stack of `shape.copies` of it."""
    if shape.copies == 1:
        return build_layer(shape, tp, ep, hf)
    from torch import nn

    return nn.Sequential(*(build_layer(shape, tp, ep, hf) for _ in range(shape.copies)))


def build_layer(shape: LayerShape, tp: int, ep: int, hf: bool):
    """The torch module of one layer's shard."""
    from amp_tui.profiling import torch_layers as layers

    if hf:
        from amp_tui.profiling.hf_layers import hf_block

        if shape.build == "block":
            return hf_block(shape, tp)
    if shape.build == "block":
        experts = None
        if shape.experts:
            experts = layers.Experts(shape.hidden, shape.experts, shape.top_k, shape.expert_ffn, ep, tp,
                                     gated=shape.family == "llama")
        if shape.family == "llama":
            return layers.LlamaBlock(shape.hidden, shape.heads, shape.kv_heads, shape.ffn, tp, shape.sequence,
                                     shape.theta, experts)
        return layers.GptBlock(shape.hidden, shape.heads, shape.ffn, tp, experts)
    if shape.build == "embedding":
        return layers.Embedding(shape.vocab, shape.hidden, tp, shape.sequence, positions=shape.family != "llama")
    if shape.build in ("head", "projection"):
        norm = ("rms" if shape.family == "llama" else "layer") if shape.build == "head" else None
        return layers.Head(shape.hidden, shape.vocab, tp, norm, loss=shape.build == "head")
    if shape.build == "loss":
        return layers.Loss()
    return layers.Norm(shape.hidden, rms=shape.family == "llama")


def _inputs(device: Device, shape: LayerShape, tp: int, micro_batch: int):
    """(args, needs a gradient at the output?) for one call of the layer."""
    torch = device.torch
    s, vocab = shape.sequence, max(shape.vocab // tp, 1)
    labels = torch.randint(0, vocab, (micro_batch, s), device=device.device)
    if shape.takes == "ids":
        return (labels,)
    if shape.takes == "logits":
        dtype = device.dtype or torch.float32
        return (torch.randn(micro_batch, s, vocab, device=device.device, dtype=dtype, requires_grad=True), labels)
    x = torch.randn(micro_batch, s, shape.hidden, device=device.device, requires_grad=True)
    return (x, labels) if shape.build == "head" else (x,)


def measure_backward_call(device: Device) -> float:
    """Seconds a backward() call costs whatever it computes (the autograd engine starting, its
    thread handing back): forward and backward of one multiply on one number. A model pays it
    once per micro-batch (the cost model's micro_batch_overhead_s), not once per layer, so it is
    taken out of each layer's measured backward."""
    torch = device.torch
    one = torch.ones((), device=device.device, requires_grad=True)

    def call():
        (one * 2.0).backward()
    return device.median(call)


def measure_shape(device: Device, module, shape: LayerShape, tp: int, micro_batch: int,
                  backward_call_s: float = 0.0) -> ProfileRow:
    """One layer (or a stack of copies) at one shape; the per-copy times, less a backward call's
    fixed cost (measure_backward_call) in each backward, never below the forward they contain."""
    torch = device.torch
    args = _inputs(device, shape, tp, micro_batch)
    state: dict = {}

    def forward():
        with device.autocast():
            state["out"] = module(*args)

    def forward_backward():
        forward()
        out = state.pop("out")
        if out.dim() == 0:
            out.backward()
        else:
            if "grad" not in state:     # made in the first (warm-up) run, outside the timed ones
                state["grad"] = torch.randn_like(out)
            out.backward(state["grad"])

    def clear():
        state.pop("out", None)
        module.zero_grad(set_to_none=True)
        for arg in args:
            arg.grad = None

    def checkpointed():
        """Forward and backward with each copy checkpointed, as full recomputation runs a block."""
        from torch.utils.checkpoint import checkpoint

        with device.autocast():
            x = args[0]
            for copy in (module if shape.copies > 1 else [module]):
                x = checkpoint(copy, x, use_reentrant=False)
        x.backward(state["grad"])

    copies = shape.copies
    forward_s = device.median(forward, prepare=clear) / copies
    clear()
    base = device.reset_peak()
    # Noise can put a median below the one it contains: keep forward <= forward + backward <= recompute.
    both_s = max((device.median(forward_backward, prepare=clear) - backward_call_s) / copies, forward_s)
    peak = device.peak_since(base)
    clear()
    recompute_s = None
    if shape.build == "block":
        recompute_s = max((device.median(checkpointed, prepare=clear) - backward_call_s) / copies, both_s)
        clear()
    return ProfileRow(tp=tp, micro_batch=micro_batch, forward_s=forward_s, forward_backward_s=both_s,
                      peak_memory_bytes=None if peak is None else peak / copies, recompute_s=recompute_s)


def measure_optimizer(device: Device, shapes: list[LayerShape], ep: int) -> float | None:
    """Seconds per parameter of one Adam step (PyTorch's AdamW, foreach on a GPU, as trainers run
    it): timed over one copy of the largest layer and over up to OPTIMIZER_COPIES copies, the
    slope between the two. The step is memory-bound, so it grows with the parameters; the slope
    leaves out its fixed cost (launches, the foreach grouping), which per parameter of one small
    layer would be taken for eight times the step of a whole GPT-2 medium."""
    torch = device.torch
    blocks = [s for s in shapes if s.build == "block"] or shapes
    shape = max(blocks, key=lambda s: s.params)
    limit = OPTIMIZER_PARAMS if device.kind == "cuda" else OPTIMIZER_PARAMS_CPU
    copies = max(1, min(OPTIMIZER_COPIES, int(limit // max(shape.params, 1))))
    points = []
    for count in dict.fromkeys((1, copies)):
        with device.device:
            modules = [build_layer(shape, 1, ep, False) for _ in range(count)]
        params = [p for module in modules for p in module.parameters()]
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer = torch.optim.AdamW(params, lr=1e-4, foreach=device.kind == "cuda")
        points.append((sum(p.numel() for p in params), device.median(optimizer.step)))
        del optimizer, modules, params
        device.free()
    (n1, t1), (n2, t2) = points[0], points[-1]
    if n2 > n1 and t2 > t1:
        return (t2 - t1) / (n2 - n1)
    return t2 / n2 if n2 else None


def time_left(spent: dict[int, tuple[float, float]], remaining) -> float | None:
    """Seconds the `remaining` (shape, tp, micro-batch) measurements should take, each at its own
    layer's rate so far (seconds per unit of LayerShape.work); None while a layer still to come has
    not been timed at all: one layer's rate says little of another's (on the CPU an embedding's
    backward, a dense gradient of the whole vocabulary, ran at 100 times a block's rate: the
    estimate it gave was 14 h for a 6-minute run)."""
    left = 0.0
    for shape, tp, micro_batch in remaining:
        seconds, work = spent.get(shape.index, (0.0, 0.0))
        if work <= 0:
            return None
        left += seconds / work * shape.work(tp, micro_batch)
    return left


def profile_model(model: Model, device: Device, *, gpu: str, precision: str, sequence: int,
                  tps: list[int], micro_batches: list[int], ep: int = 1, hf: bool = False,
                  optimizer: bool = True, on_progress=None, tool_version: str = "") -> Run:
    """Measure every distinct layer of `model` at each tp and micro-batch size (see module doc)."""
    torch = device.torch
    stack = STACKED_BLOCKS if device.kind == "cuda" else 1
    shapes, skipped = layer_shapes(model, sequence, stack)
    plan = [(shape, tp, m) for shape in shapes for tp in tps for m in micro_batches]
    hf_ok = (lambda shape, tp: True)
    if hf:
        from amp_tui.profiling.hf_layers import hf_supported

        hf_ok = (lambda shape, tp: shape.build != "block" or hf_supported(shape, tp))
    for shape in shapes:
        for tp in tps:
            if not shape.tp_supported(tp):
                skipped.append((shape.name, f"tp {tp} does not divide its {shape.heads} heads"))
            elif not hf_ok(shape, tp):
                skipped.append((shape.name, f"tp {tp}: Hugging Face's {shape.family} block has no tp shard"))
    plan = [(shape, tp, m) for shape, tp, m in plan if shape.tp_supported(tp) and hf_ok(shape, tp)]
    rows: dict[int, list[ProfileRow]] = {}
    began = time.perf_counter()
    spent: dict[int, tuple[float, float]] = {}      # per layer: seconds and work measured so far
    interrupted = False
    step = None
    built: tuple | None = None
    backward_call_s = 0.0
    try:
        backward_call_s = measure_backward_call(device)
        for done, (shape, tp, micro_batch) in enumerate(plan, start=1):
            started = time.perf_counter()
            key = (shape.index, tp)
            if built is None or built[0] != key:
                built = None
                device.free()
                torch.manual_seed(0)
                with device.device:       # weights made where they run (a CPU-side init of GBs is slow)
                    built = (key, build_stack(shape, tp, ep, hf))
            note = ""
            row = None
            try:
                row = measure_shape(device, built[1], shape, tp, micro_batch, backward_call_s)
                rows.setdefault(shape.index, []).append(row)
            except RuntimeError as err:
                if not device.out_of_memory(err):
                    raise
                note = "out of memory: left out"
                skipped.append((shape.name, f"tp {tp}, micro-batch {micro_batch}: out of memory"))
                device.free()
            seconds, work = spent.get(shape.index, (0.0, 0.0))
            spent[shape.index] = (seconds + time.perf_counter() - started, work + shape.work(tp, micro_batch))
            if on_progress is not None:
                on_progress(Progress(done, len(plan), shape, tp, micro_batch, row, note,
                                     time.perf_counter() - began, time_left(spent, plan[done:])))
        built = None
        if optimizer and shapes:
            step = measure_optimizer(device, shapes, ep)
    except KeyboardInterrupt:
        interrupted = True
    built = None
    device.free()
    measured = tuple(ProfiledLayer(name=s.name, kind=s.kind, params=s.params, flops=s.flops, rows=tuple(rows[s.index]))
                     for s in shapes if rows.get(s.index))
    if not measured:
        return Run(None, skipped, interrupted)
    profile = Profile(
        # (the precision timed: the CPU's fp32 stands in for the scenario's, and says so)
        model=model.name, precision="fp32" if device.kind == "cpu" else precision,
        gpu=gpu, device=device.kind, sequence_length=sequence,
        device_name=device.name, software=tuple(software_versions(device, tool_version).items()),
        implementation="hf" if hf else "plain",
        measured_at=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        timing=(("clock", device.clock), ("warmups", str(device.warmups)), ("repeats", str(device.repeats)),
                ("statistic", "median"), ("stack", f"repeated blocks timed {stack} at a time, time / {stack}"),
                ("backward_call_s", f"{backward_call_s:.3g} (a backward() call's fixed cost, taken out of each)"),
                *((("expert_parallel", f"{ep} (each block ran 1/{ep} of its experts)"),)
                  if any(s.experts for s in shapes) else ()),
                ("dtype", str(device.dtype or "float32").replace("torch.", ""))),
        complete=not interrupted,
        layers=measured, optimizer_step_s_per_param=step, optimizer_name="adam" if step else "")
    return Run(profile, skipped, interrupted)
