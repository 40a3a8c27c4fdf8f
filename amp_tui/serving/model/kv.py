"""KV-cache room, and how many requests admission lets in at once.

room(layer)   the tokens of context the machines holding a layer keep for it, summed over them:
              sum over machine i holding the layer of kv_tokens_per_layer_i(layers i holds);
reserve       what admission sets aside per request in every layer it runs: its prompt and its expected
              output (serving.output_tokens), from admission to its last token;

Admission, as Helix's offline run does it (measured in its simulator, docs/serving.md), two rules:

feeder        a new request is launched only while the fullest layer has reserved under serving.kv_fill
              of its room; a machine's reservations count evenly over the layers it holds (a request that
              runs r of a machine's l layers reserves r x reserve there, spread over all l);
router        a request's route is picked machine by machine along the max flow (each sender picks among
              the receivers it sends at least MIN_EDGE_SHARE of its flow to, in proportion to that flow);
              a receiver is skipped while its reserved tokens plus this request's (reserve x the layers
              it holds) would pass serving.machine_kv_fill of its KV cache; a request that reaches a sender
              with every receiver skipped is dropped, and its launch lost.
stall         the run stops growing when half its launches are dropped: each finished prompt and each
              finished request launches one, and in steady state as many prompts finish as requests, so
              the requests in flight hold where a launch is accepted with probability 1/2.

admitted_requests: the fewest of the feeder's and the router's, found by filling the machines in the
proportions the router sends requests (progressive filling: a machine that fills is skipped from then
on, and its share goes to the other receivers of each sender).

A machine holding fewer layers keeps more context per layer (less memory goes to weights), so a
placement of thin slices admits more requests at once; it also makes every request pass more
machines (compute.py and network.py price that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_EDGE_SHARE = 0.05    # Helix's router skips receivers of under 5% of a sender's flow (scheduler_core.py)
STALL_ACCEPTANCE = 0.5   # launches accepted when the run stops growing (one launch per prompt and per request)
COORDINATOR = -1         # the routing's coordinator end (routing.Hop)
SOURCE, SINK = -1, -2    # the coordinator as the sender of prompts and as the receiver of tokens


def room_per_layer(kv_tokens: np.ndarray, first: np.ndarray, count: np.ndarray, num_layers: int) -> np.ndarray:
    """Tokens of context per layer over the cluster; `kv_tokens[i]`: machine i's per-layer room at its count."""
    delta = np.zeros(num_layers + 1)
    for i in np.flatnonzero(np.asarray(count) > 0):
        delta[first[i]] += kv_tokens[i]
        delta[first[i] + count[i]] -= kv_tokens[i]
    return np.cumsum(delta)[:-1]


def reserve_tokens(serving, prompt_tokens: float | None = None) -> float:
    """Tokens of context admission reserves per request in each layer it runs (by default the prompts of the
    requests in flight, serving.held_prompt_tokens)."""
    prompt = serving.held_prompt_tokens if prompt_tokens is None else prompt_tokens
    return float(prompt + serving.output_tokens)


def feeder_requests(room: np.ndarray, serving, reserve: float) -> float:
    """The feeder's bound where every request runs all the layers of each machine it visits."""
    if room.size == 0:
        return 0.0
    return serving.kv_fill * float(room.min()) / reserve


def admitted_requests(hops, first: np.ndarray, count: np.ndarray, kv_tokens: np.ndarray, num_layers: int,
                      serving, reserve: float) -> tuple[float, str]:
    """(requests in flight admission lets in, "feeder" or "router"): `hops` the routing's edges (sender,
    receiver, share; COORDINATOR at both ends), kv_tokens[i] machine i's per-layer room at its count."""
    admitted = admission(hops, first, count, kv_tokens, num_layers, serving, reserve)
    return admitted.requests, admitted.rule


@dataclass(frozen=True)
class Admission:
    requests: float          # in flight when admission stops
    rule: str                # which rule stops it: "feeder" or "router"
    held: np.ndarray         # per machine: the requests in flight that pass it (their KV is there)


