"""Host issue time: the CPU side of a layer, per execution profile (spec/frameworks.py).

The GPU runs a layer's kernels only as fast as the host issues them. In eager PyTorch each kernel
goes through Python and the dispatcher (and autocast), and backward through the autograd engine;
the host runs ahead while the GPU is the slower of the two, so a layer takes the longer path (max,
not sum):

  host    forward_passes x host_forward_s x share(kind) + host_backward_s x share(kind)
          + collectives x collective_host_s
  layer   max(its GPU time, host)                          (LayerTimes.stage_times)

`host_forward_s`, `host_backward_s` and `collective_host_s` are parameters keyed by the execution
profile (the framework's, or compiled execution under `training.compile`). share(kind): one
GPT block's kernels are the unit (a LLaMA-style block's are the profile's `gated_block_kernels`
of it); an embedding issues about a fifth as many (look-up, position embedding, add, dropout), an
output head with its loss about two fifths (final norm, the head's GEMM, the loss's casts,
log-softmax and gather), another layer half. A layer that computes
nothing issues nothing. Layers with a measured time (profiles) hold their host time already: the
caller gives them none.
"""

from __future__ import annotations

import numpy as np

from amp_tui.core.spec.frameworks import PROFILES
from amp_tui.core.spec.model import Model
from amp_tui.core.spec.params import ModelParams

KIND_SHARE = {"block": 1.0, "embedding": 0.2, "head": 0.4, "other": 0.5}


def kernel_share(model: Model, gated_block_kernels: float = 1.0) -> np.ndarray:
    """Per layer, its kernels as a share of one GPT block's (0 for a layer without FLOPs); a
    LLaMA-family block issues `gated_block_kernels` of them."""
    block = gated_block_kernels if model.family == "llama" else 1.0
    share = np.array([block if layer.kind == "block" else KIND_SHARE[layer.kind] for layer in model.layers])
    return np.where(model.columns["flops"] > 0, share, 0.0)


def host_issue_time(model: Model, params: ModelParams, profile: str, forward_passes: float,
                    collectives: np.ndarray) -> np.ndarray:
    """Per layer per micro-batch: the host's seconds to issue its forward (`forward_passes` of them:
    2 under full recomputation) and backward kernels and its `collectives` (per layer per
    micro-batch: tensor-parallel all-reduces, ZeRO-3 gathers), whatever the micro-batch size."""
    per_block = forward_passes * params("host_forward_s", profile) + params("host_backward_s", profile)
    share = kernel_share(model, PROFILES[profile].gated_block_kernels)
    return share * per_block + collectives * params("collective_host_s", profile)


def exposed_host_time(host: np.ndarray, gpu: np.ndarray, overlap: float = 1.0) -> np.ndarray:
    """What the host adds to a layer beyond its GPU time: the host path's excess over the share
    `overlap` of the GPU time it hides (the execution profile's host_overlap: 1, the longer of
    the two; 0, their sum, as the 2020 stack ran)."""
    return np.maximum(host - overlap * gpu, 0.0)
