"""How one machine serves the model, layer by layer: a serving profile.

A profile holds four facts about one machine (its GPUs together) running the scenario's model:

- decode step time per layer, by the number of sequences in the batch (one new token each);
- prompt (prefill) time per layer, by the number of prompt tokens in the batch;
- KV-cache room: tokens of context per layer it can hold, by the number of layers it holds
  (its memory less the weights and the engine's workspace, over the bytes one token's keys and
  values take in one layer);
- the engine's batch limits: the most sequences in a decode step, by layers held, and the most
  prompts in one batch.

A node group names a measured profile (`serving_profile: helix-llama2-70b-t4`, a preset under
presets/serving_profiles/, or the same keys inline). Without one, `analytic_profile` models the four
from the GPU's datasheet and the model's shapes (see its docstring); measured profiles win.

Times between measured batch sizes are interpolated linearly. Below the smallest measured decode
batch the step costs what that batch costs (a decode step is latency-bound there); past the largest
measured point both tables extend along their last segment.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import SpecError
from amp_tui.core.base.units import parse_int, parse_number
from amp_tui.core.spec.presets import load_preset, preset_names

PROFILE_KIND = "serving_profiles"
_KEYS = ("name", "description", "model", "gpu", "gpus_per_node", "decode_ms_per_layer", "prompt_ms_per_layer",
         "kv_tokens_per_layer", "max_decode_batch", "max_prompt_requests")
_REQUIRED = ("decode_ms_per_layer", "prompt_ms_per_layer", "kv_tokens_per_layer")
MAX_TABLE_ENTRIES = 4096

# The analytic profile (no measurement): what vLLM-like engines do with a GPU's memory and time.
MEMORY_UTILIZATION = 0.9          # vLLM's default gpu_memory_utilization
WORKSPACE_BYTES = 2.0e9           # activations and CUDA graphs the engine keeps besides weights and KV
DECODE_MEMORY_EFFICIENCY = 0.55   # of datasheet memory bandwidth a decode step's weight and KV reads reach
PROMPT_COMPUTE_EFFICIENCY = 0.45  # of dense fp16 peak a prefill's matrix multiplies reach
LAYER_FLOOR_S = 0.4e-3            # kernel launches of one layer's step, the latency floor of small batches
TP_EFFICIENCY = 0.8               # a machine of g GPUs runs a layer tensor-parallel: g x this of one GPU
DEFAULT_MAX_DECODE_BATCH = 256    # vLLM's default max_num_seqs
DEFAULT_MAX_PROMPT_TOKENS = 2048  # vLLM's max_num_batched_tokens without chunked prefill: one long prompt


@dataclass(frozen=True)
class ServingProfile:
    name: str
    measured: bool
    decode_batch: tuple[float, ...]       # sequences, increasing
    decode_s: tuple[float, ...]           # seconds per layer at that batch
    prompt_tokens: tuple[float, ...]      # tokens, increasing, from 0
    prompt_s: tuple[float, ...]           # seconds per layer
    kv_tokens_per_layer: tuple[float, ...]  # entry k - 1: holding k layers
    max_decode_batch: tuple[int, ...]     # entry k - 1: holding k layers
    max_prompt_requests: int
    model: str = ""                       # the model it was measured with ("" when modelled)

    @property
    def max_layers(self) -> int:
        return len(self.kv_tokens_per_layer)

    def decode_step_s(self, batch: float) -> float:
        """Seconds per layer for a decode step of `batch` sequences."""
        return _extend(max(batch, self.decode_batch[0]), self.decode_batch, self.decode_s)

    def prompt_step_s(self, tokens: float) -> float:
        """Seconds per layer to prefill `tokens` prompt tokens in one batch."""
        return _extend(tokens, self.prompt_tokens, self.prompt_s)

    def kv_tokens(self, layers: int) -> float:
        """Tokens of context per layer a machine holding `layers` layers keeps (0 past its limit)."""
        return self.kv_tokens_per_layer[layers - 1] if 1 <= layers <= self.max_layers else 0.0

    def batch_limit(self, layers: int) -> int:
        return self.max_decode_batch[min(layers, self.max_layers) - 1]


def _extend(x: float, xs: tuple, ys: tuple) -> float:
    """Linear interpolation through the points, continued along the last segment past them."""
    if x > xs[-1] and len(xs) > 1:
        return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (x - xs[-1])
    i = bisect.bisect_right(xs, x)
    if i == 0:
        return ys[0]
    if i == len(xs):
        return ys[-1]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


def _table(value: object, field: str, *, key_min: int = 1, integer_values: bool = False) -> dict[int, float]:
    if not isinstance(value, dict) or not value:
        raise SpecError(field, value, "expected a non-empty map {size: value}")
    if len(value) > MAX_TABLE_ENTRIES:
        raise SpecError(field, f"{len(value)} entries", f"more than the limit of {MAX_TABLE_ENTRIES}")
    out = {}
    for k, v in value.items():
        key = parse_int(k, f"{field}.{k}", minimum=key_min)
        out[key] = (parse_int(v, f"{field}.{k}") if integer_values
                    else float(parse_number(v, f"{field}.{k}", minimum=0)))
    return dict(sorted(out.items()))


def _consecutive(table: dict[int, float], field: str) -> tuple:
    most = max(table)
    missing = [k for k in range(1, most + 1) if k not in table]
    if missing:
        raise SpecError(f"{field}.{missing[0]}", None, f"missing; give every layer count from 1 to {most}")
    return tuple(table[k] for k in range(1, most + 1))


def parse_profile(value: object, field: str = "serving_profile") -> ServingProfile:
    """A profile preset's name, or its keys inline."""
    if isinstance(value, str):
        if value not in preset_names(PROFILE_KIND):
            raise SpecError(field, value, f"no such serving profile; presets: {', '.join(preset_names(PROFILE_KIND))}")
        data = load_preset(PROFILE_KIND, value)
        try:
            return parse_profile(data, "profile")
        except SpecError as err:
            raise SpecError(f"{field} ({value}): {err.field}", err.value, err.reason) from None
    if not isinstance(value, dict):
        raise SpecError(field, value, "expected a serving-profile preset name or a mapping")
    for key in value:
        if key not in _KEYS:
            raise SpecError(f"{field}.{key}", value[key], f"unknown profile field; allowed: {', '.join(_KEYS)}")
    for key in _REQUIRED:
        if key not in value:
            raise SpecError(f"{field}.{key}", None, "required")
    decode = _table(value["decode_ms_per_layer"], f"{field}.decode_ms_per_layer")
    prompt = _table(value["prompt_ms_per_layer"], f"{field}.prompt_ms_per_layer")
    kv = _consecutive(_table(value["kv_tokens_per_layer"], f"{field}.kv_tokens_per_layer"),
                      f"{field}.kv_tokens_per_layer")
    if any(t <= 0 for t in kv):
        raise SpecError(f"{field}.kv_tokens_per_layer", value["kv_tokens_per_layer"], "every entry must be above 0")
    if "max_decode_batch" in value:
        limits = _consecutive(_table(value["max_decode_batch"], f"{field}.max_decode_batch", integer_values=True),
                              f"{field}.max_decode_batch")
        if len(limits) < len(kv):
            raise SpecError(f"{field}.max_decode_batch", value["max_decode_batch"],
                            f"give every layer count up to {len(kv)}, as kv_tokens_per_layer does")
    else:
        limits = (DEFAULT_MAX_DECODE_BATCH,) * len(kv)
    for name, table in (("decode_ms_per_layer", decode), ("prompt_ms_per_layer", prompt)):
        times = list(table.values())     # measured times may dip as the batch grows (noise): kept as given
        if all(t == 0 for t in times):
            raise SpecError(f"{field}.{name}", value[name], "every time is 0")
    prompt = {0: 0.0, **prompt}
    return ServingProfile(
        name=str(value.get("name", "inline")), measured=True,
        decode_batch=tuple(float(b) for b in decode), decode_s=tuple(t / 1000 for t in decode.values()),
        prompt_tokens=tuple(float(n) for n in prompt), prompt_s=tuple(t / 1000 for t in prompt.values()),
        kv_tokens_per_layer=kv, max_decode_batch=tuple(limits[:len(kv)]),
        max_prompt_requests=parse_int(value.get("max_prompt_requests", 1), f"{field}.max_prompt_requests"),
        model=str(value.get("model", "")))


