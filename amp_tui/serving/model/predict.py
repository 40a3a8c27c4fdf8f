"""What a serving system measures for a placement: the closed loop of requests in flight.

Every request in flight has one token on its way round: its prompt, then one decode token at a
time, each from the coordinator through the machines of its route and back. With N requests in
flight, decode throughput X (tokens/s) satisfies Little's law over a request's life:

    N = (X / o) x (TTFT + o x TPOT)      o: output tokens per request

  TPOT   time per output token: the decode round trip, the visited machines' residences and the
         hops' decode times weighted by the share of requests taking them (compute.py, network.py)
  TTFT   time to first token: the prompt's round trip (its waves and its transfers)
  N      offline: what admission lets in, kv.admitted_requests; at a request rate r: r x the
         request's life, when that fits in the KV cache (else the rate cannot be served)

Prompts arrive at X / o per second (one per request), each of serving.prompt_tokens tokens, so
prompt tokens/s = X x prompt_tokens / o. TPOT and TTFT grow with X (bigger, slower waves, more
waiting), so the fixed point is found by bisection on X, below the load that saturates a machine.
The max flow stays beside it as a bound on prompt and decode tokens together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from amp_tui.serving.model.compute import machine_load
from amp_tui.serving.model.kv import admitted_requests, room_per_layer
from amp_tui.serving.model.network import decode_hop_s, prompt_hop_s
from amp_tui.serving.model.routing import Routing

_BISECTION_STEPS = 30
_BISECTION_TOLERANCE = 1e-5     # relative: the decode rate to five digits


@dataclass(frozen=True)
class Prediction:
    decode_tokens_per_s: float
    prompt_tokens_per_s: float
    ttft_s: float                  # time to first token
    tpot_s: float                  # time per output token
    requests_in_flight: float
    admitted_requests: float       # what the KV cache admits (offline: = requests_in_flight)
    depth: float                   # machines a request passes
    flow_bound_tokens_per_s: float # the max flow: prompt and decode tokens/s together cannot exceed it
    busy: np.ndarray               # per machine: share of time busy
    batch: np.ndarray              # per machine: decode tokens per wave
    residence_s: np.ndarray        # per machine: a decode token's stay
    room_tokens: np.ndarray        # per layer: KV-cache tokens of context
    limited_by: str                # "kv cache", "request rate", "machine <i>" (saturated) or "nothing served"

    def to_json(self) -> dict:
        figures = {"decode_tokens_per_s": self.decode_tokens_per_s, "prompt_tokens_per_s": self.prompt_tokens_per_s,
                   "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "requests_in_flight": self.requests_in_flight,
                   "admitted_requests": self.admitted_requests, "depth": self.depth,
                   "flow_bound_tokens_per_s": self.flow_bound_tokens_per_s}
        out = {k: float(v) if math.isfinite(v) else None for k, v in figures.items()}
        out["limited_by"] = self.limited_by
        return out


def _round_trip(decode_rate: float, route: Routing, profiles, held, serving, activation_bytes: float,
                prompt_rate: float | None = None):
    """(TPOT, TTFT, loads) at decode throughput `decode_rate` (tokens/s over the cluster) and `prompt_rate`
    prompts/s (default: one per request, decode_rate / output tokens)."""
    if prompt_rate is None:
        prompt_rate = decode_rate / serving.output_tokens
    loads = {}
    tpot = ttft = 0.0
    same: dict = {}      # machines of one profile, count, layers run and share behave alike: solve once
    for m in np.flatnonzero(route.visits > 0):
        share = route.visits[m]
        key = (id(profiles[m]), int(held[m]), round(float(route.layers[m]), 6), round(float(share), 9))
        if key not in same:
            same[key] = machine_load(profiles[m], int(held[m]), float(route.layers[m]), decode_rate * share,
                                     prompt_rate * share, serving.prompt_tokens, activation_bytes)
        load = loads[int(m)] = same[key]
        tpot += share * load.residence_s
        ttft += share * load.prompt_residence_s
    for hop in route.hops:
        tpot += hop.share * decode_hop_s(hop, decode_rate, prompt_rate, serving.prompt_tokens, activation_bytes)
        ttft += hop.share * prompt_hop_s(hop, decode_rate, prompt_rate, serving.prompt_tokens, activation_bytes)
    return tpot, ttft, loads


def predict(route: Routing, profiles, first: np.ndarray, count: np.ndarray, num_layers: int, serving,
            activation_bytes: float) -> Prediction:
    """`profiles[m]`: machine m's ServingProfile; first/count: the layers each machine holds."""
    count = np.asarray(count)
    n = len(count)
    kv = np.array([profiles[m].kv_tokens(int(count[m])) if count[m] else 0.0 for m in range(n)])
    room = room_per_layer(kv, np.asarray(first), count, num_layers)
    admitted = admitted_requests(room, serving)
    empty = Prediction(0.0, 0.0, math.inf, math.inf, 0.0, admitted, route.depth, route.flow_tokens_per_s,
                       np.zeros(n), np.zeros(n), np.zeros(n), room, "nothing served")
    if route.flow_tokens_per_s <= 0 or admitted <= 0 or not np.all(room > 0):
        return empty
    o = serving.output_tokens

    def life(x: float):
        tpot, ttft, loads = _round_trip(x, route, profiles, count, serving, activation_bytes)
        return ttft + o * tpot, tpot, ttft, loads

    # the largest decode rate no machine saturates at, and under the max flow (prompt and decode together)
    high = route.flow_tokens_per_s * o / (o + serving.prompt_tokens)
    while high > 1e-9 and not math.isfinite(life(high)[0]):
        high /= 2
    saturating = high < route.flow_tokens_per_s * o / (o + serving.prompt_tokens)
    if serving.request_rate is not None:
        wanted = serving.request_rate * o
        target = None                      # requests in flight follow from the rate
    else:
        wanted, target = None, admitted
    low = 0.0
    x = high
    if target is not None:
        if high * life(high)[0] / o <= target:       # even the fastest loop holds fewer than admitted
            x = high
        else:
            for _ in range(_BISECTION_STEPS):
                if high - low <= _BISECTION_TOLERANCE * high:
                    break
                mid = (low + high) / 2
                if mid * life(mid)[0] / o <= target:
                    low = mid
                else:
                    high = mid
            x = low
    else:
        x = min(wanted, high)
    total, tpot, ttft, loads = life(x) if x > 0 else (math.inf, math.inf, math.inf, {})
    in_flight = x * total / o if x > 0 else 0.0
    if serving.request_rate is not None and in_flight > admitted:
        limited = "kv cache"     # the rate needs more requests in flight than the KV cache admits
    elif serving.request_rate is not None and x >= wanted * (1 - 1e-9):
        limited = "request rate"
    elif target is not None and in_flight >= target * (1 - 10 * _BISECTION_TOLERANCE):
        limited = "kv cache"
    else:
        busiest = max(loads, key=lambda m: loads[m].busy) if loads else -1
        limited = f"machine {busiest}" if saturating else "max flow"
    busy, batch, residence = np.zeros(n), np.zeros(n), np.zeros(n)
    for m, load in loads.items():
        busy[m], batch[m], residence[m] = load.busy, load.batch, load.residence_s
    return Prediction(decode_tokens_per_s=x, prompt_tokens_per_s=x * serving.prompt_tokens / o, ttft_s=ttft,
                      tpot_s=tpot, requests_in_flight=in_flight, admitted_requests=admitted, depth=route.depth,
                      flow_bound_tokens_per_s=route.flow_tokens_per_s, busy=busy, batch=batch,
                      residence_s=residence, room_tokens=room, limited_by=limited)


