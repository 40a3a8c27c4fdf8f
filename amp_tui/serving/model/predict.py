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
from dataclasses import dataclass, replace

import numpy as np

from amp_tui.serving.model.kv import Admission, admission, reserve_tokens, room_per_layer
from amp_tui.serving.model.roundtrip import RoundTrip
from amp_tui.serving.model.routing import Routing

_ROOT_STEPS = 40
_ROOT_TOLERANCE = 1e-5     # relative: the decode rate to five digits


def _requests_root(excess, high: float) -> float:
    """The decode rate in (0, high] where excess(rate) = requests in flight at that rate - the target crosses
    zero (excess rises with the rate: excess(0) < 0 < excess(high)), by the Illinois method (regula falsi
    that halves a stale end's weight), keeping the end where excess <= 0."""
    low, f_low, f_high = 0.0, excess(0.0), excess(high)
    side = 0
    for _ in range(_ROOT_STEPS):
        if high - low <= _ROOT_TOLERANCE * high:
            break
        mid = (low * f_high - high * f_low) / (f_high - f_low) if side != 0 else (low + high) / 2
        mid = min(max(mid, low + 0.01 * (high - low)), high - 0.01 * (high - low))
        f_mid = excess(mid)
        if not math.isfinite(f_mid) or f_mid > 0:
            high, f_high = mid, (f_mid if math.isfinite(f_mid) else 1e300)
            if side == 1:
                f_low /= 2
            side = 1
        else:
            low, f_low = mid, f_mid
            if side == -1:
                f_high /= 2
            side = -1
    return low


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
    admitted_by: str = "feeder"    # which admission rule binds (kv.py): "feeder" or "router"
    admission_tokens: float = 0.0  # reserve tokens admission lets in, at the mean prompt (benchmark_window)

    def to_json(self) -> dict:
        figures = {"decode_tokens_per_s": self.decode_tokens_per_s, "prompt_tokens_per_s": self.prompt_tokens_per_s,
                   "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "requests_in_flight": self.requests_in_flight,
                   "admitted_requests": self.admitted_requests, "depth": self.depth,
                   "flow_bound_tokens_per_s": self.flow_bound_tokens_per_s}
        out = {k: float(v) if math.isfinite(v) else None for k, v in figures.items()}
        out["limited_by"] = self.limited_by
        return out


def admitted_routing(route: Routing, profiles, first: np.ndarray, count: np.ndarray, num_layers: int, serving):
    """(the routing of the requests in flight, kv.Admission at a young run's requests). Admission is taken in
    reserve tokens at the mean prompt (a young run's); at steady state the requests in flight hold longer
    prompts (serving.held_prompt_tokens), so fewer fit. A request's route is fixed when it is admitted: where
    the router sent requests round full machines, the machines serve the requests where they were put, not
    at the max flow's shares."""
    count = np.asarray(count)
    kv = np.array([profiles[m].kv_tokens(int(count[m])) if count[m] else 0.0 for m in range(len(count))])
    admitted = admission(route.hops, first, count, kv, num_layers, serving, reserve_tokens(serving, serving.prompt_tokens))
    if admitted.rule == "router" and admitted.requests > 0:
        route = replace(route, visits=admitted.held / admitted.requests)
    return route, admitted


def predict(route: Routing, profiles, first: np.ndarray, count: np.ndarray, num_layers: int, serving,
            activation_bytes: float, trip: RoundTrip | None = None, admitted: Admission | None = None) -> Prediction:
    """`profiles[m]`: machine m's ServingProfile; first/count: the layers each machine holds; `route` and
    `admitted` from admitted_routing (computed here when not given); `trip` the route's RoundTrip."""
    if admitted is None:
        route, admitted = admitted_routing(route, profiles, first, count, num_layers, serving)
        trip = None
    count = np.asarray(count)
    n = len(count)
    kv = np.array([profiles[m].kv_tokens(int(count[m])) if count[m] else 0.0 for m in range(n)])
    room = room_per_layer(kv, np.asarray(first), count, num_layers)
    admitted_by = admitted.rule
    admission_tokens = admitted.requests * reserve_tokens(serving, serving.prompt_tokens)
    admitted = admission_tokens / reserve_tokens(serving)
    empty = Prediction(0.0, 0.0, math.inf, math.inf, 0.0, admitted, route.depth, route.flow_tokens_per_s,
                       np.zeros(n), np.zeros(n), np.zeros(n), room, "nothing served", admitted_by, admission_tokens)
    if route.flow_tokens_per_s <= 0 or admitted <= 0 or not np.all(room > 0):
        return empty
    o = serving.output_tokens
    trip = trip or RoundTrip(route, profiles, count, serving, activation_bytes)

    def life(x: float):
        tpot, ttft, loads = trip(x)
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
    if target is None:
        x = min(wanted, high)
    elif high * life(high)[0] / o > target:
        x = _requests_root(lambda rate: rate * life(rate)[0] / o - target, high)
    else:
        x = high            # even the fastest loop holds fewer than admitted
    total, tpot, ttft, loads = life(x) if x > 0 else (math.inf, math.inf, math.inf, np.zeros((3, n)))
    in_flight = x * total / o if x > 0 else 0.0
    if serving.request_rate is not None and in_flight > admitted:
        limited = "kv cache"     # the rate needs more requests in flight than the KV cache admits
    elif serving.request_rate is not None and x >= wanted * (1 - 1e-9):
        limited = "request rate"
    elif target is not None and in_flight >= target * (1 - 10 * _ROOT_TOLERANCE):
        limited = "kv cache"
    else:
        limited = f"machine {int(np.argmax(loads[1]))}" if saturating else "max flow"
    batch, busy, residence = loads
    return Prediction(decode_tokens_per_s=x, prompt_tokens_per_s=x * serving.prompt_tokens / o, ttft_s=ttft,
                      tpot_s=tpot, requests_in_flight=in_flight, admitted_requests=admitted, depth=route.depth,
                      flow_bound_tokens_per_s=route.flow_tokens_per_s, busy=busy, batch=batch,
                      residence_s=residence, room_tokens=room, limited_by=limited, admitted_by=admitted_by,
                      admission_tokens=admission_tokens)
