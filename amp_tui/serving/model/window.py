"""The benchmark window: what a closed-loop offline run measures over [warm-up, warm-up + window].

Helix's offline run (its simulator's OfflineRequestFeeder and router, read and measured in its traces:
docs/serving.md) starts with 20 requests and launches one more for every finished prompt and every
finished request while admission has room (kv.py). A young run is far from its steady state: its
requests in flight grow by the prompts in flight over TTFT per second, and the prompts in its waves
slow every decode token, so the window a user asks for (120 s or 600 s) ranks placements differently
from the steady state.
"""

from __future__ import annotations

import math

import numpy as np

from amp_tui.serving.model.roundtrip import RoundTrip

STEP_S = 20.0         # the fluid model's step: TPOT and TTFT are priced once a step
_MOST_TICKS = 20      # bookkeeping ticks per step, at most (a tick is about a quarter of TTFT)
_MOST_ROUNDS = 12     # rounds per step of the closed loops, at most (warm-started from the previous step)
_CLOSE = 0.005        # relative: the rounds stop when TPOT and TTFT move less than this
_MOST_GROWTH = 4.0    # a round moves TPOT or TTFT by at most this factor (a saturating load reads as infinite)


def _loads(trip: RoundTrip, decoding: float, prompts: float, tpot: float, ttft: float):
    """(decode tokens/s, prompts/s, TPOT, TTFT) with `decoding` requests decoding and `prompts` in their prompt:
    the closed loops x = decoding / TPOT(x, mu) and mu = prompts / TTFT(x, mu). Solved for TPOT and TTFT:
    each is a decreasing function of itself through the rates, so the geometric mean of a guess and what it
    gives closes in on the fixed point from either side, from the last step's values (a load that saturates
    a machine or a link gives an infinite time, read as a growth of at most _MOST_GROWTH)."""
    for _ in range(_MOST_ROUNDS):
        new_tpot, new_ttft, _ = trip(decoding / tpot, prompts / ttft)
        next_tpot = math.sqrt(tpot * min(new_tpot, _MOST_GROWTH * tpot))
        next_ttft = math.sqrt(ttft * min(new_ttft, _MOST_GROWTH * ttft))
        close = abs(next_tpot / tpot - 1) < _CLOSE and abs(next_ttft / ttft - 1) < _CLOSE
        tpot, ttft = next_tpot, next_ttft
        if close:
            break
    return decoding / tpot, prompts / ttft, tpot, ttft


def benchmark_window(trip: RoundTrip, serving, admission_tokens: float, warmup_s: float, window_s: float,
                     initial_requests: int, step_s: float = STEP_S, trace: list | None = None) -> tuple[float, float]:
    """Decode and prompt tokens/s averaged over [warmup_s, warmup_s + window_s] of a closed-loop offline
    benchmark (Helix's offline run, its feeder's rules measured in its simulator: docs/serving.md).

    The ramp, in named terms:
      launches     `initial_requests` at the start; then one per finished prompt and one per finished
                   request, while the requests in flight reserve under `admission_tokens` (kv.py's
                   admission at the mean prompt; each request reserves its kind's prompt and the mean
                   output, so a run whose long answers stay fills with fewer requests)
      prompts      Q in flight finish at Q / TTFT per second: before admission stops, every finished
                   prompt launches the next, so Q stays at `initial_requests` (plus the requests that
                   finished and were replaced) and the requests in flight grow by Q / TTFT per second
      decode       D decoding requests make D / TPOT tokens per second; TPOT and TTFT at the loads the
                   two rates make (compute.py: prompts riding in the waves slow every token), so a young
                   run, with Q prompts in flight, decodes far slower per request than its steady state
      answers      a request finishes when it has made its kind's output tokens (a token clock: the
                   tokens one request makes, the integral of 1 / TPOT), short answers first

    A fluid model in steps of `step_s`, requests in kinds (serving.classes(): shares of the trace, each
    with its prompt and output length). `trace` (a list) receives (t, requests in flight, prompts in
    flight, decode tokens/s, TPOT, TTFT) per step.
    """
    kinds = serving.classes()
    outputs = np.array([output for _, _, output in kinds])
    reserve = np.array([prompt + serving.output_tokens for _, prompt, _ in kinds])
    shares = np.array([share for share, _, _ in kinds])
    per_request = float((shares * reserve).sum())
    end = warmup_s + window_s
    steps = int(math.ceil(end / step_s))
    most_ticks = steps * _MOST_TICKS + 1
    begun = np.zeros((len(kinds), most_ticks + 1))   # per kind: requests whose prompt finished before each tick
    rows = np.arange(len(kinds))
    clock = np.zeros(most_ticks + 1)                 # tokens one decoding request has made by each tick's start
    prompts = shares * initial_requests              # in their prompt, per kind
    decoding = np.zeros(len(kinds))
    tpot, ttft = trip(1e-9, 1e-9)[:2]      # the unloaded round trip
    decode_sum = prompt_sum = 0.0
    tick = 0
    t = 0.0
    for _ in range(steps):
        dt = min(step_s, end - t)
        if dt <= 0:
            break
        x, mu, tpot, ttft = _loads(trip, decoding.sum(), prompts.sum(), tpot, ttft)
        if trace is not None:
            trace.append((t, float(prompts.sum() + decoding.sum()), float(prompts.sum()), x, tpot, ttft))
        # the bookkeeping in ticks short beside TTFT (the times stay those of the step's start)
        ticks = min(_MOST_TICKS, max(1, math.ceil(4 * dt / ttft)))
        h = dt / ticks
        for _ in range(ticks):
            clock[tick + 1] = clock[tick] + h / tpot
            # answers finishing: cohorts whose tokens made reach their kind's output
            before = np.searchsorted(clock[:tick + 1], clock[tick] - outputs, side="right")
            now = np.searchsorted(clock[:tick + 1], clock[tick + 1] - outputs, side="right")
            finished = np.minimum(begun[rows, now] - begun[rows, before], decoding)
            # one launch per finished prompt and per finished answer while admission has room: a prompt's place
            # is taken again at once, so prompts finish at Q / TTFT; without room they run out, each at 1 / TTFT
            used = float(((prompts + decoding - finished) * reserve).sum())
            most = max(0.0, (admission_tokens - used) / per_request)
            q = prompts.sum()
            completions = q * h / ttft
            launches = min(completions + finished.sum(), most)
            if launches < completions + finished.sum():
                completions = (q + launches) * -math.expm1(-h / ttft)
            prompt_done = prompts / q * completions if q > 0 else np.zeros(len(kinds))
            begun[:, tick + 2] = begun[:, tick + 1] + prompt_done
            overlap = max(0.0, min(t + h, end) - max(t, warmup_s))
            decode_sum += decoding.sum() / tpot * overlap
            prompt_sum += q / ttft * serving.prompt_tokens * overlap
            decoding += prompt_done - finished
            prompts = np.maximum(prompts - prompt_done + shares * launches, 0.0)
            tick += 1
            t += h
    return decode_sum / window_s, prompt_sum / window_s
