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
  wave             S = l t_dec(b) + receive copy; a wave that carries a prompt takes
                   T = l t_pr(P) + the prompt's copy more
  busy share       U = x S / b + p T: the share of time the machine is busy
  wait             the wave in progress when a token arrives, its expected remainder weighted by time:
                   W = (x S^2 / b + p T^2) / 2
  residence        R = FRAGMENTATION x (S + W) + q T: a burst of tokens from the previous machine is
                   split into FRAGMENTATION waves as its tokens arrive one by one (the first to arrive
                   starts a wave of its own), each after the wave in progress; a prompt rides in one of
                   them with probability q = min(1, p (S + T)) and is paid once
  prompt stay      T + FRAGMENTATION x S + W: the prompt's own wave, with the decode tokens in it
  batch            b = x R: every decode token on the machine rides the next wave (Little's law)

Helix's simulator measured the composition (docs/serving.md): at the decode and prompt rates of its
runs' ramps (20 prompts in flight) the residences summed over a route give its TPOT within 5% on
single24 and hetero42, where multiplying the prompt's ride by FRAGMENTATION too made TPOT 30-40% long.

The fixed point (b, S, R) is found by iteration, for every machine at once (numpy); a machine whose
busy share reaches 1 is saturated and its residence grows without bound (predict.py keeps the load
below that).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

RECEIVE_COPY_BYTES_PER_S = 1 / (1 / 4e9 + 1 / 5e9)   # gather on the host (4 GB/s), then copy to the GPU (5 GB/s)
FRAGMENTATION = 1.85     # fitted to Helix's simulator (docs/serving.md): per-node residences of a 24-deep chain
_ITERATIONS = 40      # doublings of the batch, at most
_NEWTON_STEPS = 12
_HALVINGS = 6
_TOLERANCE = 1e-4      # relative, on the batch


@dataclass(frozen=True)
class MachineLoad:
    batch: float            # decode tokens per wave
    wave_s: float           # a decode-only wave
    busy: float             # share of time busy (>= 1: saturated)
    residence_s: float      # a decode token's stay, from arrival to leaving
    prompt_residence_s: float  # a prompt's stay


@dataclass(frozen=True)
class Machines:
    """What the loads of a set of machines need, fixed for a placement: per machine, the layers a request
    runs there, its batch limit, its prompt wave, and its decode step by batch (a table of whole batches,
    linear in between)."""

    layers: np.ndarray          # layers a passing request runs (flow-weighted)
    limit: np.ndarray           # the engine's batch limit for the layers it holds
    prompt_wave_s: np.ndarray   # T: l t_pr(P) + the prompt's copy
    decode_table: np.ndarray    # [machine, b]: seconds per layer for b sequences, b = 0 .. max limit + 1
    copy_per_token_s: float


def receive_copy_s(tokens: float, activation_bytes: float) -> float:
    return tokens * activation_bytes / RECEIVE_COPY_BYTES_PER_S


def machines_of(profiles, held, layers, prompt_tokens: float, activation_bytes: float) -> Machines:
    """`profiles[i]`, `held[i]` (layers it holds) and `layers[i]` (layers a request runs there) per machine."""
    limits = np.array([p.batch_limit(int(h)) for p, h in zip(profiles, held)], dtype=float)
    width = int(limits.max(initial=1)) + 2
    rows = [_decode_table(p, width) for p in profiles]
    layers = np.asarray(layers, dtype=float)
    prompt = np.array([float(p.prompt_step_s(prompt_tokens)) for p in profiles])
    return Machines(layers=layers, limit=limits,
                    prompt_wave_s=layers * prompt + receive_copy_s(prompt_tokens, activation_bytes),
                    decode_table=np.array(rows).reshape(len(rows), width),
                    copy_per_token_s=receive_copy_s(1, activation_bytes))


@lru_cache(maxsize=256)
def _decode_table(profile, width: int) -> np.ndarray:
    return np.array([profile.decode_step_s(b) for b in range(width)])


def _decode_step(m: Machines, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per layer for `batch` sequences, and its slope in the batch."""
    low = np.minimum(np.floor(batch).astype(int), m.decode_table.shape[1] - 2)
    frac = batch - low
    rows = np.arange(len(batch))
    left, right = m.decode_table[rows, low], m.decode_table[rows, low + 1]
    return left + frac * (right - left), right - left


def machine_loads(m: Machines, decode_rate: np.ndarray, prompt_rate: np.ndarray,
                  fragmentation: float = FRAGMENTATION, start: np.ndarray | None = None):
    """(batch, wave, busy, residence, prompt stay) per machine at decode tokens/s and prompts/s arriving.

    The batch is the root of b = x R(b) (Newton's method on it, from `start` when given), at most the
    engine's limit; a machine busy all the time even at its limit is saturated."""
    x, p = np.asarray(decode_rate, dtype=float), np.asarray(prompt_rate, dtype=float)
    T = m.prompt_wave_s
    batch = np.ones_like(x) if start is None else np.clip(start, 1.0, m.limit)

    def state(b):
        step, slope = _decode_step(m, b)
        wave = m.layers * step + m.copy_per_token_s * b
        wave_slope = m.layers * slope + m.copy_per_token_s
        busy = x * wave / b + p * T
        wait = (x * wave * wave / b + p * T * T) / 2
        ride = np.minimum(1.0, p * (wave + T))
        residence = fragmentation * (wave + wait) + ride * T
        slope_r = (fragmentation * (wave_slope + x * (2 * wave * wave_slope / b - wave * wave / b / b) / 2)
                   + (ride < 1) * p * wave_slope * T)
        return wave, busy, wait, residence, slope_r

    # the smallest batch the machine keeps up with (busy < 1): double from 1, then halve the last gap; the
    # batch is never below it (when b = x R(b) falls below it, arrivals outrun small waves and the queue
    # grows until the waves are that big). Skipped where the start keeps up and Newton stays there.
    floor = np.ones_like(x)
    wave, busy, wait, residence, slope_r = state(batch)
    if (busy >= 1).any():
        busy = state(floor)[1]
        for _ in range(_ITERATIONS):
            grow = (busy >= 1) & (floor < m.limit)
            if not grow.any():
                break
            floor = np.minimum(m.limit, floor * (1 + grow))
            busy = state(floor)[1]
        if (floor > 1).any():
            low = np.where(floor > 1, floor / 2, floor)
            for _ in range(_HALVINGS):
                mid = (low + floor) / 2
                keeps_up = state(mid)[1] < 1
                floor, low = np.where(keeps_up, mid, floor), np.where(keeps_up, low, mid)
        batch = np.clip(batch, floor, m.limit)
        wave, busy, wait, residence, slope_r = state(batch)
    # Newton's method on f(b) = b - x R(b) within [floor, limit]; a step that does not shrink |f| (a kink of
    # the piecewise-linear profile) goes half as far
    f = batch - x * residence
    for _ in range(_NEWTON_STEPS):
        fprime = np.maximum(1 - x * slope_r, 1e-3)
        target = np.clip(batch - f / fprime, floor, m.limit)
        target = np.where(busy >= 1, batch, target)
        moving = np.abs(target - batch) > _TOLERANCE * batch
        if not moving.any():
            break
        for _ in range(_HALVINGS):
            new = state(target)
            new_f = target - x * new[3]
            back = moving & ((np.abs(new_f) > np.abs(f)) | ((new[1] >= 1) & (busy < 1)))
            if not back.any():
                break
            target = np.where(back, (target + batch) / 2, target)
        batch, f = target, new_f
        wave, busy, wait, residence, slope_r = new
    saturated = busy >= 1
    residence = np.where(saturated, np.inf, residence)
    stay = np.where(saturated, np.inf, T + fragmentation * wave + wait)
    return batch, wave, busy, residence, stay


def machine_load(profile, held_layers: int, layers: float, decode_rate: float, prompt_rate: float,
                 prompt_tokens: float, activation_bytes: float, fragmentation: float = FRAGMENTATION) -> MachineLoad:
    """One machine's state at steady decode and prompt arrival rates (tokens/s and prompts/s)."""
    m = machines_of([profile], [held_layers], [layers], prompt_tokens, activation_bytes)
    batch, wave, busy, residence, stay = machine_loads(m, np.array([decode_rate]), np.array([prompt_rate]),
                                                       fragmentation)
    return MachineLoad(float(batch[0]), float(wave[0]), float(busy[0]), float(residence[0]), float(stay[0]))
