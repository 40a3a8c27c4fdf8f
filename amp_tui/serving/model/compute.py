"""A machine's step, and how long a token stays on it.

An engine runs the layers it holds one after another on whatever has arrived for each: a *wave*
carries a batch of decode tokens (one per request) through the layers a request runs there, with at
most `max_prompt_requests` prompts riding along. Terms, for a machine running l layers, decode
tokens arriving at x per second, prompts at p per second of P tokens each:

  decode step      t_dec(b): the profile's seconds per layer for b sequences (b >= 1, at most the
                   engine's batch limit for the layers it holds)
  prompt step      t_pr(P): the profile's seconds per layer to prefill P tokens
  receive copy     bytes received / RECEIVE_COPY_BYTES_PER_S: activations arriving from the network are
                   gathered on the host and copied to the GPU before the first layer runs
  wave             S = l t_dec(b) + receive copy; a wave that carries a prompt takes l t_pr(P) more
  busy share       U = x S / b + p (l t_pr(P) + copy of the prompt): the share of time the machine is busy
  residence        R = FRAGMENTATION x (S + q l t_pr(P) + U x residual): the token's own wave (a prompt
                   rides along with probability q = min(1, p (S + l t_pr(P)))), after the wave in
                   progress (its expected remainder, weighted by time); FRAGMENTATION counts the waves
                   a burst of tokens from the previous machine is split into, as its tokens arrive one
                   by one and the first to arrive starts a wave of its own
  batch            b = x R: every decode token on the machine rides the next wave (Little's law)

The fixed point (b, S, R) is found by iteration; a machine whose busy share reaches 1 is saturated
and its residence grows without bound (predict.py keeps the load below that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RECEIVE_COPY_BYTES_PER_S = 1 / (1 / 4e9 + 1 / 5e9)   # gather on the host (4 GB/s), then copy to the GPU (5 GB/s)
FRAGMENTATION = 1.85     # fitted to Helix's simulator (docs/serving.md): per-node residences of a 24-deep chain


@dataclass(frozen=True)
class MachineLoad:
    batch: float            # decode tokens per wave
    wave_s: float           # a decode-only wave
    busy: float             # share of time busy (>= 1: saturated)
    residence_s: float      # a decode token's stay, from arrival to leaving
    prompt_residence_s: float  # a prompt's stay


def receive_copy_s(tokens: float, activation_bytes: float) -> float:
    return tokens * activation_bytes / RECEIVE_COPY_BYTES_PER_S


def machine_load(profile, held_layers: int, layers: float, decode_rate: float, prompt_rate: float,
                 prompt_tokens: float, activation_bytes: float, fragmentation: float = FRAGMENTATION) -> MachineLoad:
    """The machine's state at steady decode and prompt arrival rates (tokens/s and prompts/s)."""
    limit = profile.batch_limit(held_layers)
    prompt_wave = layers * float(profile.prompt_step_s(prompt_tokens)) + receive_copy_s(prompt_tokens, activation_bytes)
    batch = 1.0
    for _ in range(40):
        wave = layers * float(profile.decode_step_s(batch)) + receive_copy_s(batch, activation_bytes)
        busy = decode_rate * wave / batch + prompt_rate * prompt_wave
        if busy >= 1:
            if batch >= limit:
                break           # saturated even at the engine's largest batch
            batch = min(float(limit), 2 * batch)     # more tokens gather: a bigger batch
            continue
        # expected remainder of the wave in progress, weighted by how long each kind runs
        work = decode_rate * wave / batch * wave + prompt_rate * prompt_wave * prompt_wave
        wait = work / 2     # = busy x (time-weighted residual)
        ride = min(1.0, prompt_rate * (wave + prompt_wave)) * prompt_wave
        residence = fragmentation * (wave + ride + wait)
        new_batch = min(float(limit), max(1.0, decode_rate * residence))
        if abs(new_batch - batch) <= 1e-3 * batch:
            break
        batch = 0.5 * (batch + new_batch)
    if busy >= 1:
        return MachineLoad(batch=batch, wave_s=wave, busy=busy, residence_s=float("inf"),
                           prompt_residence_s=float("inf"))
    return MachineLoad(batch=batch, wave_s=wave, busy=busy, residence_s=residence,
                       prompt_residence_s=prompt_wave + wave + wait)