def admission(hops, first: np.ndarray, count: np.ndarray, kv_tokens: np.ndarray, num_layers: int,
              serving, reserve: float) -> Admission:
    """admitted_requests, with where the admitted requests are: a request's route is fixed when it is admitted
    (its KV cache stays on the machines it passed), so where the router sent requests round full machines,
    those machines serve fewer of the requests in flight and the others more than the max flow's shares."""
    first, count = np.asarray(first), np.asarray(count)
    held = [int(m) for m in np.flatnonzero(count > 0)]
    requests_at = np.zeros(len(count))
    if not held:
        return Admission(0.0, "feeder", requests_at)
    end = first + count
    capacity = {m: float(kv_tokens[m]) * int(count[m]) for m in held}          # tokens, all its layers
    limit = {m: serving.machine_kv_fill * capacity[m] - reserve * int(count[m]) for m in held}
    layer_room = np.zeros(num_layers)
    for m in held:
        layer_room[first[m]:end[m]] += float(kv_tokens[m])
    succ: dict[int, list[tuple[int, float]]] = {}       # sender -> [(receiver, flow share)]
    for hop in hops:
        u = SOURCE if hop.sender == COORDINATOR else hop.sender
        v = SINK if hop.receiver == COORDINATOR else hop.receiver
        succ.setdefault(u, []).append((v, hop.share))
    for u, edges in succ.items():
        total = sum(s for _, s in edges)
        succ[u] = [(v, s) for v, s in edges if s >= MIN_EDGE_SHARE * total and (v == SINK or v in capacity)]
    later_first = sorted((m for m in held if m in succ), key=lambda m: -int(end[m]))

    def runs(u: int, v: int) -> int:
        return int(count[v]) if u == SOURCE else int(end[v] - end[u])

    def open_edges(u: int) -> list[tuple[int, float]]:
        return [(v, s) for v, s in succ.get(u, []) if v not in full]

    load = {m: 0.0 for m in held}
    full: set[int] = set()
    accepted = 0.0
    while True:
        # chance a request at each sender completes its route (later machines first)
        complete = {SINK: 1.0}
        for u in later_first + [SOURCE]:
            edges = open_edges(u)
            total = sum(s for _, s in edges)
            complete[u] = sum(s / total * complete.get(v, 0.0) for v, s in edges) if total > 0 else 0.0
        acceptance = complete[SOURCE]
        if acceptance < STALL_ACCEPTANCE:
            return Admission(accepted, "router", requests_at)
        # tokens each machine reserves per launch: routes picked in proportion to flow among open receivers
        reach = {SOURCE: 1.0}
        rate = {m: 0.0 for m in held}
        passing = np.zeros(len(count))          # admitted requests through each machine, per launch
        for u in [SOURCE] + later_first[::-1]:
            edges = open_edges(u)
            total = sum(s for _, s in edges)
            if reach.get(u, 0.0) <= 0 or total <= 0:
                continue
            for v, s in edges:
                if v != SINK:
                    share = reach[u] * s / total
                    reach[v] = reach.get(v, 0.0) + share
                    rate[v] += share * complete[v] * reserve * runs(u, v)
                    passing[v] += share * complete[v]
        # the next machine to fill, against the feeder's bound (per launch, fluid)
        step, filling = math.inf, None
        for m in held:
            if m not in full and rate[m] > 0:
                t = max(0.0, limit[m] - load[m]) / rate[m]
                if t < step:
                    step, filling = t, m
        used = np.zeros(num_layers)
        growth = np.zeros(num_layers)
        for m in held:
            used[first[m]:end[m]] += load[m] / int(count[m])
            growth[first[m]:end[m]] += rate[m] / int(count[m])
        with np.errstate(divide="ignore", invalid="ignore"):
            to_feeder = np.where(growth > 0, (serving.kv_fill * layer_room - used) / growth, math.inf)
        feeder_step = max(0.0, float(to_feeder.min()))
        if math.isinf(min(step, feeder_step)):
            return Admission(accepted, "router", requests_at)     # nothing reserves any more: no route holds one
        if feeder_step <= step:
            return Admission(accepted + acceptance * feeder_step, "feeder", requests_at + passing * feeder_step)
        for m in held:
            load[m] += rate[m] * step
        requests_at += passing * step
        accepted += acceptance * step
        full.add(filling)