def analytic_profile(gpu, gpus_per_node: int, model, precision: str, weight_fraction: float = 0.5) -> ServingProfile:
    """A profile from datasheet figures, for machines nobody has profiled.

    For a layer of n parameters (w = n x bytes per element) on g GPUs of memory M, bandwidth BW and
    dense peak P:
      decode step, batch b, context c:  max(w + b c kv, ...) / (g TP_EFFICIENCY BW DECODE_MEMORY_EFFICIENCY)
                                         or 2 n b / (g P ...) if slower, plus LAYER_FLOOR_S;
      prefill of t tokens:              2 n t / (g TP_EFFICIENCY P PROMPT_COMPUTE_EFFICIENCY), at least one
                                         weight read;
      KV room holding k layers:          (MEMORY_UTILIZATION g M - WORKSPACE_BYTES - k w) / (k kv) tokens per layer,
                                         with k at most what fits in `weight_fraction` of memory (as Helix).
    `model` is a serving.spec.ServingModel; the context c is taken as 1,000 tokens (a chat turn).
    """
    memory = gpu.usable_memory_bytes * gpus_per_node
    bandwidth = gpu.memory_bandwidth * gpus_per_node * TP_EFFICIENCY ** (gpus_per_node > 1)
    flops = gpu.peak_flops(precision) * gpus_per_node * TP_EFFICIENCY ** (gpus_per_node > 1)
    w, kv = model.weight_bytes_per_layer, model.kv_bytes_per_token_layer
    most = min(model.num_layers, int(weight_fraction * memory // w))
    room = [(MEMORY_UTILIZATION * memory - WORKSPACE_BYTES - k * w) / (k * kv) for k in range(1, most + 1)]
    room = [r for r in room if r > 0]
    if not room:
        room = [1.0]     # the model does not fit: one token, so nothing is served (kv check refuses it)
    context = 1000
    batches = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    decode = [LAYER_FLOOR_S + max((w + b * context * kv) / (bandwidth * DECODE_MEMORY_EFFICIENCY),
                                  2 * model.params_per_layer * b / (flops * PROMPT_COMPUTE_EFFICIENCY))
              for b in batches]
    tokens = (0, 256, 512, 1024, 2048, 4096)
    prompt = [0.0] + [LAYER_FLOOR_S + max(w / bandwidth, 2 * model.params_per_layer * t / (flops * PROMPT_COMPUTE_EFFICIENCY))
                      for t in tokens[1:]]
    return ServingProfile(name=f"analytic {gpus_per_node}x{gpu.name}", measured=False,
                          decode_batch=tuple(float(b) for b in batches), decode_s=tuple(decode),
                          prompt_tokens=tuple(float(t) for t in tokens), prompt_s=tuple(prompt),
                          kv_tokens_per_layer=tuple(room), max_decode_batch=(DEFAULT_MAX_DECODE_BATCH,) * len(room),
                          max_prompt_requests=max(1, math.floor(DEFAULT_MAX_PROMPT_TOKENS / 750)))
