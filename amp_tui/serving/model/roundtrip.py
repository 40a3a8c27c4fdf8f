"""One token's round trip at given loads: TPOT and TTFT from the machines' residences and the hops.

  TPOT   time per output token: the decode round trip, the visited machines' residences and the
         hops' decode times weighted by the share of requests taking them (compute.py, network.py)
  TTFT   time to first token: the prompt's round trip (its stays and its transfers), likewise

A RoundTrip holds what is fixed for a placement (the machines visited, the layers run there, the
hops) so that the loads can be priced many times (predict.py's bisection, window.py's ramp) with
every machine and hop at once.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from amp_tui.serving.model.compute import machine_loads, machines_of
from amp_tui.serving.model.network import queue_wait_s, transfer_s
from amp_tui.serving.model.routing import Routing


class RoundTrip:
    def __init__(self, route: Routing, profiles, held, serving, activation_bytes: float) -> None:
        self.visited = np.flatnonzero(route.visits > 0)
        self.share = route.visits[self.visited]
        self.machines = machines_of([profiles[m] for m in self.visited], [int(held[m]) for m in self.visited],
                                    route.layers[self.visited], serving.prompt_tokens, activation_bytes)
        hops = [h for h in route.hops if h.share > 0]
        fields = SimpleNamespace(latency_s=np.array([h.latency_s for h in hops]),
                                 bandwidth=np.array([h.bandwidth for h in hops]),
                                 activations=np.array([h.activations for h in hops], dtype=bool),
                                 share=np.array([h.share for h in hops]))
        # what does not move with the load: each hop's latency and its transfers (network.py)
        self.hop_share = fields.share
        self.token_send = transfer_s(fields, 1, activation_bytes)
        self.prompt_send = transfer_s(fields, serving.prompt_tokens, activation_bytes)
        self.decode_fixed = float(fields.share @ (fields.latency_s + self.token_send))
        self.prompt_fixed = float(fields.share @ (fields.latency_s + self.prompt_send))
        self.n = len(route.visits)
        self.prompt_tokens = serving.prompt_tokens
        self.output_tokens = serving.output_tokens
        self.activation_bytes = activation_bytes
        self._batch = None

    def __call__(self, decode_rate: float, prompt_rate: float | None = None):
        """(TPOT, TTFT, loads) at `decode_rate` tokens/s over the cluster and `prompt_rate` prompts/s (default:
        one per request, decode_rate / output tokens); loads: per machine (batch, busy, residence) arrays."""
        if prompt_rate is None:
            prompt_rate = decode_rate / self.output_tokens
        x, p = decode_rate * self.share, prompt_rate * self.share
        batch, _, busy, residence, stay = machine_loads(self.machines, x, p, start=self._batch)
        self._batch = batch          # the next call's start: callers move the loads a little at a time
        # every hop's wait for its link, paid by a decode token and a prompt alike (network.py)
        wait = float(self.hop_share @ queue_wait_s(self.prompt_send, self.token_send, self.hop_share, decode_rate,
                                                   prompt_rate)) if len(self.hop_share) else 0.0
        tpot = float(self.share @ residence) + self.decode_fixed + wait
        ttft = float(self.share @ stay) + self.prompt_fixed + wait
        loads = np.zeros((3, self.n))
        loads[0, self.visited], loads[1, self.visited], loads[2, self.visited] = batch, busy, residence
        return tpot, ttft, loads