def benchmark_window(route: Routing, profiles, count: np.ndarray, serving, activation_bytes: float,
                     room: float, warmup_s: float, window_s: float, initial_requests: int,
                     step_s: float = 5.0) -> tuple[float, float]:
    """Decode and prompt tokens/s averaged over [warmup_s, warmup_s + window_s] of a closed-loop offline
    benchmark (Helix's): `initial_requests` requests at the start; each finished prompt admits one more
    request and each finished request is replaced, while the fullest layer's KV cache is under
    serving.kv_fill of `room` (tokens per layer of that layer).

    A fluid model in steps of `step_s`, with the requests in kinds (serving.classes(): shares of the
    trace, each with its prompt and output length). Requests in their prompt finish it at prompts in
    flight / TTFT per second; a request that finished its prompt at time s finishes its answer at
    s + output x TPOT, so short answers finish (and are replaced by new prompts) first, and a young
    run churns more prompts than its steady state. Decode rate = decoding requests / TPOT; TTFT and
    TPOT at the loads the two rates make (a few rounds of substitution per step). Admission reserves
    each kind's prompt and the mean output (serving.output_tokens) in every layer.
    """
    kinds = serving.classes()
    reserve_output = serving.output_tokens
    steps = int(math.ceil((warmup_s + window_s) / step_s))
    started = np.zeros((len(kinds), steps + 1))      # per kind: requests that finished their prompt, per step
    prompts = np.array([share * initial_requests for share, _, _ in kinds])   # in their prompt, per kind
    decoding = np.zeros(len(kinds))
    x = mu = 0.0
    tpot = 1.0
    decode_sum = prompt_sum = 0.0
    capacity = serving.kv_fill * room
    for step in range(steps):
        t = step * step_s
        dt = min(step_s, warmup_s + window_s - t)
        for _ in range(6):
            tpot_new, ttft, _ = _round_trip(max(x, 1e-9), route, profiles, count, serving, activation_bytes, mu)
            if not (math.isfinite(tpot_new) and math.isfinite(ttft)):
                x, mu = 0.7 * x, 0.7 * mu      # past saturation: back off
                continue
            tpot = tpot_new
            x_new, mu_new = decoding.sum() / tpot, prompts.sum() / ttft
            x, mu = 0.5 * (x + x_new), 0.5 * (mu + mu_new)
        # answers finishing now: prompts finished output x TPOT ago
        finished = np.zeros(len(kinds))
        for k, (_, _, output) in enumerate(kinds):
            back = output * tpot / step_s
            lo = int(math.floor(back))
            if step - lo - 1 >= 0:
                frac = back - lo
                rate = (1 - frac) * started[k, step - lo] + frac * started[k, step - lo - 1]
                finished[k] = min(rate, decoding[k] / dt)
        used = float(sum((prompts[k] + decoding[k]) * (kinds[k][1] + reserve_output) for k in range(len(kinds))))
        prompt_done = prompts * (mu / prompts.sum()) * dt if prompts.sum() > 0 else np.zeros(len(kinds))
        if used >= capacity:     # no new prompt replaces a finished one: at most those in flight finish
            prompt_done = np.minimum(prompt_done, prompts)
        started[:, step + 1] = prompt_done / dt
        launches = finished.sum() * dt + (prompt_done.sum() if used < capacity else 0.0)
        per_request = sum(share * (prompt + reserve_output) for share, prompt, _ in kinds)
        launches = min(launches, max(0.0, (capacity - used) / per_request + finished.sum() * dt))
        overlap = max(0.0, min(t + dt, warmup_s + window_s) - max(t, warmup_s))
        decode_sum += x * overlap
        prompt_sum += mu * serving.prompt_tokens * overlap
        decoding += prompt_done - finished * dt
        prompts = np.maximum(prompts - prompt_done + np.array([share * launches for share, _, _ in kinds]), 0.0)
    return decode_sum / window_s, prompt_sum / window_s
