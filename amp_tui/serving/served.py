"""Search for what is served: the placement of most predicted decode tokens/s (or within latency bounds).

Candidates race on the serving model's prediction (model/predict.py): the disjoint pipelines of
pipelines.py, the shared paths of stages.py, the max-flow solver's placement (solver.py) and the
baselines. The max flow prices neither pipeline depth nor KV room, so it is kept as a bound on
tokens/s and for routing, not as the objective. The time limit is polled between evaluations (each a few tens of milliseconds) and
handed down to the max-flow solver, which polls inside its own loops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_tui.core.base.errors import Cancelled
from amp_tui.serving import pipelines, stages
from amp_tui.serving.model.predict import Prediction, benchmark_window, predict
from amp_tui.serving.model.routing import Routing, routing
from amp_tui.serving.network import Flow, Network, max_flow
from amp_tui.serving.placement import Placement
from amp_tui.serving.spec import ServingScenario, serving_profile_of

WINDOW_FINALISTS = 3     # candidates whose benchmark window is predicted first (more while time allows)
WINDOW_HOPE = 0.9        # a further candidate's window is predicted if its ramp estimate reaches this x the best
WINDOW_MORE = 8          # further candidates whose window is predicted, at most, while time allows
STAGES_KEPT = 12         # shared-path candidates evaluated (stages.py's screening picks them)
STAGES_SHARE = 0.25      # of the time limit, at most, for generating the shared-path candidates


@dataclass(frozen=True)
class Served:
    placement: Placement
    flow: Flow
    routing: Routing
    prediction: Prediction
    window: tuple[float, float] | None     # (decode, prompt) tokens/s over serving.benchmark's window

    @property
    def decode_tokens_per_s(self) -> float:
        """What the scenario asks to be measured: the benchmark window's average, else the steady state."""
        return self.window[0] if self.window is not None else self.prediction.decode_tokens_per_s

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.window[1] if self.window is not None else self.prediction.prompt_tokens_per_s


def machine_profiles(scenario: ServingScenario, net: Network) -> list:
    model = scenario.serving_model
    by_group = [serving_profile_of(g, model, scenario.serving.precision) for g in scenario.groups]
    return [by_group[int(g)] for g in net.machine_group]


def evaluate(scenario: ServingScenario, net: Network, placement: Placement, profiles=None,
             window: bool = True) -> Served:
    """The placement's max flow, routes and predicted figures."""
    profiles = profiles if profiles is not None else machine_profiles(scenario, net)
    model = scenario.serving_model
    first, count = placement.arrays()
    flow = max_flow(net, first, count)
    route = routing(net, flow, first, count, model.activation_bytes_per_token)
    prediction = predict(route, profiles, first, count, model.num_layers, scenario.serving,
                         model.activation_bytes_per_token)
    figures = None
    if window and scenario.serving.benchmark is not None and prediction.decode_tokens_per_s > 0:
        warmup, span, initial = scenario.serving.benchmark
        figures = benchmark_window(route, profiles, count, scenario.serving, model.activation_bytes_per_token,
                                   float(prediction.room_tokens.min()), warmup, span, initial)
        figures = (float(figures[0]), float(figures[1]))
    return Served(placement, flow, route, prediction, figures)


def _meets(served: Served, max_tpot_s: float | None, max_ttft_s: float | None) -> bool:
    p = served.prediction
    return ((max_tpot_s is None or p.tpot_s <= max_tpot_s) and (max_ttft_s is None or p.ttft_s <= max_ttft_s)
            and p.decode_tokens_per_s > 0)


def search(scenario: ServingScenario, net: Network, *, time_limit_s: float, starts: list[Placement],
           max_tpot_s: float | None = None, max_ttft_s: float | None = None,
           progress: Callable[[float], None] | None = None,
           should_cancel: Callable[[], bool] | None = None) -> tuple[Served | None, int, str]:
    """(best placement's evaluation or None if none meets the bounds, evaluations, what stopped it)."""
    started = time.perf_counter()
    profiles = machine_profiles(scenario, net)
    deadline = started + STAGES_SHARE * time_limit_s
    shared = stages.candidates(net, profiles, scenario.serving, keep=STAGES_KEPT,
                               stop=lambda: time.perf_counter() >= deadline or bool(should_cancel and should_cancel()))
    pool = ([placement for _, placement in pipelines.candidates(net, profiles, scenario.serving)] + shared
            + list(starts))
    evaluated: list[Served] = []
    stopped_by = "converged"
    for i, placement in enumerate(pool):
        if should_cancel is not None and should_cancel():
            raise Cancelled()
        if time.perf_counter() - started >= time_limit_s:
            stopped_by = "time limit"
            break
        evaluated.append(evaluate(scenario, net, placement, profiles, window=False))
        if progress is not None:
            progress((i + 1) / len(pool))
    feasible = [s for s in evaluated if _meets(s, max_tpot_s, max_ttft_s)]
    if not feasible:
        return None, len(evaluated), stopped_by
    feasible.sort(key=lambda s: -s.prediction.decode_tokens_per_s)
    if scenario.serving.benchmark is None:
        return feasible[0], len(evaluated), stopped_by
    # the best few at steady state and the first given start (the max-flow placement) first, then while time
    # allows those a young benchmark run should favour: it ranks them differently (its prompts churn, and
    # a placement of much KV room is still filling it)
    lead = {(p.first, p.count) for p in starts[:1]}
    first = feasible[:WINDOW_FINALISTS] + [s for s in feasible[WINDOW_FINALISTS:]
                                           if (s.placement.first, s.placement.count) in lead]
    rest = sorted((s for s in feasible[WINDOW_FINALISTS:] if all(s is not f for f in first)),
                  key=lambda s: -ramp_estimate(s, scenario.serving))[:WINDOW_MORE]
    finalists = []
    slowest = 0.0
    for i, served in enumerate(first + rest):
        if should_cancel is not None and should_cancel():
            raise Cancelled()
        if i >= len(first) and ramp_estimate(served, scenario.serving) < WINDOW_HOPE * max(
                s.decode_tokens_per_s for s in finalists):
            continue            # even its steady state, held to the ramp, is well below the best window
        if finalists and time.perf_counter() - started + slowest >= time_limit_s:
            stopped_by = "time limit"      # the next window would end past the limit
            break
        began = time.perf_counter()
        finalists.append(evaluate(scenario, net, served.placement, profiles))
        slowest = max(slowest, time.perf_counter() - began)
    best = max(finalists, key=lambda s: s.decode_tokens_per_s)
    return best, len(evaluated) + len(finalists), stopped_by


def ramp_estimate(served: Served, serving) -> float:
    """The steady state's decode tokens/s, scaled down where the benchmark run holds fewer requests than
    admitted by the end of its window (stages.ramp_requests)."""
    p = served.prediction
    held = stages.ramp_requests(serving, served.flow.value)
    return p.decode_tokens_per_s * min(1.0, held / p.admitted_requests) if p.admitted_requests > 0 else 0.0


def depth(placement: Placement) -> int:
    """Machines holding layers."""
    return int(np.count_nonzero(placement.count))
