"""KV-cache room, and how many requests admission lets in at once.

room(layer)   the tokens of context the machines holding a layer keep for it, summed over them:
              sum over machine i holding the layer of kv_tokens_per_layer_i(layers i holds);
reserve       what admission sets aside per request in every layer: its prompt and its expected
              output (serving.prompt_tokens_in_flight + serving.output_tokens); requests with long
              answers stay longest, so the prompts held are those of requests in flight;
admitted      kv_fill x min over layers of room / reserve: admission stops when the fullest layer
              reaches kv_fill (Helix's offline feeder stops at 0.8; vLLM at its block limit).

A machine holding fewer layers keeps more context per layer (less memory goes to weights), so a
placement of thin slices admits more requests at once; it also makes every request pass more
machines (compute.py and network.py price that).
"""

from __future__ import annotations

import numpy as np


def room_per_layer(kv_tokens: np.ndarray, first: np.ndarray, count: np.ndarray, num_layers: int) -> np.ndarray:
    """Tokens of context per layer over the cluster; `kv_tokens[i]`: machine i's per-layer room at its count."""
    delta = np.zeros(num_layers + 1)
    for i in np.flatnonzero(np.asarray(count) > 0):
        delta[first[i]] += kv_tokens[i]
        delta[first[i] + count[i]] -= kv_tokens[i]
    return np.cumsum(delta)[:-1]


def reserve_tokens(serving) -> float:
    """Tokens of context admission reserves per request in each layer."""
    return float(serving.held_prompt_tokens + serving.output_tokens)


def admitted_requests(room: np.ndarray, serving) -> float:
    """Requests in flight when admission has filled the KV cache to serving.kv_fill (0 if a layer has no room)."""
    if room.size == 0:
        return 0.0
    return serving.kv_fill * float(room.min()) / reserve_tokens(serving)
